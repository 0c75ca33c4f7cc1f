import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// An origin that publishes for a long time does not grow: what it keeps of each release is
/// bounded by the live set, not by the releases made. The real `depot serve` publishes 120
/// releases of a 1,000-pack app while its manifest, Info.plist keys, release list and channel
/// list are read and its devices report after each; its resident memory after them may exceed
/// what it was after the first 20 by less than 24 MiB (every live envelope kept, as the origin
/// did before issue 49, is 120 × 0.6 MB).
@Suite("Long life: memory", .serialized, .enabled(if: HeavyTests.enabled, "run with the heavy suites, DEPOT_HEAVY_TESTS=1"))
struct LongLifeMemoryTests {
    @Test("120 releases of a 1,000-pack app, each read and reported on: resident memory grows by less than 24 MiB after the first 20")
    func publishingDoesNotGrow() throws {
        let work = TemporaryDirectory.inMemory("depot-long-life")
        defer { work.remove() }
        let shape = HistoryFixture.Shape(releases: 2, window: 1, windowPacks: 1_000, channels: 0, bigManifestPacks: 10)
        try HistoryFixture.build(data: work.path + "/data", shape: shape)
        let app = HistoryFixture.historyApps[0]
        let made = try Processes.run(Processes.depotBinary, ["tokens", "create", "--data", work.path + "/data", "--app", app, "--role", "publisher"])
        let token = try #require(made.stdout.split(separator: "\n").last.map(String.init))
        let server = try ServeProcess(data: work.path + "/data", environment: ["DEPOT_LOG_LEVEL": "warning", "DEPOT_PUBLIC_URL": HistoryFixture.publicURL], bootstrap: false)
        defer { server.process.terminate(); server.process.waitUntilExit() }
        let port = UInt16(server.port)!
        func call(_ method: String, _ path: String, body: [UInt8] = [], token: String? = nil) throws -> Int {
            let auth = token.map { "Authorization: Bearer \($0)\r\n" } ?? ""
            let head = "\(method) \(path) HTTP/1.1\r\nHost: x\r\n\(auth)Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
            return try RawHTTP.send(port: port, head, body: body, timeout: RawHTTP.changeWait).first?.status ?? 0
        }
        var baseline = 0
        for round in 1...120 {
            // A changed pack: a new release of 1,000 packs (the first change raises its revision to 2, and so on).
            #expect(try call("PUT", "/v1/apps/\(app)/packs/w0?release=true", body: Array("round \(round)".utf8), token: token) == 201)
            #expect(try call("GET", "/v1/apps/\(app)/manifest") == 200)
            #expect(try call("GET", "/v1/apps/\(app)/info-plist") == 200)
            #expect(try call("GET", "/v1/apps/\(app)/releases") == 200)
            #expect(try call("GET", "/v1/apps/\(app)/channels") == 200)
            let live = shape.releases + round
            let report = DeviceReport(channel: "production", release: live, packs: [.init(id: "w999", revision: 1, outcome: .installed, error: nil, bytes: 10)])
            #expect(try call("POST", "/v1/apps/\(app)/reports", body: report.encoded()) == 202)
            if round == 20 { baseline = ProcessProbe.residentKiB(server.process.processIdentifier) }
        }
        let after = ProcessProbe.residentKiB(server.process.processIdentifier)
        print("long life: RSS \(baseline / 1024) MiB after 20 releases, \(after / 1024) MiB after 120")
        #expect(after - baseline < 24 * 1024, "RSS \(baseline) KiB after 20 releases, \(after) KiB after 120")
    }
}
