import DepotCore
import Foundation
import Synchronization

/// What releases list, as reports are checked against them: per `pack@revision`, the most bytes
/// a device downloads for it. Kept for the releases reports name, evicting the least recently
/// used release when full (never everything); a new release's listing is kept as it is
/// published. A release not kept is read off the serving threads: small ones (at most
/// ``inlinePacks`` packs, a bounded decode) at once, larger ones by one loader thread that
/// works at most a third of its time, while the report is answered `503` with `Retry-After`.
/// So a flood of reports about releases that are not kept costs the origin at most that third
/// of a core, whatever the releases hold.
final class ReleaseListings: Sendable {
    /// One release's listing: sorted 64-bit keys of `pack@revision` and each one's most bytes
    /// (16 bytes an entry: a window of 64 releases of 3,500 packs is 3.6 MB).
    struct Listing: Sendable {
        let keys: [UInt64]
        let most: [Int64]
        /// The channel the release was published for.
        let channel: String

        init(_ manifest: Manifest) {
            var pairs: [(UInt64, Int64)] = []
            pairs.reserveCapacity(manifest.packs.count)
            for entry in manifest.allEntries {
                pairs.append((Self.key(entry.id, entry.revision), max(entry.size, (entry.patches ?? []).map(\.size).max() ?? 0)))
            }
            pairs.sort { $0.0 < $1.0 || $0.0 == $1.0 && $0.1 > $1.1 }
            keys = pairs.map(\.0)
            most = pairs.map(\.1)
            channel = manifest.channel ?? ReleaseStore.production
        }

        /// A 64-bit key (this process's seed): a collision would only let a report count a pack
        /// revision its release does not list, with at most another's bytes.
        static func key(_ id: String, _ revision: Int) -> UInt64 {
            var hasher = Hasher()
            hasher.combine(id)
            hasher.combine(revision)
            return UInt64(bitPattern: Int64(hasher.finalize()))
        }

        /// The most bytes of revision `revision` of pack `id`, or nil if the release does not list it.
        func most(_ id: String, _ revision: Int) -> Int64? {
            let key = Self.key(id, revision)
            var (low, high) = (0, keys.count)
            while low < high {
                let middle = (low + high) / 2
                if keys[middle] < key { low = middle + 1 } else { high = middle }
            }
            return low < keys.count && keys[low] == key ? most[low] : nil
        }
    }

    /// Entries kept in all (16 MiB of keys and sizes).
    static let entryLimit = 1 << 20
    /// A release of at most this many packs is read on the serving thread when it is not kept.
    static let inlinePacks = 256
    /// Releases waiting for the loader, at most, and at most of one app (one app's flood of
    /// reports does not keep another's releases out).
    static let queueLimit = 64
    static let queueLimitPerApp = 8
    /// Releases kept at most (what an eviction looks through).
    static let releaseLimit = 4_096

    private struct Kept {
        var entries = 0
        var tick: UInt64 = 0
        var byRelease: [String: (listing: Listing, used: UInt64)] = [:]
    }
    private let kept = Mutex(Kept())
    private let entryLimit: Int
    /// Releases the loader is asked for (app, version), and their keys.
    private let waiting = Mutex<(queue: [(String, Int)], keys: Set<String>)>(([], []))
    private let wake = DispatchSemaphore(value: 0)
    private let load: @Sendable (String, Int) -> Manifest?

    /// `load` reads a release (nil if it has none by that number).
    init(entryLimit: Int = ReleaseListings.entryLimit, load: @escaping @Sendable (String, Int) -> Manifest?) {
        self.entryLimit = entryLimit
        self.load = load
        let thread = Thread { [weak self, wake] in
            // Ends once the listings are gone (an origin stopped): it looks each second.
            while true {
                _ = wake.wait(timeout: .now() + 1)
                guard let self else { return }
                self.loadNext()
            }
        }
        thread.name = "release listings"
        thread.start()
    }

    private static func key(_ app: String, _ version: Int) -> String { app + "\u{0}\(version)" }

    /// The kept listing of release `version` of `app`.
    func kept(_ app: String, _ version: Int) -> Listing? {
        kept.withLock { kept in
            let key = Self.key(app, version)
            guard let hit = kept.byRelease[key] else { return nil }
            kept.tick += 1
            kept.byRelease[key]?.used = kept.tick
            return hit.listing
        }
    }

    /// Keeps `manifest`'s listing (a release just published, or just read).
    @discardableResult
    func keep(_ app: String, _ manifest: Manifest) -> Listing {
        let listing = Listing(manifest)
        let key = Self.key(app, manifest.version)
        kept.withLock { kept in
            if let old = kept.byRelease.removeValue(forKey: key) { kept.entries -= old.listing.keys.count }
            // The least recently used releases go, one at a time, until this one fits.
            while kept.entries + listing.keys.count > entryLimit || kept.byRelease.count >= Self.releaseLimit,
                  let oldest = kept.byRelease.min(by: { $0.value.used < $1.value.used }) {
                kept.entries -= oldest.value.listing.keys.count
                kept.byRelease[oldest.key] = nil
            }
            kept.tick += 1
            kept.byRelease[key] = (listing, kept.tick)
            kept.entries += listing.keys.count
        }
        return listing
    }

    /// Lets go of `app`'s kept listings that no report can name any more: those outside every
    /// window in `windows` (a channel's live release and the numbers a report about it may name).
    /// Without it a busy app's every release stays until the caps are reached (at a release of
    /// 350 packs every 2 s, an hour and more of growing memory before the level).
    func forget(_ app: String, outside windows: [ClosedRange<Int>]) {
        let prefix = app + "\u{0}"
        kept.withLock { kept in
            for (key, value) in kept.byRelease where key.hasPrefix(prefix) {
                guard let version = Int(key.dropFirst(prefix.count)), !windows.contains(where: { $0.contains(version) }) else { continue }
                kept.entries -= value.listing.keys.count
                kept.byRelease[key] = nil
            }
        }
    }

    /// Asks the loader for release `version` of `app`; true when this call queued it (false:
    /// already asked for, or the queue is full).
    @discardableResult
    func request(_ app: String, _ version: Int) -> Bool {
        let key = Self.key(app, version)
        let queued = waiting.withLock { waiting -> Bool in
            if waiting.keys.contains(key) { return false }
            guard waiting.queue.count < Self.queueLimit, waiting.queue.count(where: { $0.0 == app }) < Self.queueLimitPerApp else { return false }
            waiting.queue.append((app, version))
            waiting.keys.insert(key)
            return true
        }
        if queued { wake.signal() }
        return queued
    }

    /// The loader's step: one release, then a rest twice as long as its read took.
    private func loadNext() {
        guard let (app, version) = waiting.withLock({ $0.queue.first }) else { return }
        let started = ContinuousClock.now
        if kept(app, version) == nil, let manifest = load(app, version) { keep(app, manifest) }
        let took = ContinuousClock.now - started
        waiting.withLock { waiting in
            waiting.queue.removeFirst()
            waiting.keys.remove(Self.key(app, version))
        }
        Thread.sleep(forTimeInterval: 2 * (Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18))
    }
}
