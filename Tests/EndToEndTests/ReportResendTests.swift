import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// No report lost to `reports_busy`: a report about a release the origin has not kept (more than
/// ``ReleaseListings``' inline 256 packs, not the live one, not read since start-up) is shed with
/// `503` and `Retry-After: 1` while the origin reads the release; `DeviceReporter` sends it again
/// after the wait, and it is counted. With no resends (what the client did before) the same
/// report is lost.
@Suite("Reports: a shed report is sent again", .serialized)
struct ReportResendTests {
    @Test("A report the origin sheds while it reads the release is sent again after Retry-After and accepted; with resends 0 it is lost (503)")
    func shedReportIsSentAgain() async throws {
        let work = TemporaryDirectory.inMemory("depot-report-resend")
        defer { work.remove() }
        // Three window releases of 300 packs: the two before the live one are not kept at start-up.
        let shape = HistoryFixture.Shape(releases: 4, window: 3, windowPacks: 300, channels: 0, bigManifestPacks: 1)
        try HistoryFixture.build(data: work.path + "/data", shape: shape)
        let app = HistoryFixture.historyApps[0]
        let server = try ServeProcess(data: work.path + "/data", environment: ["DEPOT_LOG_LEVEL": "warning", "DEPOT_PUBLIC_URL": HistoryFixture.publicURL], bootstrap: false)
        defer { server.process.terminate(); server.process.waitUntilExit() }
        let origin = try #require(URL(string: "http://127.0.0.1:\(server.port)"))
        func report(_ release: Int) -> DeviceReport {
            DeviceReport(channel: "production", release: release, packs: [.init(id: "w299", revision: 1, outcome: .installed, error: nil, bytes: 10)])
        }
        // Before: shed, and not sent again.
        var once = DeviceReporter(server: origin, app: app)
        once.resends = 0
        #expect(try await once.send(report(shape.releases - 2)) == 503)
        // Now: the same kind of report about the other release not kept is sent again and counted.
        let reporter = DeviceReporter(server: origin, app: app)
        #expect(try await reporter.send(report(shape.releases - 1)) == 202)
        // The origin counted it: the fleet's reports (written four times a second) reach one.
        let made = try Processes.run(Processes.depotBinary, ["tokens", "create", "--data", work.path + "/data", "--app", app, "--role", "publisher"])
        let token = try #require(made.stdout.split(separator: "\n").last.map(String.init))
        let counted = Eventually.wait(every: .milliseconds(100)) {
            let answer = try? RawHTTP.send(
                port: UInt16(server.port)!, "GET /v1/apps/\(app)/fleet?channel=production HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nConnection: close\r\n\r\n"
            ).first
            guard answer?.status == 200, let object = answer.flatMap({ try? JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any] }) else { return false }
            return ((object["reports"] as? [Any]) ?? []).reduce(0) { $0 + ((($1 as? NSNumber)?.intValue) ?? 0) } >= 1
        }
        #expect(counted, "the report sent again was never counted")
    }
}
