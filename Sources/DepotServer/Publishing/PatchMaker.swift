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
    let releases: ReleaseStore
    let blobs: any BlobStore
    let apps: AppStore
    let folder: DataFolder
    let urls: PublicURL
    let storing: BlobsInFlight
    let metrics: OriginMetrics
    let logger: Logger
    private let settings: @Sendable (String) -> AppSettings?
    /// How many earlier revisions of a pack get a patch to the new one.
    let depth: Int
    let limits: PatchLimits
    /// Signalled when work is scheduled or the maker stops; its thread (``start()``) waits on it.
    private let wake = DispatchSemaphore(value: 0)
    private let work = Mutex(Work())
    /// Per app, what patch making has done (``State``): kept in memory, read from the app's
    /// `patch-state` once per process, written when the app's turns run out (and at most every
    /// few seconds while they last), so that a restart neither searches the history nor makes
    /// again what was not worth making: it looks only at channels that moved since.
    let states = Mutex<[String: State]>([:])
    /// Per app, what was tried in this process without a patch for a reason that may pass (a
    /// limit or the disk's reserve, an error, the allowance guard): not tried again until a
    /// restart, and never written to `patch-state`.
    let triedHere = Mutex<[String: Set<String>]>([:])
    /// Whether the pack being made met such a reason (set by the making, read after it).
    let interrupted = Mutex(false)

    /// Apps waiting for their turn, and the patches made for each channel's live release that
    /// are not released yet (with the blobs they hold against removal).
    private struct Work {
        var turns: [String] = []
        var running = false
        /// The app whose turn runs now (nil between turns and when idle).
        var current: String?
        var thread = false
        var stopped = false
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
        let (start, thread) = work.withLock { work -> (Bool, Bool) in
            guard !work.stopped else { return (false, false) }
            for app in apps where !work.turns.contains(app) { work.turns.append(app) }
            guard !work.running else { return (false, false) }
            work.running = true
            defer { work.thread = true }
            return (true, !work.thread)
        }
        // A thread of its own, made at the first work, stopped with the server. Not a lower
        // priority: it takes the publish lock to release patches, and a thread starved meanwhile
        // would hold up every publish (its rests bound its share instead).
        if thread {
            Thread.detachNewThread { [self] in
                while true {
                    wake.wait()
                    if work.withLock({ $0.stopped }) { break }
                    run()
                }
            }
        }
        if start { wake.signal() }
    }

    /// Apps whose patches are being made or wait their turn (0: idle).
    var waiting: Int { work.withLock { work in work.turns.count + (work.current.map { !work.turns.contains($0) } ?? false ? 1 : 0) } }

    /// Waits until every patch scheduled so far is made and released (tests, a stopping server).
    func waitUntilIdle() {
        while work.withLock({ $0.running }) { Thread.sleep(forTimeInterval: 0.01) }
    }

    /// Ends the maker's thread after the turn in hand (the server stops): what is left is
    /// looked at again at the next start.
    func stop() {
        work.withLock { $0.stopped = true }
        wake.signal()
    }

    /// Turns until no app has work: each turn makes one pack's patches (or releases a channel's),
    /// then the app goes to the back of the line if it has more. The thread rests after each turn
    /// that made patches so that it takes at most ``PatchLimits/share`` of its time (CPU and disk
    /// alike): a publish storm never takes more than that share of a core from serving.
    private func run() {
        while let app = work.withLock({ work -> String? in
            guard !work.turns.isEmpty, !work.stopped else {
                work.running = false
                work.current = nil
                return nil
            }
            work.current = work.turns.first
            return work.turns.removeFirst()
        }) {
            let more: Bool
            let started = ContinuousClock.now
            let cpu = Self.threadCPUSeconds()
            do {
                more = try turn(app)
            } catch {
                logger.warning("could not make patches", metadata: ["app": .string(app), "error": .string("\(error)")])
                discard(app)
                more = false
            }
            let spent = Self.threadCPUSeconds() - cpu
            metrics.backgroundWork("patches", seconds: spent)
            let took = ContinuousClock.now - started
            if more, took > .milliseconds(5), limits.share < 1 {
                let seconds = Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18
                Thread.sleep(forTimeInterval: seconds * (1 - limits.share) / limits.share)
            }
            if more { work.withLock { if !$0.turns.contains(app) { $0.turns.append(app) } } }
        }
        // Decrypting, extracting and diffing freed far more than they keep: given back now, not
        // at the next maintenance pass (an hour on the defaults).
        MemoryTrim.afterLargeWork()
        metrics.backgroundPass("patches")
    }

    /// One turn of `app`: the first pack of a channel's live release still to try gets its
    /// patches; with none left, the channel's patches made so far are released. Returns whether
    /// the app may have more to do. Reads no release file: the channels' pointers, their live
    /// releases (kept in memory) and the app's ``ReleaseIndex``; channels whose release was
    /// settled are passed over.
    private func turn(_ app: String) throws -> Bool {
        guard let settings = settings(app), !settings.isManaged else {
            discard(app)
            return false
        }
        let index = try releases.index(app)
        let channels = releases.channels(app)
        discard(app, keeping: Set(channels.keys))
        let known = state(app)
        for channel in channels.keys.sorted() where known.settled[channel] != channels[channel] {
            guard let live = try releases.current(app, channel: channel) else { continue }
            let pending = work.withLock { $0.made[app]?[channel] ?? [:] }
            for entry in try live.manifest.packs where entry.patches == nil && !entry.keyID.isEmpty {
                if let held = pending[entry.id], held.entry.sha256 == entry.sha256, held.entry.revision == entry.revision { continue }
                let key = Self.key(app, channel, entry)
                guard !known.tried.contains(key), triedHere.withLock({ $0[app]?.contains(key) }) != true else { continue }
                let earlier = index.earlierRevisions(of: entry, depth: depth)
                // A new pack, or one whose earlier revisions are not patchable: nothing to make.
                if earlier.isEmpty { continue }
                var patches: [PackPatch] = []
                if let reused = index.patches(for: entry), !reused.isEmpty, reused.allSatisfy({ blobs.contains($0.sha256) }) {
                    // Held from now until released, like the patches made here.
                    for patch in reused { storing.begin(patch.sha256) }
                    patches = reused
                } else {
                    interrupted.withLock { $0 = false }
                    do {
                        patches = try make(entry, from: earlier, app: app)
                    } catch {
                        interrupted.withLock { $0 = true }
                        logger.warning("could not make patches", metadata: [
                            "app": .string(app), "channel": .string(channel), "pack": .string(entry.id), "error": .string("\(error)"),
                        ])
                    }
                }
                if patches.isEmpty {
                    // Not worth it (or nothing to make it from): for good. Otherwise until a restart.
                    if interrupted.withLock({ $0 }) {
                        triedHere.withLock { _ = $0[app, default: []].insert(key) }
                    } else {
                        update(app) { _ = $0.tried.insert(key) }
                    }
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
                if !released {
                    triedHere.withLock { for item in made.values { $0[app, default: []].insert(Self.key(app, channel, item.entry)) } }
                }
                return true
            }
            // Settled for good only when nothing on it waits for a reason that may pass.
            let waiting = try triedHere.withLock { here in try live.manifest.packs.contains { here[app]?.contains(Self.key(app, channel, $0)) == true } }
            if !waiting { update(app) { $0.settled[channel] = live.version } }
        }
        prune(app, channels: channels)
        return false
    }

    static func key(_ app: String, _ channel: String, _ entry: PackEntry) -> String {
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
    /// allowance guard passes. Returns false when nothing was released: the allowance guard refused it (logged and
    /// counted), or no pack it was made for is live and unpatched any more.
    private func release(_ made: [String: Made], app: String, channel: String, settings: AppSettings) throws -> Bool {
        let version = try releases.current(app, channel: channel)?.version
        let blobs = blobs
        do {
            let published = try releases.publish(app, channel: channel, rolloutChange: .keep, change: { packs in
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
}
