import DepotCore
import Foundation
import Logging
import Synchronization

/// What a server thread does with a report: check it against cached facts and queue it.
extension ReportBook {
    /// Checks `report` against what its channel served and queues it to be counted; throws
    /// ``DepotError`` (422) for a report about something the channel did not serve, and
    /// `503` with `Retry-After` when the queue is full.
    func accept(_ report: DeviceReport, app: String, now: Date = Date()) throws {
        // The channel's live release (cached: no file is read per report once it is known).
        guard let live = try releases.current(app, channel: report.channel) else {
            throw DepotError(.unprocessable, "unknown_channel", "app \(app) has no channel \(report.channel); the report was not counted")
        }
        guard report.release <= live.version, report.release > 0 else {
            throw DepotError(.unprocessable, "unknown_release", "app \(app) has no release \(report.release) on channel \(report.channel); the report was not counted")
        }
        guard report.release >= live.version - Self.servedWindow else {
            throw DepotError(.unprocessable, "release_not_served", "channel \(report.channel) of app \(app) serves release \(live.version); reports about release \(report.release) are no longer counted")
        }
        let listing = try listing(app, release: report.release)
        guard report.release == live.version || served(listing, app: app, channel: report.channel, release: report.release) else {
            throw DepotError(.unprocessable, "release_not_served", "channel \(report.channel) of app \(app) did not serve release \(report.release); the report was not counted")
        }
        for pack in report.packs {
            guard let most = listing.sizes["\(pack.id)@\(pack.revision)"] else {
                throw DepotError(.unprocessable, "unknown_revision", "release \(report.release) of app \(app) does not list revision \(pack.revision) of pack \(pack.id); the report was not counted")
            }
            guard pack.bytes <= most else {
                throw DepotError(.unprocessable, "impossible_bytes", "pack \(pack.id) revision \(pack.revision) is \(most) bytes at most; the report was not counted")
            }
        }
        let item = Item(app: app, report: report, day: DayFigures.day(of: now), live: live.version)
        let (queued, backlog) = queue.withLock { queue -> (Bool, Bool) in
            // One app's reports take at most a quarter of the queue: a flood about one app does
            // not shed another's.
            let mine = queue.byApp[app] ?? 0
            guard queue.packs + report.packs.count <= Self.queueLimit, mine + report.packs.count <= Self.queueLimit / 4 else { return (false, false) }
            queue.items.append(item)
            queue.packs += report.packs.count
            queue.byApp[app] = mine + report.packs.count
            return (true, queue.packs >= Self.queueLimit / 8 && queue.packs - report.packs.count < Self.queueLimit / 8)
        }
        guard queued else {
            throw HTTPFailure(status: 503, code: "reports_busy", message: "the origin is counting too many reports; try again in a second", headers: [("Retry-After", "1")])
        }
        if backlog, let wake = wake.withLock({ $0 }) { wake() }
    }

    /// Whether `channel` served `release` (besides the live one): published for it, or signed
    /// for it by a promotion (a file that appears once and stays; only its presence is cached).
    private func served(_ listing: Listing, app: String, channel: String, release: Int) -> Bool {
        if listing.channel == channel { return true }
        let key = app + "\u{0}" + channel + "\u{0}\(release)"
        if listed.withLock({ $0.promoted.contains(key) }) { return true }
        guard FileSystem.exists(releases.signedCopyPath(app, channel: channel, release)) else { return false }
        listed.withLock { cache in
            if cache.promoted.count >= Self.listingLimit { cache.promoted = [] }
            cache.promoted.insert(key)
        }
        return true
    }

    /// What release `release` of `app` lists (its packs and its rollout's candidates), each with
    /// the most bytes a device downloads for it (the container, or a larger patch).
    private func listing(_ app: String, release: Int) throws -> Listing {
        let cacheKey = app + "\u{0}\(release)"
        if let known = listed.withLock({ $0.byRelease[cacheKey] }) { return known }
        guard let manifest = try releases.release(app, release)?.manifest else {
            throw DepotError(.unprocessable, "unknown_release", "app \(app) has no release \(release); the report was not counted")
        }
        var sizes: [String: Int64] = [:]
        for entry in manifest.allEntries {
            sizes["\(entry.id)@\(entry.revision)"] = max(entry.size, (entry.patches ?? []).map(\.size).max() ?? 0)
        }
        let listing = Listing(sizes: sizes, channel: manifest.channel ?? ReleaseStore.production)
        listed.withLock { cache in
            if cache.entries + sizes.count > Self.listingLimit { (cache.entries, cache.byRelease) = (0, [:]) }
            cache.byRelease[cacheKey] = listing
            cache.entries += sizes.count
        }
        return listing
    }
}
