import DepotCore
import Foundation
import Logging
import Synchronization

/// What the guard and the publisher routes read: this origin's days and every other origin's.
extension ReportBook {
    /// This origin's figures for a day: memory first, else its files (empty if they cannot be read now).
    private func own(_ app: String, _ day: String) -> DayFigures {
        if let entry = book.withLock({ $0.apps[app]?.days[day] }) { return entry.figures }
        return (try? ReportDayFile.read(folder: folder.reports(app), day: day).figures) ?? DayFigures(day: day)
    }

    /// Every origin's figures for `app`, one per day from `days - 1` days ago to today, oldest
    /// first: this origin's, plus (with object storage) every other origin's object in the bucket.
    func figures(_ app: String, days: Int, now: Date = WallClock.now()) -> [DayFigures] {
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
    func candidateFigures(_ record: RolloutRecord, now: Date = WallClock.now()) -> CandidateTally {
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
                    day.load(figures)
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
