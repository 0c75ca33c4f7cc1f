import DepotCore
import Foundation

/// Counting, on the writer thread: the queue taken and each report added to its app's day in
/// place (hash lookups, no copy, whatever the day holds).
extension ReportBook {
    static func key(_ report: DeviceReport, _ pack: DeviceReport.PackResult, attested: Bool = false) -> DayFigures.Key {
        DayFigures.Key(
            channel: report.channel, release: report.release, pack: pack.id, revision: pack.revision, outcome: pack.outcome,
            error: pack.outcome == .failed ? (pack.error ?? "other") : nil, attested: attested ? true : nil
        )
    }

    func counts(_ book: inout Book, _ app: String) -> AppCounts {
        if let known = book.apps[app] { return known }
        let made = AppCounts(newRows: newRowBurst)
        book.apps[app] = made
        return made
    }

    /// Brings a day into memory (from its files) if it is not there; false when its files could
    /// not be read now (the report is not counted, the files are left as they are).
    func ensure(_ counts: AppCounts, app: String, day: String) -> Bool {
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
    func takeQueue() {
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
                let keys = item.report.packs.map { Self.key(item.report, $0, attested: item.attested) }
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
                app.days[item.day, default: empty].addReport(channel: item.report.channel, attested: item.attested)
                if let ids = item.report.packKeys { app.days[item.day, default: empty].addRing(.pack, channel: item.report.channel, ids: ids) }
                if let ids = item.report.manifestKeys { app.days[item.day, default: empty].addRing(.manifest, channel: item.report.channel, ids: ids) }
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
}
