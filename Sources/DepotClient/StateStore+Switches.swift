import DepotCore
import Foundation

/// Switching a copy in and recording it, as one step as every reader sees it, whenever a process
/// is killed; and the repair an install step starts with.
///
/// A switch is written to the state (``InstalledState/Switch``, under the lock, durably) before
/// the staged copy is exchanged into `packs/<id>`, and settled after. Between the two, the disk
/// decides: a reader takes the switch's record exactly when the copy at `packs/<id>` is the staged
/// one (its inode, which a rename and an exchange keep), and the pack's record otherwise. So a
/// kill at any instant leaves a state whose reading names the copy on disk:
///
/// - before the switch is written: the old copy and its record; the staged copy is a leftover;
/// - after it, before the exchange: the old copy is on disk, so its record stands (until the next
///   writer completes the switch);
/// - after the exchange, before the record: the new copy is on disk, so the switch's record is read;
/// - while the old copy (now at the staged name) is removed: the new copy and, settled or not, its record;
/// - in the fallback without an exchange, between its renames: no copy, so no whole pack is read
///   (``InstalledCopy/isWhole(at:recorded:)``), until the next writer completes the switch.
///
/// The next process that changes the state settles a switch whose copy is on disk; completes one
/// whose owner is gone, if its staged copy is still at its name and nothing else was switched in
/// since (the copy was verified and flushed before the switch was written); and drops one that
/// cannot happen any more: its staged copy gone, its owner gone, or begun a day ago
/// (``Installer/removeLeftovers(in:maximumAge:ownedMaximumAge:now:)``'s rule) — before any
/// leftover is removed.
extension StateStore {
    /// Switches `staged` in at `packs/<entry.id>` and records it as `entry`'s copy installed at
    /// `now`: the switch written, the copy exchanged in, the record settled; then the old copy
    /// (at the staged name after the exchange) is removed, with the lock released.
    func switchIn(_ staged: StagedCopy, as entry: PackEntry, app: String, now: Date) throws {
        let destination = packPath(entry.id)
        let name = FileSystem.lastComponent(of: staged.path)
        // The new copy if the switch did not happen, the old one if it did.
        defer { Installer.removeTree(staged.path) }
        let record = InstalledState.Pack(entry, installedAt: now, copy: staged.copy)
        // Its age is the real clock's (`now` may be a caller's): a day-old switch is dropped.
        try withExclusiveControl(app: app) { state in
            let begun = InstalledState.Switch(pack: entry.id, record: record, staged: name, replacing: System.identity(destination)?.inode, since: Date())
            state.switches = (state.switches ?? []) + [begun]
        }
        do {
            try Installer.switchInto(destination, from: staged.path)
        } catch {
            // Not switched in: the switch goes (if this fails, the next writer drops it, its copy gone).
            _ = try? withExclusiveControl(app: app) { $0.dropSwitch(staged: name) }
            throw Installer.failure(error, pack: entry.id, folder: packs)
        }
        // Loading the state settles it (the copy is on disk); if another process switched its own
        // copy in meanwhile, that one's switch is settled instead and this one dropped.
        try withExclusiveControl(app: app) { $0.dropSwitch(staged: name) }
    }

    /// `state` as a reader sees it: each switch whose copy is at `packs/<id>` is that pack's record.
    func resolvingSwitches(_ state: InstalledState) -> InstalledState {
        guard let switches = state.switches else { return state }
        var resolved = state
        for begun in switches where holds(begun) { resolved.packs[begun.pack] = begun.record }
        return resolved
    }

    /// Under the lock, before a change is made: each switch whose copy is on disk is recorded;
    /// one whose owner is gone is completed when its staged copy (verified and flushed before
    /// the switch was written) is still whole at its name and nothing else was switched in since,
    /// else dropped; one that can no longer happen is dropped; the others (a live process's) stay.
    func settleSwitches(_ state: inout InstalledState, now: Date = Date()) {
        guard let switches = state.switches else { return }
        var open: [InstalledState.Switch] = []
        for begun in switches {
            if holds(begun) || completes(begun) {
                state.packs[begun.pack] = begun.record
            } else if !isVoid(begun, now: now) {
                open.append(begun)
            }
        }
        state.switches = open.isEmpty ? nil : open
    }

    /// Completes the switch of an owner that is gone, stopped before its exchange or between the
    /// renames of the fallback without one: its staged copy is at its name, and at `packs/<id>` is
    /// still the copy it replaces, or nothing. Whether it is now on disk.
    private func completes(_ begun: InstalledState.Switch) -> Bool {
        let (staged, destination) = (packs + "/" + begun.staged, packPath(begun.pack))
        guard ownerIsGone(begun), let inode = begun.record.inode, System.identity(staged)?.inode == inode,
              System.identity(destination).map({ $0.inode == begun.replacing }) ?? true else { return false }
        guard (try? Installer.switchInto(destination, from: staged)) != nil else { return false }
        // The copy it replaced is now at the staged name, a leftover of a process that is gone.
        return holds(begun)
    }

    private func ownerIsGone(_ begun: InstalledState.Switch) -> Bool {
        guard let owner = FileSystem.temporaryOwner(begun.staged) else { return false }
        return owner != System.processID && System.processIsGone(owner)
    }

    /// Whether the copy at `packs/<id>` is the switch's: the same inode and kind.
    private func holds(_ begun: InstalledState.Switch) -> Bool {
        let path = packPath(begun.pack)
        guard let inode = begun.record.inode, let identity = System.identity(path), identity.inode == inode else { return false }
        return FileSystem.isDirectory(path) == begun.record.unpacked
    }

    /// Whether a switch not on disk can never be: its staged copy is no longer at its name (removed,
    /// or it was switched in and out again), its owner is gone, or it began a day ago.
    private func isVoid(_ begun: InstalledState.Switch, now: Date) -> Bool {
        guard System.identity(packs + "/" + begun.staged)?.inode == begun.record.inode else { return true }
        return ownerIsGone(begun) || now.timeIntervalSince(begun.since) > 86_400
    }

    /// The repair an install step (and a sync) starts with, under the lock: switches settled or
    /// dropped; a record whose copy is gone dropped (it is planned again); a copy that is not the
    /// one recorded (another inode: switched in by a former build's install killed before its
    /// record), or that nothing records, moved aside and its record dropped, so that it is planned
    /// again. Returns the copies moved aside, for the caller to delete once the lock is released.
    func reconcile(app: String) throws -> [String] {
        try withExclusiveControl(app: app) { state -> [String] in
            var aside: [String] = []
            let switching = Set((state.switches ?? []).map(\.pack))
            for (id, record) in state.packs.sorted(by: { $0.key < $1.key }) where !switching.contains(id) {
                guard let identity = System.identity(packPath(id)) else {
                    state.packs[id] = nil
                    continue
                }
                if let inode = record.inode, identity.inode != inode {
                    if let moved = try detach(id) { aside.append(moved) }
                    state.packs[id] = nil
                }
            }
            for name in FileSystem.contents(of: packs) where !name.hasPrefix(".") && state.packs[name] == nil && !switching.contains(name) {
                if let moved = try detach(name) { aside.append(moved) }
            }
            return aside
        }
    }
}

extension InstalledState {
    /// Drops the switch of the copy staged as `staged`, if it is still listed.
    mutating func dropSwitch(staged: String) {
        guard var list = switches else { return }
        list.removeAll { $0.staged == staged }
        switches = list.isEmpty ? nil : list
    }
}
