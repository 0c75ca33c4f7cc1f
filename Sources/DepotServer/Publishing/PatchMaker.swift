import DepotCore
import Foundation
import Logging
import Synchronization

/// Makes patch downloads after a release, in the background: for each pack of an unmanaged
/// app's live releases that changed, a delta (DepotCore's "Delta" format) from each of its last
/// `depth` earlier revisions to the new plaintext, encrypted as a pack container under the
/// app's current pack key and stored as a blob like any pack. When a channel's patches are
/// stored, the channel's packs are published again with them as the next release (the same
/// containers and revisions: a device with the current revision downloads nothing). A release
/// never waits for this; a manifest without patches is complete.
///
/// A zip pack, which a device keeps unpacked, gets a tree patch (DepotCore's ``TreePatch``): its
/// entries taken from the installed tree, patched, or sent whole. Not patched: managed apps'
/// archives (the system downloads those), and a patch that would not save a tenth of the pack.
///
/// Bounded and fair (``PatchLimits``): one patch never takes more scratch space than the limit,
/// nor the data volume below its reserve (checked before starting and while unpacking: a zip
/// that inflates past either stops there); a patch that would is skipped with a log line and
/// `depot_patches_skipped_total`, and devices download the whole pack. Apps take turns, one
/// pack each: one app's backlog never holds another's patches back by more than one pack.
/// A patch release passes the same allowance guard as any release.
final class PatchMaker: Sendable {
    private let releases: ReleaseStore
    private let blobs: any BlobStore
    private let apps: AppStore
    private let folder: DataFolder
    private let urls: PublicURL
    private let storing: BlobsInFlight
    private let metrics: OriginMetrics
    private let logger: Logger
    private let settings: @Sendable (String) -> AppSettings?
    /// How many earlier revisions of a pack get a patch to the new one.
    let depth: Int
    let limits: PatchLimits
    private let queue = DispatchQueue(label: "assetdepot.patches")
    private let work = Mutex(Work())
    /// `channel app/pack@revision:sha256` tried in this process without a patch to show (not
    /// worth it, skipped, failed, or refused at release): not tried again on that channel. A
    /// patch made is found again through the releases that name it (``reusable(_:in:blobs:)``),
    /// so one swept since is made again.
    private let tried = Mutex<Set<String>>([])

    /// Apps waiting for their turn, and the patches made for each channel's live release that
    /// are not released yet (with the blobs they hold against removal).
    private struct Work {
        var turns: [String] = []
        var running = false
        var made: [String: [String: [String: Made]]] = [:]
    }

    private struct Made {
        var entry: PackEntry
        var patches: [PackPatch]
    }

    init(
        releases: ReleaseStore, blobs: any BlobStore, apps: AppStore, folder: DataFolder, urls: PublicURL, storing: BlobsInFlight,
        metrics: OriginMetrics, logger: Logger, depth: Int, limits: PatchLimits, settings: @escaping @Sendable (String) -> AppSettings?
    ) {
        (self.releases, self.blobs, self.apps, self.folder, self.urls, self.storing) = (releases, blobs, apps, folder, urls, storing)
        (self.metrics, self.logger, self.depth, self.limits, self.settings) = (metrics, logger, depth, limits, settings)
    }

    /// Makes `app`'s missing patches soon, off the caller's thread: the app joins the turns
    /// (once, however often it is scheduled).
    func schedule(_ app: String) { schedule([app]) }

    /// Every app in `apps` joins the turns, in that order, before any turn runs (start-up: the
    /// patches a crash or a stop left unmade).
    func schedule(_ apps: [String]) {
        guard depth > 0, !apps.isEmpty else { return }
        let start = work.withLock { work -> Bool in
            for app in apps where !work.turns.contains(app) { work.turns.append(app) }
            guard !work.running else { return false }
            work.running = true
            return true
        }
        if start { queue.async { [self] in run() } }
    }

    /// Waits until every patch scheduled so far is made and released (tests, a stopping server).
    func waitUntilIdle() { queue.sync {} }

    /// Turns until no app has work: each turn makes one pack's patches (or releases a channel's),
    /// then the app goes to the back of the line if it has more.
    private func run() {
        while let app = work.withLock({ work -> String? in
            guard !work.turns.isEmpty else {
                work.running = false
                return nil
            }
            return work.turns.removeFirst()
        }) {
            let more: Bool
            do {
                more = try turn(app)
            } catch {
                logger.warning("could not make patches", metadata: ["app": .string(app), "error": .string("\(error)")])
                discard(app)
                more = false
            }
            if more { work.withLock { if !$0.turns.contains(app) { $0.turns.append(app) } } }
        }
    }

    /// One turn of `app`: the first pack of a channel's live release still to try gets its
    /// patches; with none left, the channel's patches made so far are released. Returns whether
    /// the app may have more to do.
    private func turn(_ app: String) throws -> Bool {
        guard let settings = settings(app), !settings.isManaged else {
            discard(app)
            return false
        }
        let history = try releases.list(app)
        let channels = releases.channels(app)
        discard(app, keeping: Set(channels.keys))
        for channel in channels.keys.sorted() {
            guard let live = try releases.current(app, channel: channel) else { continue }
            let pending = work.withLock { $0.made[app]?[channel] ?? [:] }
            for entry in live.manifest.packs where entry.patches == nil && !entry.keyID.isEmpty {
                if let held = pending[entry.id], held.entry.sha256 == entry.sha256, held.entry.revision == entry.revision { continue }
                let key = Self.key(app, channel, entry)
                guard !tried.withLock({ $0.contains(key) }) else { continue }
                let earlier = Self.earlierRevisions(of: entry, in: history, depth: depth)
                var patches: [PackPatch] = []
                if !earlier.isEmpty {
                    if let reused = Self.reusable(entry, in: history, blobs: blobs) {
                        // Held from now until released, like the patches made here.
                        for patch in reused { storing.begin(patch.sha256) }
                        patches = reused
                    } else {
                        do {
                            patches = try make(entry, from: earlier, app: app)
                        } catch {
                            logger.warning("could not make patches", metadata: [
                                "app": .string(app), "channel": .string(channel), "pack": .string(entry.id), "error": .string("\(error)"),
                            ])
                        }
                    }
                }
                if patches.isEmpty {
                    tried.withLock { _ = $0.insert(key) }
                    if earlier.isEmpty { continue }
                } else {
                    keep(Made(entry: entry, patches: patches), app: app, channel: channel)
                }
                return true
            }
            if let made = work.withLock({ $0.made[app]?.removeValue(forKey: channel) }), !made.isEmpty {
                defer { end(made) }
                var released = false
                do {
                    released = try release(made, app: app, channel: channel, settings: settings)
                } catch {
                    logger.warning("could not release patches", metadata: ["app": .string(app), "channel": .string(channel), "error": .string("\(error)")])
                }
                if !released { tried.withLock { for item in made.values { $0.insert(Self.key(app, channel, item.entry)) } } }
                return true
            }
        }
        return false
    }

    private static func key(_ app: String, _ channel: String, _ entry: PackEntry) -> String {
        "\(channel) \(app)/\(entry.id)@\(entry.revision):\(entry.sha256)"
    }

    /// Keeps patches made for a channel's live release until it is released (ending the hold
    /// of any it replaces: made for a revision no longer live).
    private func keep(_ made: Made, app: String, channel: String) {
        let replaced = work.withLock { $0.made[app, default: [:]][channel, default: [:]].updateValue(made, forKey: made.entry.id) }
        if let replaced { end([replaced.entry.id: replaced]) }
    }

    /// Drops what was made for `app` and not released (all of it, or for channels not in
    /// `keeping`: removed since), ending its holds; garbage collection takes the blobs later.
    private func discard(_ app: String, keeping: Set<String>? = nil) {
        let dropped = work.withLock { work -> [[String: Made]] in
            guard let channels = work.made[app] else { return [] }
            let gone = channels.keys.filter { keeping?.contains($0) != true }
            return gone.compactMap { work.made[app]?.removeValue(forKey: $0) }
        }
        for made in dropped { end(made) }
    }

    private func end(_ made: [String: Made]) {
        for item in made.values { for patch in item.patches { storing.end(patch.sha256) } }
    }

    /// Publishes `channel`'s packs again naming their patches, as the next release: only onto
    /// the revisions they were made for (a publish that came first wins), and only if the
    /// allowance guard passes.
    /// Returns false when nothing was released: the allowance guard refused it (logged and
    /// counted), or no pack it was made for is live and unpatched any more.
    private func release(_ made: [String: Made], app: String, channel: String, settings: AppSettings) throws -> Bool {
        let version = try releases.current(app, channel: channel)?.version
        let blobs = blobs
        do {
            let published = try releases.publish(app, channel: channel, change: { packs in
                var changed = false
                let updated = packs.map { pack -> PackEntry in
                    guard pack.patches == nil, let made = made[pack.id], made.entry.sha256 == pack.sha256, made.entry.revision == pack.revision else { return pack }
                    // Under the publish lock, which garbage collection takes too: a held patch
                    // stays stored; one known to be gone (swept before it was held) is left out.
                    let stored = made.patches.filter { !blobs.isMissing($0.sha256) }
                    guard !stored.isEmpty else { return pack }
                    var pack = pack
                    pack.patches = stored
                    changed = true
                    return pack
                }
                return changed ? updated : nil
            }, check: Publisher.allowanceGuard(settings: settings, channel: channel, urls: urls))
            if let published {
                logger.info("released patches", metadata: [
                    "app": .string(app), "channel": .string(channel), "after": .stringConvertible(version ?? 0), "release": .stringConvertible(published.version),
                ])
            }
            return published != nil
        } catch let error as DepotError where error.code == "allowance_exceeded" {
            metrics.patchSkipped(app: app, reason: "allowance")
            logger.warning("patches not released: the release naming them would exceed the allowances shipped builds have; devices download whole packs", metadata: [
                "app": .string(app), "channel": .string(channel), "packs": .string(made.keys.sorted().joined(separator: ",")), "error": .string(error.message),
            ])
            return false
        }
    }

    /// Patches another release already names for this very container and revision, all still
    /// stored (a channel promoted to a release whose patches another channel's release carries).
    static func reusable(_ entry: PackEntry, in history: [Manifest], blobs: any BlobStore) -> [PackPatch]? {
        for manifest in history.sorted(by: { $0.version > $1.version }) {
            guard let other = manifest[pack: entry.id], other.sha256 == entry.sha256, other.revision == entry.revision,
                  let patches = other.patches, !patches.isEmpty, patches.allSatisfy({ blobs.contains($0.sha256) }) else { continue }
            return patches
        }
        return nil
    }

    /// The patches to `entry` from each earlier revision that fits the limits, logged.
    private func make(_ entry: PackEntry, from earlier: [PackEntry], app: String) throws -> [PackPatch] {
        let started = ContinuousClock.now
        let patches = try patches(for: entry, from: earlier, app: app)
        logger.info("made patches", metadata: [
            "app": .string(app), "pack": .string(entry.id), "revision": .stringConvertible(entry.revision),
            "from": .string(patches.map { "\($0.fromRevision):\($0.size)" }.joined(separator: ",")),
            "seconds": .stringConvertible((ContinuousClock.now - started).components.seconds),
        ])
        return patches
    }

    /// The pack's earlier revisions any release named, newest first, at most `depth`.
    static func earlierRevisions(of entry: PackEntry, in history: [Manifest], depth: Int) -> [PackEntry] {
        var seen = Set<Int>()
        var out: [PackEntry] = []
        for manifest in history.sorted(by: { $0.version > $1.version }) {
            guard let old = manifest[pack: entry.id], old.revision < entry.revision, old.plaintextSHA256 != entry.plaintextSHA256,
                  !old.keyID.isEmpty, ZipPack.isZip(contentType: old.contentType) == ZipPack.isZip(contentType: entry.contentType),
                  seen.insert(old.revision).inserted else { continue }
            out.append(old)
            if out.count == depth { break }
        }
        return out
    }

    /// Decrypts the new revision once, then for each earlier one: decrypt, delta, encrypt, store.
    /// Each step is checked against the limits first, with what it may write at most (a tree:
    /// its manifest's `installSize`, which unpacking enforces; a delta and its container: the
    /// new tree or plaintext, and a margin); unpacking also while it runs. Stored patch blobs
    /// are held against removal until released. A failure with one earlier revision skips it.
    private func patches(for entry: PackEntry, from earlier: [PackEntry], app: String) throws -> [PackPatch] {
        let keys = try apps.packKeys(app)
        let scratch = folder.uploads + "/" + PatchLimits.scratchPrefix + Hex.encode(SecureRandom.bytes(8))
        let zip = ZipPack.isZip(contentType: entry.contentType)
        func clear(_ suffixes: [String]) {
            for suffix in suffixes {
                if suffix.hasSuffix("-tree") { try? FileManager.default.removeItem(atPath: scratch + suffix) } else { FileSystem.remove(scratch + suffix) }
            }
        }
        defer { clear([".new", ".old", ".delta", ".container", ".new-tree", ".old-tree"]) }
        var budget = ScratchBudget(limits: limits, volume: folder.uploads)
        let oldest = earlier.map { $0.size + (zip ? $0.installSize : 0) }.min() ?? 0
        let declaredTree = zip ? entry.installSize : 0
        if let refusal = budget.refusal(toWrite: entry.size + declaredTree + oldest + PatchLimits.deltaAndContainer(upTo: max(entry.size, declaredTree))) {
            skip(entry, app: app, refusal)
            return []
        }
        guard try decrypt(entry, to: scratch + ".new", keys: keys.ring) else { return [] }
        budget.used = entry.size
        var target = entry.size
        if zip {
            guard let tree = try extract(scratch + ".new", into: scratch + ".new-tree", budget: budget, declared: entry.installSize, entry: entry, app: app) else { return [] }
            budget.used += tree
            target = max(target, tree)
        }
        var out: [PackPatch] = []
        for old in earlier {
            clear([".old", ".delta", ".container", ".old-tree"])
            if let refusal = budget.refusal(toWrite: old.size + (zip ? old.installSize : 0) + PatchLimits.deltaAndContainer(upTo: target)) {
                skip(entry, app: app, refusal, from: old.revision)
                continue
            }
            do {
                guard let patch = try patch(to: entry, from: old, zip: zip, scratch: scratch, budget: budget, target: target, keys: keys, app: app) else { continue }
                out.append(patch)
            } catch {
                logger.warning("could not make a patch", metadata: [
                    "app": .string(app), "pack": .string(entry.id), "revision": .stringConvertible(entry.revision), "from": .stringConvertible(old.revision),
                    "error": .string("\(error)"),
                ])
            }
        }
        return out
    }

    /// One patch, from `old` to the new revision already in `scratch.new` (and `.new-tree`),
    /// stored and held; nil when it is not worth it or `old` is gone or too large.
    private func patch(
        to entry: PackEntry, from old: PackEntry, zip: Bool, scratch: String, budget: ScratchBudget, target: Int64, keys: (ring: KeyRing, current: String),
        app: String
    ) throws -> PackPatch? {
        guard try decrypt(old, to: scratch + ".old", keys: keys.ring) else { return nil }
        let size: Int64
        if zip {
            // A device keeps a zip unpacked: the patch is made between the two trees.
            var oldBudget = budget
            oldBudget.used += old.size
            guard let tree = try extract(scratch + ".old", into: scratch + ".old-tree", budget: oldBudget, declared: old.installSize, entry: entry, app: app, from: old.revision) else {
                return nil
            }
            // What the old tree really took, before the delta and its container are written.
            oldBudget.used += tree
            if let refusal = oldBudget.refusal(toWrite: PatchLimits.deltaAndContainer(upTo: target)) {
                skip(entry, app: app, refusal, from: old.revision)
                return nil
            }
            size = try TreePatch.make(base: scratch + ".old-tree", target: scratch + ".new-tree", to: scratch + ".delta").size
        } else {
            // The plaintexts' SHA-256 are the manifest's: their containers' hashes and every
            // segment's authentication were checked as they were decrypted.
            guard let oldDigest = Hex.decode(old.plaintextSHA256), let newDigest = Hex.decode(entry.plaintextSHA256) else { return nil }
            size = try DeltaEncoder.encode(
                base: scratch + ".old", target: scratch + ".new", to: scratch + ".delta", baseSHA256: oldDigest, targetSHA256: newDigest
            ).size
        }
        // Worth it only if it saves a tenth of the pack.
        guard size * 10 < entry.size * 9 else { return nil }
        let container = try encrypt(scratch + ".delta", to: scratch + ".container", keys: keys)
        storing.begin(container.sha256)
        do {
            try blobs.put(temporaryFile: scratch + ".container", sha256: container.sha256)
        } catch {
            storing.end(container.sha256)
            throw error
        }
        return PackPatch(
            fromRevision: old.revision, fromPlaintextSHA256: old.plaintextSHA256, url: urls.blob(app, container.sha256), size: container.size,
            sha256: container.sha256
        )
    }

    /// Unpacks a revision's zip within the budget and no further than its manifest's
    /// `installSize` (a device refuses more); returns what it charged (bytes, and a block per
    /// entry), or nil (the patch skipped, logged, what was unpacked removed) when a limit stopped it.
    private func extract(
        _ zip: String, into tree: String, budget: ScratchBudget, declared: Int64, entry: PackEntry, app: String, from revision: Int? = nil
    ) throws -> Int64? {
        // Counted in the archive's directory first: a tree of a million entries is not unpacked at all.
        if let files = try? ZipPack.inspect(zip).files, files > PatchLimits.maximumEntries {
            skip(entry, app: app, "it has \(files) files, more than the \(PatchLimits.maximumEntries) entries a patch is made for", from: revision)
            return nil
        }
        let check = budget.extractionLimit()
        var charged: Int64 = 0
        do {
            try ZipPack.extract(zip, into: tree) { written, entries in
                if written > declared { return "it unpacks to more than its manifest's installSize of \(declared) bytes (a device refuses it too)" }
                if entries > PatchLimits.maximumEntries { return "it has more than \(PatchLimits.maximumEntries) entries" }
                charged = PatchLimits.charge(written: written, entries: entries)
                return check(charged)
            }
            return charged
        } catch .limitReached(let why) {
            try? FileManager.default.removeItem(atPath: tree)
            skip(entry, app: app, why, from: revision)
            return nil
        }
    }

    /// Logs and counts a patch not made for want of space (or a zip that lies about its size).
    private func skip(_ entry: PackEntry, app: String, _ why: String, from revision: Int? = nil) {
        let reason = why.contains("reserve") ? "disk_reserve" : why.contains("installSize") ? "oversized_zip" : why.contains("entries") ? "too_many_entries" : "scratch_limit"
        metrics.patchSkipped(app: app, reason: reason)
        logger.warning("patch skipped: devices download the whole pack", metadata: [
            "app": .string(app), "pack": .string(entry.id), "revision": .stringConvertible(entry.revision),
            "from": .string(revision.map(String.init) ?? "any"), "reason": .string(why),
        ])
    }

    /// A revision's plaintext, from its blob; false if the blob is gone.
    private func decrypt(_ entry: PackEntry, to path: String, keys: KeyRing) throws -> Bool {
        guard let blob = try blobs.open(entry.sha256) else { return false }
        defer { try? blob.file.close() }
        let summary = try PackDecryptor.decrypt(blob.file, to: path, keyRing: keys, expectedSize: entry.size, hashingPlaintext: false)
        guard summary.sha256 == entry.sha256 else { throw DepotError.conflict("blob_mismatch", "blob \(entry.sha256) does not hash to its name") }
        return true
    }

    /// The delta as a pack container under the app's current key.
    private func encrypt(_ path: String, to destination: String, keys: (ring: KeyRing, current: String)) throws -> PackSummary {
        let output = try FileDescriptor(path: destination, flags: O_WRONLY | O_CREAT | O_TRUNC, mode: 0o644)
        let encryptor = try PackEncryptor(header: PackHeader(keyID: keys.current), masterKey: keys.ring[keys.current]!) { try output.write($0) }
        let input = try FileDescriptor.openForReading(path)
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = try buffer.withUnsafeMutableBytes { try input.read(into: $0) }
            if n == 0 { break }
            try buffer.withUnsafeBytes { try encryptor.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }
        let summary = try encryptor.finish()
        try output.sync()
        try output.close()
        return summary
    }
}
