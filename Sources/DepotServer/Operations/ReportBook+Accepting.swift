import DepotCore
import Foundation
import Logging
import Synchronization

/// What a server thread does with a report: check it against cached facts and queue it.
extension ReportBook {
    /// Checks `report` against what its channel served and queues it to be counted; throws
    /// ``DepotError`` (422) for a report about something the channel did not serve, and
    /// `503` with `Retry-After` when the queue is full.
    ///
    /// What a report costs does not depend on the app's history: the channel, the release
    /// number and the channel the release was published for are checked against kept facts
    /// (``ReleaseHistory``) before any listing is looked at; a listing not kept is read off the
    /// serving thread (``ReleaseListings``), the report answered `503` meanwhile. `charge` is
    /// told the extra work a report made the origin do (a listing read), in the rate limiter's
    /// tokens. `attested`: the report's App Attest assertion is checked by `proving`, which runs
    /// once every check above has passed (so that no signature is verified, and no key's counter
    /// advanced, for a report that would be refused anyway) and before the report is queued
    /// (what it throws refuses the report); the report then counts among the attested ones too,
    /// unless `proving` returns false (the key reported about that release already: counted once).
    func accept(
        _ report: DeviceReport, app: String, attested: Bool = false, now: Date = WallClock.now(), charge: (Double) -> Void = { _ in },
        proving: () throws -> Bool = { true }
    ) throws {
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
        let entries: Int
        if report.release == live.version {
            entries = live.entryCount
        } else {
            guard let facts = try releases.history.snapshot(app).release(report.release) else {
                throw DepotError(.unprocessable, "unknown_release", "app \(app) has no release \(report.release); the report was not counted")
            }
            guard facts.channel == report.channel || promoted(app: app, channel: report.channel, release: report.release) else {
                throw DepotError(.unprocessable, "release_not_served", "channel \(report.channel) of app \(app) did not serve release \(report.release); the report was not counted")
            }
            entries = facts.packs
        }
        let listing: ReleaseListings.Listing
        if let kept = listings.kept(app, report.release) {
            listing = kept
        } else if entries <= ReleaseListings.inlinePacks {
            // A small release: read here (the snapshot has shown it exists), a bounded decode.
            guard let manifest = try? releases.load(app, report.release).manifest else {
                throw DepotError(.unprocessable, "unknown_release", "app \(app) has no release \(report.release); the report was not counted")
            }
            charge(Double(entries) / 64)
            listing = listings.keep(app, manifest)
        } else {
            // Charged to the sender whose report has it read (not to those that ask again meanwhile).
            if listings.request(app, report.release) { charge(Double(entries) / 64) }
            throw HTTPFailure(status: 503, code: "reports_busy", message: "the origin is reading release \(report.release) of app \(app); send the report again in a second", headers: [("Retry-After", "1")])
        }
        for pack in report.packs {
            guard let most = listing.most(pack.id, pack.revision) else {
                throw DepotError(.unprocessable, "unknown_revision", "release \(report.release) of app \(app) does not list revision \(pack.revision) of pack \(pack.id); the report was not counted")
            }
            guard pack.bytes <= most else {
                throw DepotError(.unprocessable, "impossible_bytes", "pack \(pack.id) revision \(pack.revision) is \(most) bytes at most; the report was not counted")
            }
        }
        let proved = try proving()
        let item = Item(app: app, report: report, day: DayFigures.day(of: now), live: live.version, attested: attested && proved)
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

    /// Whether `channel` was given `release` by a promotion (a signed copy: a file that
    /// appears once and stays; only its presence is cached).
    private func promoted(app: String, channel: String, release: Int) -> Bool {
        let key = app + "\u{0}" + channel + "\u{0}\(release)"
        if promotions.withLock({ $0.contains(key) }) { return true }
        guard FileSystem.exists(releases.signedCopyPath(app, channel: channel, release)) else { return false }
        promotions.withLock { cache in
            if cache.count >= Self.promotionLimit { cache.remove(cache.first!) }
            cache.insert(key)
        }
        return true
    }
}
