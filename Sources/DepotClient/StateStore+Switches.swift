import DepotCore
import Foundation

/// Switching a copy in and recording it, as one step as every reader sees it, whenever a process
/// is killed; and the repair an install step starts with.
///
/// A switch runs in one hold of the state's lock: the switch is written to the state
/// (``InstalledState/Switch``, ordered before what follows), the staged copy is exchanged into
/// `packs/<id>` (no other switch can change it meanwhile: they all hold the lock), and the record
/// is saved with the switch settled. A reader takes no lock, so between the two saves the disk decides: it
/// takes the switch's record exactly when the copy at `packs/<id>` is the staged one (its inode,
/// which a rename and an exchange keep), and the pack's record otherwise. So a kill at any instant
/// leaves a state whose reading names the copy on disk:
///
/// - before the switch is written: the old copy and its record; the staged copy is a leftover;
/// - after it, before the exchange: the old copy is on disk, so its record stands (until the next
///   writer completes the switch);
/// - after the exchange, before the record: the new copy is on disk, so the switch's record is read;
/// - while the old copy (now at the staged name) is removed: the new copy and its record;
/// - in the fallback without an exchange, between its renames: no copy, so no whole pack is read
///   (``InstalledCopy/isWhole(at:recorded:)``), until the next writer completes the switch.
///
/// Since its owner holds the lock from the switch's first save to its last, a switch another
/// writer finds under the lock is one whose owner was stopped in between (killed, or a save that
/// failed). That writer settles it if its copy is on disk; completes it if its staged copy is still
/// whole at its name (verified and flushed before the switch was written), the pack's record is
/// still the one it replaces and `packs/<id>` holds that copy or nothing; else drops it. Whoever
/// removes a staged copy renames it to a name of its own first (`FileSystem.discardTree`), so a
/// copy being removed is never completed.
extension StateStore {
    /// Switches `staged` in at `packs/<entry.id>` and records it as `entry`'s copy installed at
    /// `now`, in one hold of the lock; then the old copy (at the staged name after the exchange)
    /// is removed, with the lock released. Throws, with the previous copy and record in place, if
    /// the switch could not be written or the copy not exchanged in; succeeds once the copy is in
    /// place (a failed last save leaves the switch, which readers follow and the next writer settles).
    func switchIn(_ staged: StagedCopy, as entry: PackEntry, app: String, now: Date) throws {
        let destination = packPath(entry.id)
        let name = FileSystem.lastComponent(of: staged.path)
        // The new copy if the switch did not happen, the old one if it did.
        defer { FileSystem.discardTree(staged.path) }
        let record = InstalledState.Pack(entry, installedAt: now, copy: staged.copy)
        try holdingLock(timeout: 10) {
            var state = try load(app: app)
            settleSwitches(&state, completing: true)
            let begun = InstalledState.Switch(
                pack: entry.id, record: record, staged: name, replacing: System.identity(destination)?.inode,
                replacingSHA256: state.packs[entry.id]?.sha256, since: Date()
            )
            state.switches = (state.switches ?? []) + [begun]
            // Ordered before the exchange (one drive flush per install: the last save's).
            try save(state, .ordered)
            do {
                try Installer.switchInto(destination, from: staged.path)
            } catch {
                // The disk decides: a sync that failed after the exchange (or after the fallback's
                // renames) leaves the copy in. Its switch then stays listed, not settled: readers
                // follow the copy on disk, and if a power cut undoes the unsynced exchange, the
                // old copy's record still stands (the next writer settles it).
                guard holds(begun) else {
                    state.dropSwitch(staged: name)
                    try? save(state)
                    throw Installer.failure(error, pack: entry.id, folder: packs)
                }
                return
            }
            state.packs[entry.id] = record
            state.dropSwitch(staged: name)
            // The copy is in place: if this save fails (a full disk), the switch saved above is
            // what readers follow, and the next writer settles it.
            try? save(state)
        }
    }

    /// `state` as a reader sees it: each switch whose copy is at `packs/<id>` is that pack's record.
    func resolvingSwitches(_ state: InstalledState) -> InstalledState {
        guard let switches = state.switches else { return state }
        var resolved = state
        for begun in switches where holds(begun) { resolved.packs[begun.pack] = begun.record }
        return resolved
    }

    /// Under the lock, before a change is made: each switch whose copy is on disk is recorded;
    /// with `completing`, one that can be completed is (``completes(_:in:)``) and the others are
    /// dropped (a switch's owner holds the lock from its first save to its last: any switch seen
    /// here was stopped); without, they stay for a step that completes them (the extension's
    /// scheduling and the other small records do no exchange, walk and flush of a killed run's).
    func settleSwitches(_ state: inout InstalledState, completing: Bool) {
        guard let switches = state.switches else { return }
        var open: [InstalledState.Switch] = []
        for begun in switches {
            if holds(begun) || (completing && completes(begun, in: state)) {
                state.packs[begun.pack] = begun.record
            } else if !completing {
                open.append(begun)
            }
        }
        state.switches = open.isEmpty ? nil : open
    }

    /// Completes a switch stopped before its exchange (or between the renames of the fallback
    /// without one): its staged copy is at its name and whole as its record says, the pack's
    /// record is still the one it replaced, and `packs/<id>` holds that copy or nothing (purged,
    /// or moved aside by the fallback). Whether it is now on disk.
    private func completes(_ begun: InstalledState.Switch, in state: InstalledState) -> Bool {
        let (staged, destination) = (packs + "/" + begun.staged, packPath(begun.pack))
        guard state.packs[begun.pack]?.sha256 == begun.replacingSHA256,
              System.identity(destination).map({ $0.inode == begun.replacing }) ?? true,
              InstalledCopy.isWhole(at: staged, recorded: begun.record) else { return false }
        // The disk decides (a sync that fails after the exchange leaves the copy in). The copy it
        // replaced is then at the staged name: a leftover of a process that is gone.
        _ = try? Installer.switchInto(destination, from: staged)
        return holds(begun)
    }

    /// Whether the copy at `packs/<id>` is the switch's: the same inode and kind.
    private func holds(_ begun: InstalledState.Switch) -> Bool {
        let path = packPath(begun.pack)
        guard let inode = begun.record.inode, let identity = System.identity(path), identity.inode == inode else { return false }
        return FileSystem.isDirectory(path) == begun.record.unpacked
    }

    /// The repair an install step (and a sync) starts with, under the lock: switches settled,
    /// completed or dropped; a record whose copy is gone dropped (it is planned again); a copy
    /// that is not the one recorded (another inode: switched in by a former build's install
    /// killed before its record), or that nothing records, moved aside and its record dropped, so
    /// that it is planned again. Returns the copies moved aside, for the caller to delete once the
    /// lock is released.
    func reconcile(app: String) throws -> [String] {
        try removePacks(app: app) { state in
            let stale = state.packs.filter { id, record in
                guard let identity = System.identity(packPath(id)) else { return true }
                return record.inode.map { $0 != identity.inode } ?? false
            }
            let unrecorded = FileSystem.contents(of: packs).filter { !$0.hasPrefix(".") && state.packs[$0] == nil }
            return stale.keys.sorted() + unrecorded
        }.aside
    }

    /// Removes installed packs in one hold of the state's lock: `choose`, given the state, names
    /// them; their records are dropped and saved first, then their copies are moved aside (one
    /// rename each), so that a kill in between leaves a copy nothing records (which the next
    /// install step moves aside), never a record of a copy that is gone. Returns the ids removed
    /// and where their copies went: delete those trees once this returns
    /// (``Installer/removeTree(_:)``; a deletion can take seconds, and iOS terminates a suspended
    /// app that holds a file lock in a shared container). A copy that cannot be moved aside stays,
    /// recorded by nothing, for the next install step. Throws a `cancelled` `ClientError` while
    /// this process's locking is suspended (``suspendLocking(waitingUpTo:)``).
    @discardableResult
    public func removePacks(app: String, timeout: TimeInterval = 10, choosing choose: (InstalledState) throws -> [String]) throws -> (removed: [String], aside: [String]) {
        try holdingLock(timeout: timeout) {
            var state = try load(app: app)
            let before = state
            settleSwitches(&state, completing: true)
            let ids = try choose(state)
            for id in ids { state.packs[id] = nil }
            if state != before { try save(state) }
            return (ids, ids.compactMap { try? detach($0) })
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
