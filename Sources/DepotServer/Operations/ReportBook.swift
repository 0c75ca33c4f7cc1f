import DepotCore
import Foundation
import Logging
import Synchronization

/// One day's counts of device reports for one app, as kept on disk
/// (`apps/<app>/reports/<day>.json`) and in the bucket (`apps/<app>/reports/<origin>/<day>.json`):
/// per channel the number of reports, and per channel, release, pack revision, outcome and
/// error kind a count and the bytes. Nothing names a device or an address.
struct DayFigures: Codable, Hashable, Sendable {
    /// What one count is about.
    struct Key: Codable, Hashable, Sendable {
        var channel: String
        var release: Int
        var pack: String
        var revision: Int
        var outcome: DeviceReport.Outcome
        var error: String?
    }

    /// One count: its key's fields, `count` and `bytes`, in one flat JSON object.
    struct Row: Codable, Hashable, Sendable {
        var key: Key
        var count: Int64
        var bytes: Int64

        private enum CodingKeys: String, CodingKey { case count, bytes }

        init(key: Key, count: Int64, bytes: Int64) { (self.key, self.count, self.bytes) = (key, count, bytes) }

        init(from decoder: any Decoder) throws {
            key = try Key(from: decoder)
            let container = try decoder.container(keyedBy: CodingKeys.self)
            (count, bytes) = (try container.decode(Int64.self, forKey: .count), try container.decode(Int64.self, forKey: .bytes))
        }

        func encode(to encoder: any Encoder) throws {
            try key.encode(to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(count, forKey: .count)
            try container.encode(bytes, forKey: .bytes)
        }
    }

    /// `YYYY-MM-DD`, UTC.
    var day: String
    /// Reports per channel.
    var reports: [String: Int64] = [:]
    var rows: [Row] = []

    /// The counts by key (memory's form).
    var byKey: [Key: (count: Int64, bytes: Int64)] {
        var out: [Key: (count: Int64, bytes: Int64)] = [:]
        for row in rows {
            let before = out[row.key] ?? (0, 0)
            out[row.key] = (ReportBook.adding(before.count, row.count), ReportBook.adding(before.bytes, row.bytes))
        }
        return out
    }

    init(day: String) { self.day = day }

    init(day: String, reports: [String: Int64], counts: [Key: (count: Int64, bytes: Int64)]) {
        self.day = day
        self.reports = reports
        rows = counts.map { Row(key: $0.key, count: $0.value.count, bytes: $0.value.bytes) }.sorted { a, b in
            let (x, y) = (a.key, b.key)
            return (x.channel, x.release, x.pack, x.revision, x.outcome.rawValue, x.error ?? "") < (y.channel, y.release, y.pack, y.revision, y.outcome.rawValue, y.error ?? "")
        }
    }

    /// The sum of several origins' figures for the same day.
    static func sum(_ parts: [DayFigures], day: String) -> DayFigures {
        var reports: [String: Int64] = [:]
        var counts: [Key: (count: Int64, bytes: Int64)] = [:]
        for part in parts {
            reports.merge(part.reports, uniquingKeysWith: ReportBook.adding)
            for (key, value) in part.byKey {
                let before = counts[key] ?? (0, 0)
                counts[key] = (ReportBook.adding(before.count, value.count), ReportBook.adding(before.bytes, value.bytes))
            }
        }
        return DayFigures(day: day, reports: reports, counts: counts)
    }

    static func day(of date: Date) -> String {
        let parts = Calendar(identifier: .gregorian).dateComponents(in: TimeZone(identifier: "UTC")!, from: date)
        return String(format: "%04d-%02d-%02d", parts.year ?? 0, parts.month ?? 0, parts.day ?? 0)
    }

    static func isDay(_ text: String) -> Bool {
        text.utf8.count == 10 && text.utf8.enumerated().allSatisfy { index, c in index == 4 || index == 7 ? c == UInt8(ascii: "-") : (48...57).contains(c) }
    }
}

/// Device reports, counted at a constant cost off the serving path.
///
/// A server thread only checks a report against what the app released (cached: no file is
/// read per report) and puts it in a bounded queue; when the queue is full the report is shed
/// with `503` and `Retry-After` (one app's reports take at most a quarter of it). The writer thread (``tick(now:)``, four times a second) takes
/// the queue and adds each report to its app's counts of the day in memory — hash lookups, no
/// copy, whatever the day holds — and once a second appends what changed to the day's log
/// (``ReportDayFile``) and fsyncs it; with object storage it puts this origin's whole day in
/// the bucket at most every ``bucketInterval`` (or twenty times as long as the last put took;
/// and at stop), so that replicas accept reports
/// and the writer sums every origin's. No lock a server thread takes is held while a report
/// is counted or written. Days older than ``retentionDays`` are removed, here and in the bucket
/// (every origin's: an origin that no longer runs leaves no object behind past the retention).
///
/// A report counts only when it is about what its channel served: the channel exists, its
/// release is the one the channel serves now or one that the channel served (published for it
/// or promoted to it) among the app's ``servedWindow`` release numbers before it (numbers are the
/// app's, shared by its channels), and every pack revision it names is
/// listed in that release (or its rollout). A day holds at most ``maximumRows`` counts: counts
/// of the live release are always taken (they are bounded by what it lists, up to twice that),
/// and new counts of older releases come from a bucket of ``newRowBurst`` (10,000) that refills
/// at ``newRowsPerDay`` (``maximumRows``) a day — no client fills a day in less than about a day.
///
/// The rollout guard's figures (``candidateFigures(_:now:)``) come from an index kept as reports
/// are counted, plus each past day's sum computed once: the guard never re-reads past days.
final class ReportBook: Sendable {
    static let retentionDays = 90
    static let maximumRows = 50_000
    /// New counts of releases other than the live one an app's day may gain at once, and per
    /// day after that (a token bucket per app).
    let newRowBurst: Int
    let newRowsPerDay: Int
    static let servedWindow = 64
    /// The pack results the queue holds at most (about 100 bytes each).
    static let queueLimit = 65_536
    /// The shortest time between two puts of an app's day in the bucket; a put that took long
    /// waits twenty times its length before the next (at most 5% of the writer's time).
    static let bucketInterval: Duration = .seconds(5)

    let folder: DataFolder
    let releases: ReleaseStore
    let mirror: ReleaseMirror?
    let originID: String
    let logger: Logger
    let metrics: OriginMetrics?

    /// One report waiting to be counted.
    struct Item: Sendable {
        var app: String
        var report: DeviceReport
        var day: String
        /// The release the report's channel served when it was accepted.
        var live: Int
    }
    private let queue = Mutex<(items: [Item], packs: Int, byApp: [String: Int])>(([], 0, [:]))
    /// Called when the queue passes a quarter of its size (the writer takes it early).
    private let wake: Mutex<(@Sendable () -> Void)?> = Mutex(nil)

    /// One app's counts in memory: the days not yet compacted, the bucket of new rows.
    private final class AppCounts {
        var days: [String: ReportDay] = [:]
        var newRows: Double
        init(newRows: Int) { self.newRows = Double(newRows) }
        var refilled = ContinuousClock.now
        /// When the next put of a day in the bucket may go.
        var bucketDue = ContinuousClock.now
    }
    private struct Book {
        var apps: [String: AppCounts] = [:]
    }
    /// Taken by the writer thread and by publisher routes (fleet, rollout status), never by a
    /// server thread answering a report or a download.
    private let book = Mutex(Book())
    /// Serialises taking the queue (held while reports are added: never during I/O).
    private let applying = Mutex(())
    /// Serialises writing (held through the I/O, which no lock a reader takes is).
    private let writing = Mutex<String>("")
    /// When the last write began.
    private let lastFlush = Mutex(ContinuousClock.now)

    /// What a release lists (per `pack@revision`, the most bytes a device downloads for it) and
    /// the channel it was published for; releases never change. At most ``listingLimit`` entries.
    private struct Listing: Sendable {
        var sizes: [String: Int64]
        var channel: String
    }
    private let listed = Mutex<(entries: Int, byRelease: [String: Listing], promoted: Set<String>)>((0, [:], []))
    static let listingLimit = 200_000
    /// The rows of other origins' days kept decoded, at most.
    static let otherRowsLimit = 400_000
    /// The guard's sums over past days (which no longer change here), by rollout and day.
    private let pastTallies = Mutex<[String: CandidateTally]>([:])
    /// Other origins' day objects, by key, as last read (re-read when their size or date changes).
    private let others = Mutex<[String: (size: Int64, modified: Date, day: ReportDay)]>([:])
    /// Told the apps whose figures were just written (the rollout guard).
    private let flushed: Mutex<(@Sendable ([String]) -> Void)?> = Mutex(nil)

    init(
        folder: DataFolder, releases: ReleaseStore, mirror: ReleaseMirror?, logger: Logger, metrics: OriginMetrics? = nil,
        newRowBurst: Int = 10_000, newRowsPerDay: Int = ReportBook.maximumRows
    ) throws {
        (self.folder, self.releases, self.mirror, self.logger, self.metrics) = (folder, releases, mirror, logger, metrics)
        (self.newRowBurst, self.newRowsPerDay) = (newRowBurst, newRowsPerDay)
        if let id = (try? FileSystem.readFile(folder.originID, limit: 64)).map({ String(decoding: $0, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) }),
           id.utf8.count == 32, Hex.decode(id) != nil {
            originID = id
        } else {
            originID = Hex.encode(SecureRandom.bytes(16))
            try FileSystem.writeAtomically(Array((originID + "\n").utf8), to: folder.originID)
        }
    }

    /// Sets who is told after each write.
    func onFlushed(_ body: @escaping @Sendable ([String]) -> Void) { flushed.withLock { $0 = body } }

    /// Sets who is called when the queue fills up (the writer's wake-up).
    func onBacklog(_ body: @escaping @Sendable () -> Void) { wake.withLock { $0 = body } }

    // MARK: accepting (server threads)

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

    /// A sum that stops at `Int64.max` rather than trapping: counts fed by strangers.
    static func adding(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? .max : sum
    }

    // MARK: counting (the writer thread)

    private static func key(_ report: DeviceReport, _ pack: DeviceReport.PackResult) -> DayFigures.Key {
        DayFigures.Key(
            channel: report.channel, release: report.release, pack: pack.id, revision: pack.revision, outcome: pack.outcome,
            error: pack.outcome == .failed ? (pack.error ?? "other") : nil
        )
    }

    private func counts(_ book: inout Book, _ app: String) -> AppCounts {
        if let known = book.apps[app] { return known }
        let made = AppCounts(newRows: newRowBurst)
        book.apps[app] = made
        return made
    }

    /// Brings a day into memory (from its files) if it is not there; false when its files could
    /// not be read now (the report is not counted, the files are left as they are).
    private func ensure(_ counts: AppCounts, app: String, day: String) -> Bool {
        guard counts.days[day] == nil else { return true }
        do {
            counts.days[day] = try ReportDayFile.load(folder: folder.reports(app), day: day) { aside in
                metrics?.report(app: app, result: "unreadable_day")
                logger.error("a day's report counts could not be read; the file was kept aside and that day counts again from zero", metadata: [
                    "app": .string(app), "day": .string(day), "file": .string(aside),
                ])
            }
            return true
        } catch {
            metrics?.report(app: app, result: "unreadable_day")
            logger.error("a day's report counts could not be read now; its reports are not counted until they can be", metadata: [
                "app": .string(app), "day": .string(day), "error": .string("\(error)"),
            ])
            return false
        }
    }

    /// Counts what waits in the queue (under ``applying``).
    private func takeQueue() {
        let items = queue.withLock { queue -> [Item] in
            defer { queue = ([], 0, [:]) }
            return queue.items
        }
        guard !items.isEmpty else { return }
        let now = ContinuousClock.now
        var dropped: [String: Int] = [:]
        // Days that could not be read now: tried once per pass, not once per report.
        var unreadable = Set<String>()
        book.withLock { book in
            for item in items {
                let app = counts(&book, item.app)
                guard !unreadable.contains(item.app + "\u{0}" + item.day) else { continue }
                guard ensure(app, app: item.app, day: item.day) else {
                    unreadable.insert(item.app + "\u{0}" + item.day)
                    continue
                }
                let keys = item.report.packs.map { Self.key(item.report, $0) }
                var fresh = 0
                for key in keys where app.days[item.day]?.counts[key] == nil { fresh += 1 }
                if fresh > 0 {
                    let rows = (app.days[item.day]?.counts.count ?? 0) + fresh
                    if item.report.release == item.live {
                        guard rows <= 2 * Self.maximumRows else { dropped[item.app, default: 0] += 1; continue }
                    } else {
                        let elapsed = now - app.refilled
                        let seconds = max(0, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
                        app.newRows = min(Double(newRowBurst), app.newRows + seconds * Double(newRowsPerDay) / 86_400)
                        app.refilled = max(app.refilled, now)
                        guard rows <= Self.maximumRows, app.newRows >= Double(fresh) else { dropped[item.app, default: 0] += 1; continue }
                        app.newRows -= Double(fresh)
                    }
                }
                let empty = ReportDay(day: item.day, file: .init(generation: 1, length: 0, snapshotBytes: 0))
                app.days[item.day, default: empty].addReport(channel: item.report.channel)
                for (key, pack) in zip(keys, item.report.packs) { app.days[item.day, default: empty].add(key, bytes: pack.bytes) }
            }
        }
        for (app, count) in dropped {
            for _ in 0..<count { metrics?.report(app: app, result: "rows_full") }
        }
    }

    /// Counts what waits (so that a reader sees every report answered before it asked). Never
    /// waits for a write.
    func settle() { applying.withLock { _ in takeQueue() } }

    /// The writer's pass: counts the queue; once a second writes.
    func tick(now: Date = Date()) {
        settle()
        if lastFlush.withLock({ ContinuousClock.now - $0 >= .seconds(1) }) { flush(now: now) }
    }

    /// One day's share of a write, taken out under the lock; the I/O runs without it.
    private struct Job {
        var app: String
        var day: String
        var reports: [String: Int64]
        var counts: [DayFigures.Key: ReportCounts]
        var cursor: ReportDayFile.Cursor
        /// The day as it stands (for a compaction or a put in the bucket).
        var whole: ReportDay?
        var compact: Bool
        var bucket: Bool
    }

    /// Counts the queue, appends every day's changes to its log, compacts days that are over
    /// (or whose log grew; every day with `final`), puts days in the bucket when due, removes
    /// days past the retention, and tells the listener which apps were written. What is written
    /// is taken out of memory under the lock and written without it: readers (the fleet, the
    /// guard) never wait for a disk or the bucket.
    func flush(now: Date = Date(), final: Bool = false) {
        let written = writing.withLock { retention -> [String] in
            settle()
            lastFlush.withLock { $0 = .now }
            let today = DayFigures.day(of: now)
            let clock = ContinuousClock.now
            let jobs: [Job] = book.withLock { book in
                var jobs: [Job] = []
                for (app, counts) in book.apps {
                    for day in counts.days.keys {
                        guard var entry = counts.days[day] else { continue }
                        counts.days[day] = nil
                        defer { counts.days[day] = entry }
                        if mirror == nil { entry.bucketBehind = false }
                        // A past day is compacted once (then its log is empty), not at every write.
                        let compact = final || ReportDayFile.wantsCompaction(entry) || day != today && (entry.hasPending || entry.file.length > 0)
                        let bucket = entry.bucketBehind && (final || clock >= counts.bucketDue)
                        guard entry.hasPending || compact || bucket else { continue }
                        jobs.append(Job(
                            app: app, day: day, reports: entry.pendingReports, counts: entry.pendingCounts, cursor: entry.file,
                            whole: compact || bucket ? entry : nil, compact: compact, bucket: bucket
                        ))
                        entry.pendingReports = [:]
                        entry.pendingCounts = [:]
                        if bucket { entry.bucketBehind = false }
                    }
                }
                return jobs
            }
            var apps = Set<String>()
            var results: [(job: Job, appended: Bool, cursor: ReportDayFile.Cursor, put: Bool?)] = []
            for job in jobs {
                let folder = self.folder.reports(job.app)
                var cursor = job.cursor
                var appended = true
                do {
                    cursor = try ReportDayFile.append(reports: job.reports, counts: job.counts, day: job.day, cursor: cursor, folder: folder)
                    if !job.reports.isEmpty || !job.counts.isEmpty { apps.insert(job.app) }
                } catch {
                    appended = false
                    logger.warning("could not write device reports", metadata: ["app": .string(job.app), "day": .string(job.day), "error": .string("\(error)")])
                }
                if appended, job.compact, let whole = job.whole {
                    do {
                        cursor = try ReportDayFile.compact(whole.figures, cursor: cursor, folder: folder)
                    } catch {
                        cursor = cursor.afterFailedCompaction
                        logger.warning("could not compact device reports", metadata: ["app": .string(job.app), "day": .string(job.day), "error": .string("\(error)")])
                    }
                }
                var put: Bool?
                // Only what is on disk goes to the bucket (a put of counts a crash could still lose
                // would never be corrected for a past day).
                if !appended && job.bucket { put = false }
                if appended, let mirror, job.bucket, let whole = job.whole {
                    let started = ContinuousClock.now
                    do {
                        try mirror.putReports(job.app, origin: originID, day: job.day, bytes: Array(StoredJSON.compact.encode(whole.figures)))
                        put = true
                    } catch {
                        put = false
                        logger.warning("could not put device reports in the object store", metadata: ["app": .string(job.app), "day": .string(job.day), "error": .string("\(error)")])
                    }
                    // The next put waits at least five seconds, or twenty times this one's length.
                    book.withLock { book in
                        book.apps[job.app]?.bucketDue = .now + max(Self.bucketInterval, (ContinuousClock.now - started) * 20)
                    }
                }
                results.append((job, appended, cursor, put))
            }
            book.withLock { book in
                for (job, appended, cursor, put) in results {
                    guard let counts = book.apps[job.app], var entry = counts.days[job.day] else { continue }
                    if appended {
                        entry.file = cursor
                    } else {
                        // Not written: the deltas go back, to be appended with the next ones.
                        for (channel, count) in job.reports { entry.pendingReports[channel] = Self.adding(entry.pendingReports[channel] ?? 0, count) }
                        for (key, value) in job.counts { entry.pendingCounts[key, default: ReportCounts()].add(count: value.count, bytes: value.bytes) }
                    }
                    if put == false { entry.bucketBehind = true }
                    // A day that is over, written and in the bucket leaves memory (and a guard's sum of it
                    // made meanwhile is made again from its files).
                    let leaves = job.day != today && appended && !entry.hasPending && !entry.bucketBehind
                    counts.days[job.day] = leaves ? nil : entry
                    if leaves {
                        pastTallies.withLock { tallies in
                            for key in tallies.keys where key.hasPrefix(job.app + "\u{0}") && key.hasSuffix("\u{0}" + job.day) { tallies[key] = nil }
                        }
                    }
                }
            }
            if retention != today {
                retention = today
                removeExpired(now: now)
            }
            return apps.sorted()
        }
        if !written.isEmpty, let tell = flushed.withLock({ $0 }) { tell(written) }
    }

    /// Removes every app's days past the retention, here (in memory too) and this origin's in
    /// the bucket.
    private func removeExpired(now: Date) {
        let oldest = DayFigures.day(of: now.addingTimeInterval(-86_400 * Double(Self.retentionDays)))
        book.withLock { book in
            for counts in book.apps.values {
                for day in counts.days.keys where day < oldest { counts.days[day] = nil }
            }
        }
        for app in FileSystem.contents(of: folder.root + "/apps") where Identifier.isValidApp(app) {
            for day in ReportDayFile.removeDays(before: oldest, folder: folder.reports(app)) {
                try? mirror?.deleteReports(app, origin: originID, day: day)
            }
        }
        pastTallies.withLock { tallies in tallies = tallies.filter { String($0.key.suffix(10)) >= oldest } }
    }

    // MARK: reading (the guard, publisher routes)

    /// This origin's figures for a day: memory first, else its files (empty if they cannot be read now).
    private func own(_ app: String, _ day: String) -> DayFigures {
        if let entry = book.withLock({ $0.apps[app]?.days[day] }) { return entry.figures }
        return (try? ReportDayFile.read(folder: folder.reports(app), day: day).figures) ?? DayFigures(day: day)
    }

    /// Every origin's figures for `app`, one per day from `days - 1` days ago to today, oldest
    /// first: this origin's, plus (with object storage) every other origin's object in the bucket.
    func figures(_ app: String, days: Int, now: Date = Date()) -> [DayFigures] {
        settle()
        let wanted = Self.days(back: days, now: now)
        let others = otherDays(app, days: Set(wanted), now: now)
        return wanted.map { day in DayFigures.sum([own(app, day)] + (others[day] ?? []).map(\.figures), day: day) }
    }

    static func days(back: Int, now: Date) -> [String] {
        (0..<max(1, min(back, retentionDays))).reversed().map { DayFigures.day(of: now.addingTimeInterval(-86_400 * Double($0))) }
    }

    /// The guard's figures about a rollout's candidate: reports (not deferrals) on its channel
    /// about releases from its `countingFrom`, failures among them, by kind — since the day it
    /// started, on every origin. Today's come from the index kept as reports are counted; each
    /// past day's sum is computed once.
    func candidateFigures(_ record: RolloutRecord, now: Date = Date()) -> CandidateTally {
        let back = Int(now.timeIntervalSince(record.startedAt) / 86_400) + 2
        let wanted = Self.days(back: back, now: now)
        let today = DayFigures.day(of: now)
        let rollout = "\(record.app)\u{0}\(record.channel)\u{0}\(record.countingFrom)\u{0}" + record.candidates.map { "\($0.pack)@\($0.revision)" }.sorted().joined(separator: ",")
        func tally(_ day: ReportDay) -> CandidateTally { day.tally(channel: record.channel, countingFrom: record.countingFrom, candidates: record.candidates) }
        var total = CandidateTally()
        for day in wanted {
            if day == today {
                // Today is brought into memory (a restart's counts included) and read from the index.
                total.add(book.withLock { book -> CandidateTally in
                    let app = counts(&book, record.app)
                    guard ensure(app, app: record.app, day: day) else { return CandidateTally() }
                    return app.days[day].map(tally) ?? CandidateTally()
                })
            } else if let known = book.withLock({ $0.apps[record.app]?.days[day].map(tally) }) {
                total.add(known)
            } else {
                let key = rollout + "\u{0}" + day
                if let known = pastTallies.withLock({ $0[key] }) {
                    total.add(known)
                } else if let read = try? ReportDayFile.read(folder: folder.reports(record.app), day: day) {
                    // A past day no longer changes here: its sum is kept (not when it could not be read).
                    let sum = tally(read)
                    pastTallies.withLock { tallies in
                        if tallies.count >= 100_000 { tallies = [:] }
                        tallies[key] = sum
                    }
                    total.add(sum)
                }
            }
        }
        for (_, days) in otherDays(record.app, days: Set(wanted), now: now) {
            for day in days { total.add(tally(day)) }
        }
        return total
    }

    /// Other origins' days of `app` in the bucket, by day: read again only when an object
    /// changed (size or date); objects past the retention — of any origin, running or not — are
    /// removed.
    private func otherDays(_ app: String, days: Set<String>, now: Date) -> [String: [ReportDay]] {
        guard let mirror else { return [:] }
        let oldest = DayFigures.day(of: now.addingTimeInterval(-86_400 * Double(Self.retentionDays)))
        var out: [String: [ReportDay]] = [:]
        do {
            var seen = Set<String>()
            for object in try mirror.reportObjects(app, excluding: originID) {
                if object.day < oldest {
                    do { try mirror.deleteReportObject(object.key) } catch {
                        logger.warning("could not remove an expired report object", metadata: ["key": .string(object.key), "error": .string("\(error)")])
                    }
                    continue
                }
                seen.insert(object.key)
                guard days.contains(object.day) else { continue }
                if let known = others.withLock({ $0[object.key] }), known.size == object.size, known.modified == object.modified {
                    out[object.day, default: []].append(known.day)
                    continue
                }
                do {
                    let figures = try StoredJSON.decoder.decode(DayFigures.self, from: Data(mirror.reportObject(object.key)))
                    var day = ReportDay(day: object.day, file: .init(generation: 1, length: 0, snapshotBytes: 0))
                    for (channel, count) in figures.reports { day.loadReports(channel, count) }
                    for row in figures.rows { day.load(row.key, ReportCounts(count: row.count, bytes: row.bytes)) }
                    others.withLock { cache in
                        // Bounded by the rows it holds: a day of another origin is at most 100,000.
                        if cache.values.reduce(0, { $0 + $1.day.counts.count }) + day.counts.count > Self.otherRowsLimit { cache.removeAll() }
                        cache[object.key] = (object.size, object.modified, day)
                    }
                    out[object.day, default: []].append(day)
                } catch {
                    logger.warning("could not read another origin's reports", metadata: ["key": .string(object.key), "error": .string("\(error)")])
                }
            }
            // Forget objects of this app no longer listed.
            others.withLock { cache in
                for key in cache.keys where key.hasPrefix("apps/\(app)/reports/") && !seen.contains(key) { cache[key] = nil }
            }
        } catch {
            logger.warning("could not read other origins' reports from the object store", metadata: ["app": .string(app), "error": .string("\(error)")])
        }
        return out
    }
}
