import DepotClient
import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Device reports through a replica of the bucket (a test of the serialized S3 suite).
extension ObjectStorageTests {
    @Test("Device reports sent to a read-only replica count in the writer's rollout figures: each origin writes its own counts to the bucket and the writer sums them")
    func reportsThroughReplica() throws {
        let engine = try S3Engine()
        defer { engine.remove() }
        let store = try Self.bucket(engine, "reports")
        let work = TemporaryDirectory("depot-s3-reports")
        defer { work.remove() }
        let s3 = Self.environment(engine, bucket: "reports")
        let port = try NginxEdge.freePort()
        let publicURL = "http://assets.test:\(port)"
        let writer = try ServeProcess(data: work.path + "/writer", environment: s3.merging(["DEPOT_LISTEN": "127.0.0.1:\(port)", "DEPOT_PUBLIC_URL": publicURL]) { $1 })
        defer { if writer.process.isRunning { writer.process.terminate(); writer.process.waitUntilExit() } }
        let depot = Processes.depotBinary
        let environment = ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": writer.token]
        let common = ["--server", "http://127.0.0.1:\(port)", "--app", "com.example.dev"]
        for (file, channel) in [(try work.file("v1.bin", size: 4_000, seed: 1), "production"), (try work.file("v2.bin", size: 4_100, seed: 2), "beta")] {
            let published = try Processes.run(depot, ["publish", file, "--pack", "level", "--release", "--quiet", "--channel", channel] + common, environment: environment)
            #expect(published.status == 0, "\(published.stderr)")
        }
        let started = try Processes.run(depot, ["rollout", "start", "--release", "2", "--fraction", "0.5"] + common, environment: environment)
        #expect(started.status == 0, "\(started.stdout)\(started.stderr)")
        Eventually.wait { (try? store.list(prefix: "apps/com.example.dev/channels/").isEmpty == false) ?? false }
        let replica = try Self.replica(s3, data: work.path + "/replica", port: port, publicURL: publicURL)
        defer { replica.process.terminate(); replica.process.waitUntilExit() }
        #expect(replica.banner.contains("read-only replica"), "\(replica.banner)")
        // The replica serves the rollout's manifest (the version the writer published last).
        let keys = try Processes.run(depot, ["keys", "export", "--data", work.path + "/writer", "--app", "com.example.dev"])
        try FileSystem.writeAtomically(Array(keys.stdout.utf8), to: work.path + "/client.json")
        let trusted = try ClientConfiguration.decode(Array(keys.stdout.utf8)).trustedKeys()
        func rollout(host: String) -> Rollout? {
            guard let body = try? RawHTTP.send(port: UInt16(port), host: host, "GET /v1/apps/com.example.dev/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first?.body else { return nil }
            return (try? Envelope.decode(body).verifiedManifest(trusting: trusted))?.rollout
        }
        Eventually.wait { rollout(host: "127.0.0.2") != nil }

        // Devices sync and report through the replica only.
        let devices = 12
        var taken = 0
        for device in 0..<devices {
            let sync = try Processes.run(depot, [
                "sync", "--config", work.path + "/client.json", "--dest", work.path + "/device-\(device)", "--quiet", "--report", "--server", publicURL,
                "--app", "com.example.dev", "--resolve", "assets.test:\(port):127.0.0.2",
            ])
            #expect(sync.status == 0 && sync.stderr.contains("reported 1 packs"), "\(sync.stdout)\(sync.stderr)")
            if try StateStore(destination: work.path + "/device-\(device)").read(app: "com.example.dev").packs["level"]?.revision == 2 { taken += 1 }
        }
        // The replica writes its counts within a second; the writer sums them when asked.
        func figures() -> (reports: Int, candidate: Int)? {
            let fleet = try? Processes.run(depot, ["fleet", "--days", "2"] + common, environment: environment)
            guard let text = fleet?.stdout, let line = text.split(separator: "\n").first(where: { $0.contains(" reports in ") }),
                  let reports = Int(line.split(separator: " ").dropFirst(3).first ?? "") else { return nil }
            let candidate = text.split(separator: "\n").first { $0.hasPrefix("reports about the candidate: ") }
                .flatMap { Int($0.dropFirst("reports about the candidate: ".count).prefix { $0.isNumber }) } ?? 0
            return (reports, candidate)
        }
        #expect(Eventually.wait(every: .milliseconds(300)) { figures()?.reports == devices }, "the writer's figures: \(String(describing: figures()))")
        #expect(figures()?.candidate == taken)
        let objects = try store.list(prefix: "apps/com.example.dev/reports/").map(\.key)
        #expect(objects.count == 1 && !FileSystem.exists(work.path + "/writer/apps/com.example.dev/reports"), "only the replica's own object: \(objects)")

        // Objects of an origin that no longer runs: the one past the retention is removed by the
        // writer as it lists them, the recent one counts.
        let gone = String(repeating: "e", count: 32)
        let old = DayFigures.day(of: Date().addingTimeInterval(-100 * 86_400))
        let yesterday = DayFigures.day(of: Date().addingTimeInterval(-86_400))
        for day in [old, yesterday] {
            let body = Array("{\"day\":\"\(day)\",\"reports\":{\"production\":5},\"rows\":[]}".utf8)
            try S3Client.check(
                store.client.call("PUT", key: "apps/com.example.dev/reports/\(gone)/\(day).json", body: .bytes(body), payloadSHA256: Hex.encode(SHA256Hasher.hash(body))),
                "writing a stale object"
            )
        }
        #expect(Eventually.wait(every: .milliseconds(300)) { figures()?.reports == devices + 5 }, "the recent object counts: \(String(describing: figures()))")
        let left = try store.list(prefix: "apps/com.example.dev/reports/\(gone)/").map(\.key)
        #expect(left == ["apps/com.example.dev/reports/\(gone)/\(yesterday).json"], "\(left)")
    }
}
