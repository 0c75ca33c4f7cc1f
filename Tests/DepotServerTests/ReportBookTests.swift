import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Logging
import Testing

/// Device reports as the origin counts them: only about what a channel served, through a
/// bounded queue, into a day's append-only log that a crash cannot corrupt, and into the guard's
/// figures kept up to date as reports come.
@Suite("Device reports: what counts, the queue, the day's log, the guard's figures")
struct ReportBookTests {
    static func report(_ origin: TestOrigin, _ body: DeviceReport) throws -> RawHTTP.Response {
        try request(origin, "POST", "/v1/apps/\(origin.app)/reports", headers: ["Content-Type: application/json"], body: body.encoded())
    }

    static func revision(_ origin: TestOrigin, release: Int, pack: String = "level") throws -> Int {
        try #require(try origin.server.origin.releases.release(origin.app, release)?.manifest[pack: pack]?.revision)
    }

    static func today() -> String { DayFigures.day(of: Date()) }

    /// The day's stored figures, read back from the files as a restart would.
    static func stored(_ origin: TestOrigin) -> DayFigures {
        (try? ReportDayFile.read(folder: origin.data.path + "/apps/\(origin.app)/reports", day: today()).figures) ?? DayFigures(day: today())
    }

    @Test("A report counts only about a release its channel served: the live one, one it served before (published for it or promoted to it) within the app's 64 release numbers before it; another channel's release, an older one or a future one is 422")
    func onlyWhatTheChannelServed() async throws {
        try await withServer { origin in
            func installed(_ channel: String, _ release: Int) throws -> DeviceReport {
                DeviceReport(channel: channel, release: release, packs: [.init(id: "level", revision: try Self.revision(origin, release: release), outcome: .installed, bytes: 10)])
            }
            #expect(try upload(origin, pack: "level", Array(repeating: 1, count: 100)).status == 201)  // 1, production
            #expect(try upload(origin, pack: "level", Array(repeating: 2, count: 100), query: "?channel=beta").status == 201)  // 2, beta
            #expect(try upload(origin, pack: "level", Array(repeating: 3, count: 100)).status == 201)  // 3, production
            #expect(try Self.report(origin, installed("production", 3)).status == 202)
            #expect(try Self.report(origin, installed("production", 1)).status == 202, "served before")
            #expect(try Self.report(origin, installed("beta", 2)).status == 202)
            let other = try Self.report(origin, installed("production", 2))
            #expect(other.status == 422 && other.bodyText.contains("release_not_served"), "\(other.bodyText)")
            #expect(try Self.report(origin, installed("beta", 1)).status == 422, "release 1 was production's")
            var future = try installed("production", 3)
            future.release = 4
            #expect(try Self.report(origin, future).status == 422)
            // Promoted to beta: now beta served release 3 as well.
            #expect(try request(origin, "POST", "/v1/apps/\(origin.app)/channels/beta?release=3", headers: ["Authorization: Bearer \(origin.token)"]).status == 201)
            #expect(try Self.report(origin, installed("beta", 3)).status == 202)
            #expect(try Self.report(origin, installed("beta", 2)).status == 202, "beta's previous release")
            // 65 more releases: release 3 falls out of production's window.
            for round in 0...ReportBook.servedWindow { #expect(try upload(origin, pack: "level", Array(repeating: UInt8(truncatingIfNeeded: 10 + round), count: 100)).status == 201) }
            let old = try Self.report(origin, installed("production", 3))
            #expect(old.status == 422 && old.bodyText.contains("release_not_served"), "\(old.bodyText)")
            let newest = 4 + ReportBook.servedWindow
            #expect(try Self.report(origin, installed("production", newest)).status == 202)
            origin.server.flushReports()
            let figures = Self.stored(origin)
            #expect(figures.reports == ["production": 3, "beta": 3], "\(figures.reports)")
            #expect(Set(figures.rows.map { "\($0.key.channel)@\($0.key.release)" }) == ["production@3", "production@1", "beta@2", "beta@3", "production@\(newest)"])
        }
    }

    @Test("The queue is bounded: once an app's reports hold their quarter of it a report is shed with 503 and Retry-After (before anything is counted) while another app's are taken, and what it accepted is all counted")
    func queueSheds() async throws {
        try await withServer(configure: { $0.reportRatePerAddress = 1_000_000; $0.reportRateTotal = 1_000_000 }) { origin in
            #expect(try upload(origin, pack: "level", Array(repeating: 1, count: 100)).status == 201)
            let book = origin.server.origin.reports
            // The writer stopped: nothing takes the queue.
            origin.server.origin.reportWriter.stop()
            let one = DeviceReport(channel: "production", release: 1, packs: [.init(id: "level", revision: try Self.revision(origin, release: 1), outcome: .installed, bytes: 5)])
            var accepted = 0
            while true {
                do {
                    try book.accept(one, app: origin.app)
                    accepted += 1
                } catch let failure as HTTPFailure {
                    #expect(failure.status == 503)
                    break
                }
            }
            #expect(accepted == ReportBook.queueLimit / 4, "one app takes a quarter of the queue")
            let shed = try Self.report(origin, one)
            #expect(shed.status == 503 && shed.header("Retry-After") == "1", "\(shed.status) \(shed.bodyText)")
            // Another app's reports are still taken.
            let other = "com.example.other"
            let folder = DataFolder(origin.data.path)
            try AppStore(folder: folder).create(other)
            let token = try TokenStore(folder: folder).create(app: other, role: .publisher).token
            let put = try request(origin, "PUT", "/v1/apps/\(other)/packs/level?release=true", headers: ["Authorization: Bearer \(token)"], body: Array(repeating: 2, count: 100))
            #expect(put.status == 201)
            let theirs = try request(origin, "POST", "/v1/apps/\(other)/reports", headers: ["Content-Type: application/json"], body: one.encoded())
            #expect(theirs.status == 202, "\(theirs.status) \(theirs.bodyText)")
            book.settle()
            #expect(try Self.report(origin, one).status == 202)
            origin.server.flushReports()
            let figures = Self.stored(origin)
            #expect(figures.reports["production"] == Int64(accepted + 1) && figures.rows.first?.count == Int64(accepted + 1), "\(figures.reports)")
        }
    }

    @Test("New counts of older releases come from a bucket (no client fills a day): past it they are not counted, while the live release's still are")
    func newRowsBounded() async throws {
        try await withServer { origin in
            #expect(try upload(origin, pack: "level", Array(repeating: 1, count: 100)).status == 201)
            #expect(try upload(origin, pack: "level", Array(repeating: 2, count: 100)).status == 201)
            let server = origin.server.origin
            let book = try ReportBook(folder: server.folder, releases: server.releases, mirror: nil, logger: Logger(label: "test"), newRowBurst: 5, newRowsPerDay: 1)
            let kinds = DeviceReport.errorKinds.sorted()
            for release in [1, 2] {
                let revision = try Self.revision(origin, release: release)
                for kind in kinds {
                    try book.accept(DeviceReport(channel: "production", release: release, packs: [.init(id: "level", revision: revision, outcome: .failed, error: kind)]), app: origin.app)
                }
            }
            book.settle()
            let rows = try #require(book.figures(origin.app, days: 1).last).rows
            #expect(rows.filter { $0.key.release == 1 }.count == 5, "the bucket's five")
            #expect(rows.filter { $0.key.release == 2 }.count == kinds.count, "every count of the live release")
        }
    }

    @Test("An unreadable day file is kept aside (never overwritten), logged and counted in the metrics; counting goes on")
    func unreadableDay() async throws {
        let log = CapturedLog()
        try await withServer(configure: { $0.logger = log.logger(); $0.metricsToken = "metrics-token-of-the-test" }) { origin in
            #expect(try upload(origin, pack: "level", Array(repeating: 1, count: 100)).status == 201)
            let folder = origin.data.path + "/apps/\(origin.app)/reports"
            try FileSystem.createDirectory(folder)
            let garbage = Array("{\"day\": \"\(Self.today())\", \"rows\": [{\"cou".utf8)
            try FileSystem.writeAtomically(garbage, to: folder + "/\(Self.today()).json")
            #expect(try Self.report(origin, DeviceReport(channel: "production", release: 1, packs: [.init(id: "level", revision: 1, outcome: .installed)])).status == 202)
            origin.server.flushReports()
            #expect(try FileSystem.readFile(folder + "/\(Self.today()).json.unreadable") == garbage, "kept as it was")
            #expect(Self.stored(origin).reports == ["production": 1])
            #expect(log.all.contains { $0.contains("could not be read") && $0.contains(".json.unreadable") }, "\(log.all)")
            #expect(try request(origin, "GET", "/metrics", headers: ["Authorization: Bearer metrics-token-of-the-test"]).bodyText.contains("result=\"unreadable_day\""))
        }
    }

    @Test("A day's log: each write appends only what changed; a line cut short by a crash is skipped and cut off before the next append; a compaction interrupted before its logs are removed counts nothing twice")
    func dayLog() throws {
        let work = TemporaryDirectory("depot-report-log")
        defer { work.remove() }
        let folder = work.path + "/reports"
        let day = "2026-11-26"
        func key(_ pack: Int, _ outcome: DeviceReport.Outcome = .installed) -> DayFigures.Key {
            DayFigures.Key(channel: "production", release: 1, pack: "p\(pack)", revision: 1, outcome: outcome, error: outcome == .failed ? "http" : nil)
        }
        var memory = try ReportDayFile.load(folder: folder, day: day) { _ in Issue.record("nothing to read aside") }
        for pack in 0..<100 {
            memory.addReport(channel: "production")
            memory.add(key(pack), bytes: 10)
        }
        try ReportDayFile.append(&memory, folder: folder)
        let log = ReportDayFile.logPath(folder, day, 1)
        let first = try FileSystem.readFile(log)
        #expect(first.filter { $0 == 10 }.count == 101)
        // One more report: two lines appended, nothing rewritten.
        memory.addReport(channel: "production")
        memory.add(key(7), bytes: 10)
        try ReportDayFile.append(&memory, folder: folder)
        let second = try FileSystem.readFile(log)
        #expect(second.count > first.count && Array(second.prefix(first.count)) == first && second.filter { $0 == 10 }.count == 103)
        #expect(try ReportDayFile.read(folder: folder, day: day).figures == memory.figures)
        // A crash cut the next append short: the torn line is skipped, and cut before the next.
        let file = try FileDescriptor(path: log, flags: O_WRONLY | O_APPEND)
        try file.write(Array("{\"channel\":\"production\",\"count\":1,\"pa".utf8))
        try file.close()
        var restarted = try ReportDayFile.load(folder: folder, day: day) { _ in Issue.record("nothing to read aside") }
        #expect(restarted.figures == memory.figures)
        restarted.add(key(3, .failed), bytes: 0)
        try ReportDayFile.append(&restarted, folder: folder)
        let third = try FileSystem.readFile(log)
        #expect(Array(third.prefix(second.count)) == second && third.filter { $0 == 10 }.count == 104, "the torn bytes are gone")
        // Compaction: the snapshot names the log it includes, the log goes, appends start anew.
        let beforeCompaction = try FileSystem.readFile(log)
        try ReportDayFile.compact(&restarted, folder: folder)
        #expect(!FileSystem.exists(log) && restarted.file.generation == 2)
        #expect(try ReportDayFile.read(folder: folder, day: day).figures == restarted.figures)
        // A crash between the snapshot's rename and the log's removal: the old log is back; it
        // is included in the snapshot and not counted again.
        try FileSystem.writeAtomically(beforeCompaction, to: log)
        #expect(try ReportDayFile.read(folder: folder, day: day).figures == restarted.figures)
        restarted.addReport(channel: "production")
        restarted.add(key(200), bytes: 1)
        try ReportDayFile.append(&restarted, folder: folder)
        #expect(FileSystem.exists(ReportDayFile.logPath(folder, day, 2)))
        #expect(try ReportDayFile.read(folder: folder, day: day).figures == restarted.figures)
    }

    @Test("The guard's figures, kept as reports come (today) and summed once per past day, equal a sum over every stored row (of all reports and of the attested ones) — after every step of a seeded walk of reports over three days, writes, compactions and restarts", arguments: [1, 2, 3] as [UInt64])
    func guardFiguresModel(seed: UInt64) async throws {
        try await withServer(configure: { $0.reportRatePerAddress = 1_000_000; $0.reportRateTotal = 1_000_000 }) { origin in
            for round in 0..<3 { #expect(try upload(origin, pack: "level", Array(repeating: UInt8(round), count: 100 + round)).status == 201) }
            #expect(try upload(origin, pack: "map", Array(repeating: 9, count: 50)).status == 201)
            let server = origin.server.origin
            server.reportWriter.stop()
            var rng = SeededRandom(seed: seed)
            let now = Date()
            var book = server.reports
            let started = now.addingTimeInterval(-2 * 86_400 - 60)
            let record = RolloutRecord(
                app: origin.app, channel: "production", release: 4, baseRelease: 3, state: .running, fraction: 0.5, salt: "s",
                candidates: [.init(pack: "level", revision: try Self.revision(origin, release: 3))], removed: [],
                steps: [.init(at: started, action: "start", fraction: 0.5, manifest: 2, by: "test")]
            )
            let outcomes: [DeviceReport.Outcome] = [.installed, .patched, .failed, .deferred]
            for day in [2, 1, 0] {
                let when = now.addingTimeInterval(-Double(day) * 86_400)
                for step in 0..<40 {
                    let release = 2 + rng.next(3)
                    let outcome = outcomes[rng.next(4)]
                    var packs: [DeviceReport.PackResult] = [.init(
                        id: "level", revision: try Self.revision(origin, release: min(release, 3)), outcome: outcome,
                        error: outcome == .failed ? ["http", "integrity", "install"][rng.next(3)] : nil, bytes: 1
                    )]
                    if release == 4 { packs.append(.init(id: "map", revision: try Self.revision(origin, release: 4, pack: "map"), outcome: .installed)) }
                    // Some reports attested (issue 53): the index keeps their figures apart, equal to the rows' sum too.
                    try book.accept(DeviceReport(channel: "production", release: release, packs: packs), app: origin.app, attested: rng.next(3) == 0, now: when)
                    switch rng.next(10) {
                    case 0: book.flush(now: when)
                    case 1: book.flush(now: when, final: true)
                    case 2:
                        // A restart: what was written is read back.
                        book.flush(now: when)
                        book = try ReportBook(folder: server.folder, releases: server.releases, mirror: nil, logger: Logger(label: "test"))
                    default: book.settle()
                    }
                    let incremental = book.candidateFigures(record, now: when)
                    let full = record.candidateFigures(book.figures(origin.app, days: 4, now: when))
                    #expect(incremental == full, "seed \(seed), day -\(day), step \(step)")
                }
                book.flush(now: when)
            }
        }
    }
}
