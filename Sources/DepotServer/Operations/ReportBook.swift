import DepotCore
import Foundation
import Logging
import Synchronization

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
        /// Whether its App Attest assertion was checked (it counts as attested).
        var attested: Bool = false
    }
    let queue = Mutex<(items: [Item], packs: Int, byApp: [String: Int])>(([], 0, [:]))
    /// Called when the queue passes a quarter of its size (the writer takes it early).
    let wake: Mutex<(@Sendable () -> Void)?> = Mutex(nil)

    /// One app's counts in memory: the days not yet compacted, the bucket of new rows.
    final class AppCounts {
        var days: [String: ReportDay] = [:]
        var newRows: Double
        init(newRows: Int) { self.newRows = Double(newRows) }
        var refilled = ContinuousClock.now
        /// When the next put of a day in the bucket may go.
        var bucketDue = ContinuousClock.now
    }
    struct Book {
        var apps: [String: AppCounts] = [:]
    }
    /// Taken by the writer thread and by publisher routes (fleet, rollout status), never by a
    /// server thread answering a report or a download.
    let book = Mutex(Book())
    /// Serialises taking the queue (held while reports are added: never during I/O).
    let applying = Mutex(())
    /// Serialises writing (held through the I/O, which no lock a reader takes is).
    let writing = Mutex<String>("")
    /// When the last write began.
    let lastFlush = Mutex(ContinuousClock.now)

    /// What the releases reports name list (kept, least recently used evicted one at a time).
    let listings: ReleaseListings
    /// Promotions seen (app, channel, release), at most ``promotionLimit``.
    let promotions = Mutex<Set<String>>([])
    static let promotionLimit = 200_000
    /// The rows of other origins' days kept decoded, at most.
    static let otherRowsLimit = 400_000
    /// The guard's sums over past days (which no longer change here), by rollout and day.
    let pastTallies = Mutex<[String: CandidateTally]>([:])
    /// Other origins' day objects, by key, as last read (re-read when their size or date changes).
    let others = Mutex<[String: (size: Int64, modified: Date, day: ReportDay)]>([:])
    /// Told the apps whose figures were just written (the rollout guard).
    let flushed: Mutex<(@Sendable ([String]) -> Void)?> = Mutex(nil)

    init(
        folder: DataFolder, releases: ReleaseStore, mirror: ReleaseMirror?, logger: Logger, metrics: OriginMetrics? = nil,
        newRowBurst: Int = 10_000, newRowsPerDay: Int = ReportBook.maximumRows
    ) throws {
        (self.folder, self.releases, self.mirror, self.logger, self.metrics) = (folder, releases, mirror, logger, metrics)
        (self.newRowBurst, self.newRowsPerDay) = (newRowBurst, newRowsPerDay)
        let listings = ReleaseListings { [releases] app, version in try? releases.load(app, version).manifest }
        self.listings = listings
        // A release's listing is kept as it is published: reports about it never wait.
        // Each release's listing is kept as it is published (its reports come at once); those no
        // report can name any more (outside every channel's window) go then.
        releases.published.withLock {
            $0 = { [weak releases] app, manifest in
                listings.keep(app, manifest)
                // The channels' pointers (a read each, under the publish lock); none read (the
                // folder unreadable): nothing is let go.
                guard let channels = releases?.channels(app), !channels.isEmpty else { return }
                let windows = (Array(channels.values) + [manifest.version]).filter { $0 > 0 }.map { max(0, $0 - Self.servedWindow)...$0 }
                listings.forget(app, outside: windows)
            }
        }
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

    /// Called by each write before it writes any count, after it took the queue (the attested
    /// keys' counters: ``AttestedKeys/writeCounters()``); returns the apps whose counters could
    /// not be written, whose counts then wait for the next pass (at stop they go on).
    let beforeWrite: Mutex<(@Sendable () -> Set<String>)?> = Mutex(nil)
    func onWriting(_ body: @escaping @Sendable () -> Set<String>) { beforeWrite.withLock { $0 = body } }

    /// Sets who is called when the queue fills up (the writer's wake-up).
    func onBacklog(_ body: @escaping @Sendable () -> Void) { wake.withLock { $0 = body } }

    /// A sum that stops at `Int64.max` rather than trapping: counts fed by strangers.
    static func adding(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? .max : sum
    }

    /// The writer's pass: counts the queue; once a second writes.
    func tick(now: Date = WallClock.now()) {
        settle()
        if lastFlush.withLock({ ContinuousClock.now - $0 >= .seconds(1) }) { flush(now: now) }
    }

    /// One day's share of a write, taken out under the lock; the I/O runs without it.
    struct Job {
        var app: String
        var day: String
        var reports: [String: Int64]
        var attestedReports: [String: Int64]
        var counts: [DayFigures.Key: ReportCounts]
        var rings: [KeyRingCounts.Key: Int64]
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
    func flush(now: Date = WallClock.now(), final: Bool = false) {
        let written = writing.withLock { retention -> [String] in
            settle()
            lastFlush.withLock { $0 = .now }
            // The counters of the attested reports just taken are durable before their counts are.
            let failed = beforeWrite.withLock({ $0 })?() ?? []
            let held = final ? [] : failed
            let today = DayFigures.day(of: now)
            let clock = ContinuousClock.now
            let jobs: [Job] = book.withLock { book in
                var jobs: [Job] = []
                for (app, counts) in book.apps where !held.contains(app) {
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
                            app: app, day: day, reports: entry.pendingReports, attestedReports: entry.pendingAttestedReports, counts: entry.pendingCounts,
                            rings: entry.pendingRings, cursor: entry.file,
                            whole: compact || bucket ? entry : nil, compact: compact, bucket: bucket
                        ))
                        entry.pendingReports = [:]
                        entry.pendingAttestedReports = [:]
                        entry.pendingCounts = [:]
                        entry.pendingRings = [:]
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
                    cursor = try ReportDayFile.append(
                        reports: job.reports, attestedReports: job.attestedReports, counts: job.counts, rings: job.rings, day: job.day, cursor: cursor, folder: folder
                    )
                    if !job.reports.isEmpty || !job.attestedReports.isEmpty || !job.counts.isEmpty || !job.rings.isEmpty { apps.insert(job.app) }
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
                        for (channel, count) in job.attestedReports {
                            entry.pendingAttestedReports[channel] = Self.adding(entry.pendingAttestedReports[channel] ?? 0, count)
                        }
                        for (key, value) in job.counts { entry.pendingCounts[key, default: ReportCounts()].add(count: value.count, bytes: value.bytes) }
                        for (key, count) in job.rings { entry.pendingRings[key] = Self.adding(entry.pendingRings[key] ?? 0, count) }
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
    func removeExpired(now: Date) {
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
}
