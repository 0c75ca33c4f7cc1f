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

/// Device reports, counted: each accepted report is added to today's figures of its app in
/// memory, written (whole, atomically) to the data folder within a second, and — with object
/// storage — to this origin's own object in the bucket, so that replicas accept reports and the
/// writer sums every origin's. Days older than ``retentionDays`` are removed.
///
/// A report counts only when it is about what the app released: its channel exists, its
/// release is one the origin made visible, and every pack revision it names is listed in that
/// release (or its rollout). The number of distinct counts is therefore bounded by what the
/// publishers released; a day holds at most ``maximumRows`` (more is refused with 429).
final class ReportBook: Sendable {
    static let retentionDays = 90
    static let maximumRows = 50_000

    let folder: DataFolder
    let releases: ReleaseStore
    let mirror: ReleaseMirror?
    let originID: String
    let logger: Logger
    /// Per app and day: the counts not yet superseded on disk, and whether they changed since the last write.
    private struct Day {
        var reports: [String: Int64]
        var counts: [DayFigures.Key: (count: Int64, bytes: Int64)]
        /// Bumped by every report; a write that began at another value leaves the day dirty.
        var version = 0
        var written = 0
        var dirty: Bool { version != written }
    }
    private struct Book {
        var days: [String: [String: Day]] = [:]
    }
    private let book = Mutex(Book())
    /// Per app and release, the `pack@revision`s the release lists with the most bytes a device
    /// can download for each (releases never change); at most ``listingLimit`` entries in all.
    private let listed = Mutex<(entries: Int, byRelease: [String: [String: Int64]])>((0, [:]))
    static let listingLimit = 200_000
    /// Told the apps whose figures were just written (the rollout guard).
    private let flushed: Mutex<(@Sendable ([String]) -> Void)?> = Mutex(nil)
    private let writes = Mutex(())

    init(folder: DataFolder, releases: ReleaseStore, mirror: ReleaseMirror?, logger: Logger) throws {
        (self.folder, self.releases, self.mirror, self.logger) = (folder, releases, mirror, logger)
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

    /// Checks `report` against what `app` released and counts it; throws ``DepotError`` (422) otherwise.
    func accept(_ report: DeviceReport, app: String, now: Date = Date()) throws {
        // The channel's live release (cached: no file is read per report once it is known).
        guard let live = try releases.current(app, channel: report.channel) else {
            throw DepotError(.unprocessable, "unknown_channel", "app \(app) has no channel \(report.channel); the report was not counted")
        }
        let listed = try listing(app, release: report.release)
        for pack in report.packs {
            guard let most = listed["\(pack.id)@\(pack.revision)"] else {
                throw DepotError(.unprocessable, "unknown_revision", "release \(report.release) of app \(app) does not list revision \(pack.revision) of pack \(pack.id); the report was not counted")
            }
            guard pack.bytes <= most else {
                throw DepotError(.unprocessable, "impossible_bytes", "pack \(pack.id) revision \(pack.revision) is \(most) bytes at most; the report was not counted")
            }
        }
        let day = DayFigures.day(of: now)
        // Reports about the release the channel serves now are counted even on a day already
        // holding ``maximumRows`` counts (old releases' keys cannot crowd out the live one's).
        try book.withLock { book in
            // Loaded under the lock: a write of the day running meanwhile cannot be overtaken.
            var entry = book.days[app]?[day] ?? {
                let stored = (try? StoredJSON.read(DayFigures.self, from: path(app, day))) ?? DayFigures(day: day)
                return Day(reports: stored.reports, counts: stored.byKey)
            }()
            let fresh = report.packs.filter { pack in entry.counts[key(report, pack)] == nil }.count
            guard entry.counts.count + fresh <= Self.maximumRows || report.release == live.version && entry.counts.count + fresh <= 2 * Self.maximumRows else {
                throw HTTPFailure(status: 429, code: "reports_full", message: "app \(app) has \(Self.maximumRows) distinct counts today; the report was not counted", headers: [("Retry-After", "3600")])
            }
            entry.reports[report.channel] = Self.adding(entry.reports[report.channel] ?? 0, 1)
            for pack in report.packs {
                let k = key(report, pack)
                let before = entry.counts[k] ?? (0, 0)
                entry.counts[k] = (Self.adding(before.count, 1), Self.adding(before.bytes, pack.bytes))
            }
            entry.version += 1
            book.days[app, default: [:]][day] = entry
        }
    }

    /// A sum that stops at `Int64.max` rather than trapping: counts fed by strangers.
    static func adding(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? .max : sum
    }

    private func key(_ report: DeviceReport, _ pack: DeviceReport.PackResult) -> DayFigures.Key {
        DayFigures.Key(
            channel: report.channel, release: report.release, pack: pack.id, revision: pack.revision, outcome: pack.outcome,
            error: pack.outcome == .failed ? (pack.error ?? "other") : nil
        )
    }

    /// The `pack@revision`s release `release` of `app` lists (its packs and its rollout's
    /// candidates), each with the most bytes a device downloads for it (the container, or a
    /// larger patch).
    private func listing(_ app: String, release: Int) throws -> [String: Int64] {
        let cacheKey = app + "\u{0}\(release)"
        if let known = listed.withLock({ $0.byRelease[cacheKey] }) { return known }
        guard let manifest = try releases.release(app, release)?.manifest else {
            throw DepotError(.unprocessable, "unknown_release", "app \(app) has no release \(release); the report was not counted")
        }
        var sizes: [String: Int64] = [:]
        for entry in manifest.allEntries {
            sizes["\(entry.id)@\(entry.revision)"] = max(entry.size, (entry.patches ?? []).map(\.size).max() ?? 0)
        }
        listed.withLock { cache in
            if cache.entries + sizes.count > Self.listingLimit { cache = (0, [:]) }
            cache.byRelease[cacheKey] = sizes
            cache.entries += sizes.count
        }
        return sizes
    }

    private func path(_ app: String, _ day: String) -> String { folder.reports(app) + "/" + day + ".json" }

    /// This origin's figures for a day: memory first, else its file.
    private func own(_ app: String, _ day: String) -> DayFigures {
        if let entry = book.withLock({ $0.days[app]?[day] }) {
            return DayFigures(day: day, reports: entry.reports, counts: entry.counts)
        }
        return (try? StoredJSON.read(DayFigures.self, from: path(app, day))) ?? DayFigures(day: day)
    }

    /// Every origin's figures for `app`, one per day from `days - 1` days ago to today, oldest
    /// first: this origin's, plus (with object storage) every other origin's object in the bucket.
    func figures(_ app: String, days: Int, now: Date = Date()) -> [DayFigures] {
        let wanted = (0..<max(1, min(days, Self.retentionDays))).reversed().map { DayFigures.day(of: now.addingTimeInterval(-86_400 * Double($0))) }
        var others: [String: [DayFigures]] = [:]
        if let mirror {
            do {
                for (day, bytes) in try mirror.reportObjects(app, days: Set(wanted), excluding: originID) {
                    if let figures = try? StoredJSON.decoder.decode(DayFigures.self, from: Data(bytes)) { others[day, default: []].append(figures) }
                }
            } catch {
                logger.warning("could not read other origins' reports from the object store", metadata: ["app": .string(app), "error": .string("\(error)")])
            }
        }
        return wanted.map { day in DayFigures.sum([own(app, day)] + (others[day] ?? []), day: day) }
    }

    /// Writes every day that changed (to its file, then to the bucket), removes days past the
    /// retention (here and this origin's objects in the bucket), and tells the listener which
    /// apps were written. A day stays in memory until a write of its latest counts succeeded.
    func flush(now: Date = Date()) {
        writes.withLock { _ in
            let today = DayFigures.day(of: now)
            let dirty: [(app: String, day: String, version: Int, figures: DayFigures)] = book.withLock { book in
                var out: [(String, String, Int, DayFigures)] = []
                for (app, days) in book.days {
                    for (day, entry) in days {
                        if entry.dirty {
                            out.append((app, day, entry.version, DayFigures(day: day, reports: entry.reports, counts: entry.counts)))
                        } else if day != today {
                            // Written, and no longer today: its file has it.
                            book.days[app]?[day] = nil
                        }
                    }
                }
                return out
            }
            var apps = Set<String>()
            for item in dirty {
                do {
                    try FileSystem.createDirectory(folder.reports(item.app))
                    try StoredJSON.write(item.figures, to: path(item.app, item.day))
                    // Compact in the bucket: other origins read every object of the window.
                    try mirror?.putReports(item.app, origin: originID, day: item.day, bytes: Array(StoredJSON.compact.encode(item.figures)))
                    apps.insert(item.app)
                    book.withLock { book in
                        guard var entry = book.days[item.app]?[item.day] else { return }
                        entry.written = item.version
                        // Only today stays in memory once written.
                        book.days[item.app]?[item.day] = entry.dirty || item.day == today ? entry : nil
                    }
                } catch {
                    logger.warning("could not write device reports", metadata: ["app": .string(item.app), "day": .string(item.day), "error": .string("\(error)")])
                }
            }
            guard !apps.isEmpty else { return }
            let oldest = DayFigures.day(of: now.addingTimeInterval(-86_400 * Double(Self.retentionDays)))
            for app in apps {
                for name in FileSystem.contents(of: folder.reports(app)) where name.hasSuffix(".json") && String(name.dropLast(5)) < oldest {
                    FileSystem.remove(folder.reports(app) + "/" + name)
                    try? mirror?.deleteReports(app, origin: originID, day: String(name.dropLast(5)))
                }
            }
            if let tell = flushed.withLock({ $0 }) { tell(apps.sorted()) }
        }
    }
}
