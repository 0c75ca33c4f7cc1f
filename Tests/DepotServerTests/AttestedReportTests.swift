import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Logging
import Testing

/// Attested reports (issue 53) as the origin counts them: apart from unattested ones through
/// the queue, the day's log, its snapshot, a restart, another origin's copy and the guard's
/// index; files written before reports could be attested read as unattested and keep their bytes.
@Suite("Attested reports: counted apart, kept apart on disk, the guard of an attested-only rollout")
struct AttestedReportTests {
    static func folderOf(_ origin: TestOrigin) -> String { origin.data.path + "/apps/\(origin.app)/reports" }

    static func installed(_ origin: TestOrigin, release: Int = 1, _ outcome: DeviceReport.Outcome = .installed) throws -> DeviceReport {
        DeviceReport(channel: "production", release: release, packs: [.init(
            id: "level", revision: try ReportBookTests.revision(origin, release: release), outcome: outcome, error: outcome == .failed ? "integrity" : nil, bytes: 7
        )])
    }

    @Test("Attested and unattested reports count apart — per channel and per row — in memory, in the day's log, after a restart (files), after the day's compaction, and summed with another origin's day")
    func countedApart() async throws {
        try await withServer { origin in
            #expect(try upload(origin, pack: "level", Array(repeating: 1, count: 100)).status == 201)
            let server = origin.server.origin
            server.reportWriter.stop()
            let book = server.reports
            for attested in [true, true, false] { try book.accept(try Self.installed(origin), app: origin.app, attested: attested) }
            try book.accept(try Self.installed(origin, .failed), app: origin.app, attested: true)
            book.settle()
            func check(_ figures: DayFigures, _ when: String) {
                #expect(figures.reports == ["production": 4] && figures.attestedReports == ["production": 3], "\(when): \(figures.reports) \(String(describing: figures.attestedReports))")
                let rows = figures.rows.map { "\($0.key.outcome.rawValue) \($0.key.attested == true ? "attested" : "unattested") \($0.count)" }
                #expect(rows == ["failed attested 1", "installed unattested 1", "installed attested 2"], "\(when): \(rows)")
            }
            check(try #require(book.figures(origin.app, days: 1).last), "in memory")
            // Written (appended to the day's log), then read back by a new book, as after a restart.
            book.flush()
            let log = try FileSystem.readFile(ReportDayFile.logPath(Self.folderOf(origin), ReportBookTests.today(), 1))
            let lines = String(decoding: log, as: UTF8.self).split(separator: "\n")
            #expect(lines.contains(#"{"channel":"production","reports":4}"#) && lines.contains(#"{"attested":true,"channel":"production","reports":3}"#), "\(lines)")
            #expect(lines.filter { $0.contains("\"attested\"") }.count == 3 && lines.filter { !$0.contains("\"attested\"") }.count == 2, "an unattested line names no attestation: \(lines)")
            let restarted = try ReportBook(folder: server.folder, releases: server.releases, mirror: nil, logger: Logger(label: "test"))
            check(try #require(restarted.figures(origin.app, days: 1).last), "after a restart")
            // Compacted (the day's snapshot written, its log removed), then read back again.
            book.flush(final: true)
            #expect(!FileSystem.exists(ReportDayFile.logPath(Self.folderOf(origin), ReportBookTests.today(), 1)), "compacted")
            let snapshot = ReportBookTests.stored(origin)
            check(snapshot, "after the compaction")
            // Another origin's copy in the bucket is the same JSON: it decodes, loads and sums.
            let copy = try StoredJSON.decoder.decode(DayFigures.self, from: Data(StoredJSON.compact.encode(snapshot)))
            var other = ReportDay(day: copy.day, file: .init(generation: 1, length: 0, snapshotBytes: 0))
            other.load(copy)
            let sum = DayFigures.sum([snapshot, other.figures], day: snapshot.day)
            #expect(sum.reports == ["production": 8] && sum.attestedReports == ["production": 6])
            #expect(sum.rows.map(\.count) == [2, 2, 4] && sum.rows.map { $0.key.attested } == [true, nil, true])
        }
    }

    @Test("A day file written before reports could be attested (no `attested` anywhere) loads as unattested, sums with attested days, and its rows and reports keep their bytes when written again")
    func oldFilesLoad() throws {
        let work = TemporaryDirectory("depot-attested-old")
        defer { work.remove() }
        let folder = work.path + "/reports"
        let day = "2026-11-26"
        try FileSystem.createDirectory(folder)
        let figures = #"{"day":"2026-11-26","reports":{"production":5},"rows":[{"bytes":10,"channel":"production","count":5,"outcome":"installed","pack":"level","release":1,"revision":1}]}"#
        try FileSystem.writeAtomically(Array((figures.dropLast() + #","log":1}"#).utf8) + [10], to: ReportDayFile.snapshotPath(folder, day))
        let oldLines = #"""
            {"channel":"production","reports":2}
            {"bytes":0,"channel":"production","count":2,"error":"http","outcome":"failed","pack":"level","release":1,"revision":1}

            """#
        try FileSystem.writeAtomically(Array(oldLines.utf8), to: ReportDayFile.logPath(folder, day, 2))
        var loaded = try ReportDayFile.load(folder: folder, day: day) { _ in Issue.record("nothing is unreadable") }
        #expect(loaded.figures.reports == ["production": 7] && loaded.figures.attestedReports == nil)
        #expect(loaded.figures.rows.allSatisfy { $0.key.attested == nil } && loaded.figures.rows.map(\.count) == [2, 5])
        // The guard's index counts them among every report, none among the attested.
        let tally = loaded.tally(channel: "production", countingFrom: 1, candidates: [.init(pack: "level", revision: 1)])
        #expect(tally.all.reports == 7 && tally.all.failures == 2 && tally.attested == CandidateTally.Figures())
        // Compacted as it is: the old figures' bytes exactly (nothing new is written about attestation).
        try ReportDayFile.compact(&loaded, folder: folder)
        let unchanged = #"{"day":"2026-11-26","reports":{"production":7},"rows":[{"bytes":0,"channel":"production","count":2,"error":"http","outcome":"failed","pack":"level","release":1,"revision":1},{"bytes":10,"channel":"production","count":5,"outcome":"installed","pack":"level","release":1,"revision":1}]}"#
        #expect(String(decoding: try StoredJSON.compact.encode(loaded.figures), as: UTF8.self) == unchanged)
        // An attested report of the same key: its own row beside the old one, which keeps its bytes.
        loaded.addReport(channel: "production", attested: true)
        loaded.add(DayFigures.Key(channel: "production", release: 1, pack: "level", revision: 1, outcome: .installed, attested: true), bytes: 10)
        try ReportDayFile.append(&loaded, folder: folder)
        let read = try ReportDayFile.read(folder: folder, day: day).figures
        let encoded = String(decoding: try StoredJSON.compact.encode(read), as: UTF8.self)
        #expect(encoded.contains(#"{"bytes":10,"channel":"production","count":5,"outcome":"installed","pack":"level","release":1,"revision":1}"#), "\(encoded)")
        #expect(encoded.contains(#"{"attested":true,"bytes":10,"channel":"production","count":1,"outcome":"installed","pack":"level","release":1,"revision":1}"#), "\(encoded)")
        #expect(read.reports == ["production": 8] && read.attestedReports == ["production": 1])
        // `attested: false` (never written, but a file could say it) is taken as unattested: one row.
        let falseRow = #"{"day":"2026-11-27","reports":{"production":2},"rows":[{"attested":false,"bytes":1,"channel":"production","count":1,"outcome":"installed","pack":"level","release":1,"revision":1},{"bytes":1,"channel":"production","count":1,"outcome":"installed","pack":"level","release":1,"revision":1}]}"#
        let decoded = try StoredJSON.decoder.decode(DayFigures.self, from: Data(falseRow.utf8))
        #expect(DayFigures.sum([decoded], day: "2026-11-27").rows.map(\.count) == [2])
    }

    @Test("A rollout started with attestedOnly (or for an app that requires attestation) records it; its guard is not moved by any number of unattested failures, and attested failures halt it; status shows both kinds")
    func attestedOnlyGuard() async throws {
        try await withServer(configure: { $0.reportRatePerAddress = 1_000_000; $0.reportRateTotal = 1_000_000 }) { origin in
            #expect(try upload(origin, pack: "level", Array(repeating: 1, count: 100)).status == 201)
            #expect(try upload(origin, pack: "level", Array(repeating: 2, count: 100), query: "?channel=beta").status == 201)
            let rollouts = "/v1/apps/\(origin.app)/rollouts/production"
            // Refused for an app that takes no App Attest keys: such a guard would never see a report.
            let blind = try request(origin, "POST", rollouts + "/start?release=2&fraction=1&haltOnFailureRate=0.2&attestedOnly=true", headers: ["Authorization: Bearer \(origin.token)"])
            #expect(blind.status == 409 && blind.bodyText.contains("attestation_not_configured") && blind.bodyText.contains("depot attest configure"), "\(blind.bodyText)")
            let apps = AppStore(folder: DataFolder(origin.data.path))
            try apps.setAttestation(origin.app, AttestationSettings(appID: "ABCDE12345.com.example.game"))
            let start = try request(origin, "POST", rollouts + "/start?release=2&fraction=1&haltOnFailureRate=0.2&minReports=5&attestedOnly=true", headers: ["Authorization: Bearer \(origin.token)"])
            #expect(start.status == 201 && start.bodyText.contains(#""attestedOnly" : true"#), "\(start.bodyText)")
            let record = try StoredJSON.read(RolloutRecord.self, from: origin.data.path + "/apps/\(origin.app)/rollouts/production.json")
            #expect(record.attestedOnly == true)
            let manifest = try #require(try origin.server.origin.releases.current(origin.app, channel: "production"))
            let candidate = try #require(manifest.rollout?.packs.first)
            let failed = DeviceReport(channel: "production", release: manifest.version, packs: [.init(id: "level", revision: candidate.revision, outcome: .failed, error: "integrity")])
            // Forged: 200 unattested failure reports over HTTP. Counted (the fleet shows them), never by the guard.
            for _ in 0..<200 { #expect(try ReportBookTests.report(origin, failed).status == 202) }
            origin.server.flushReports()
            func status() throws -> [String: Any] {
                try #require(try JSONSerialization.jsonObject(with: Data(request(origin, "GET", rollouts, headers: ["Authorization: Bearer \(origin.token)"]).body)) as? [String: Any])
            }
            var now = try status()
            #expect(now["state"] as? String == "running" && now["reports"] as? Int == 200 && now["failures"] as? Int == 200 && now["attestedReports"] as? Int == 0, "\(now)")
            // Attested failures (their assertions checked by the report route) halt it at the 5th.
            let book = origin.server.origin.reports
            for index in 1...5 {
                try book.accept(failed, app: origin.app, attested: true)
                book.flush(final: true)
                now = try status()
                #expect(now["state"] as? String == (index < 5 ? "running" : "halted"), "after \(index) attested failures: \(now)")
            }
            #expect(now["attestedReports"] as? Int == 5 && now["attestedFailures"] as? Int == 5 && now["reports"] as? Int == 205 && now["haltedBy"] as? String == "automatic")
            let trigger = try #require(now["trigger"] as? [String: Any])
            #expect(trigger["reports"] as? Int == 5 && trigger["failures"] as? Int == 5, "the trigger names the attested figures the guard counted: \(trigger)")
            // The fleet shows both kinds, per channel and per row.
            let fleet = try #require(try JSONSerialization.jsonObject(with: Data(request(origin, "GET", "/v1/apps/\(origin.app)/fleet?days=1", headers: ["Authorization: Bearer \(origin.token)"]).body)) as? [String: Any])
            #expect(fleet["reports"] as? [Int] == [205] && fleet["attestedReports"] as? [Int] == [5], "\(fleet)")
            let row = try #require((fleet["revisions"] as? [[String: Any]])?.first { $0["revision"] as? Int == candidate.revision })
            #expect(row["failed"] as? Int == 205 && (row["attested"] as? [String: Int])?["failed"] == 5, "\(row)")

            // Without the flag, for an app whose settings require attestation: recorded all the same.
            try apps.setAttestation(origin.app, AttestationSettings(appID: "ABCDE12345.com.example.game", required: true))
            #expect(try request(origin, "POST", rollouts + "/start?release=2&fraction=1&haltOnFailureRate=0.2&minReports=5", headers: ["Authorization: Bearer \(origin.token)"]).status == 201)
            #expect(try StoredJSON.read(RolloutRecord.self, from: origin.data.path + "/apps/\(origin.app)/rollouts/production.json").attestedOnly == true)
            #expect(try request(origin, "POST", rollouts + "/halt", headers: ["Authorization: Bearer \(origin.token)"]).status == 201)
            // Without the flag, for an app that does not require attestation: the same unattested failures halt it.
            try apps.setAttestation(origin.app, AttestationSettings(appID: "ABCDE12345.com.example.game", required: false))
            #expect(try request(origin, "POST", rollouts + "/start?release=2&fraction=1&haltOnFailureRate=0.2&minReports=5", headers: ["Authorization: Bearer \(origin.token)"]).status == 201)
            let again = try #require(try origin.server.origin.releases.current(origin.app, channel: "production"))
            var plain = failed
            plain.release = again.version
            plain.packs[0].revision = try #require(again.rollout?.packs.first).revision
            #expect(try StoredJSON.read(RolloutRecord.self, from: origin.data.path + "/apps/\(origin.app)/rollouts/production.json").attestedOnly == nil)
            for _ in 0..<5 { #expect(try ReportBookTests.report(origin, plain).status == 202) }
            origin.server.flushReports()
            #expect(try status()["state"] as? String == "halted")
        }
    }
}
