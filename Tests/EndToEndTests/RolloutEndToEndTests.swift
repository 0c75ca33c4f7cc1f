import DepotClient
import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Many simulated devices against the real origin, each its own state folder (so its own install id).
struct RolloutFleet {
    let origin: TestOrigin
    let root: String
    let configuration: ClientConfiguration
    let count: Int

    init(origin: TestOrigin, root: String, count: Int) throws {
        (self.origin, self.root, self.count) = (origin, root, count)
        configuration = try origin.clientConfiguration()
    }

    func destination(_ device: Int) -> String { root + "/device-\(device)" }

    /// One sync of one device; with `report`, its report is sent as an app that opts in sends it.
    @discardableResult
    func sync(_ device: Int, report: Bool = false) async throws -> SyncReport {
        var sync = DepotSync(server: origin.baseURL, configuration: configuration, destination: destination(device))
        sync.kind = .periodic
        sync.languages = ["en"]
        let result = try await sync.sync()
        if report, let deviceReport = result.deviceReport {
            let status = try await DeviceReporter(server: origin.baseURL, app: origin.app).send(deviceReport)
            #expect(status == 202)
        }
        return result
    }

    func installID(_ device: Int) throws -> String {
        try #require(try StateStore(destination: destination(device)).read(app: origin.app).installID)
    }

    func installed(_ device: Int, _ pack: String) throws -> InstalledState.Pack? {
        try StateStore(destination: destination(device)).read(app: origin.app).packs[pack]
    }

    /// The channel's signed manifest, verified as a device verifies it.
    func manifest(channel: String = "production") throws -> Manifest {
        let path = channel == "production" ? "/v1/apps/\(origin.app)/manifest" : "/v1/apps/\(origin.app)/channels/\(channel)/manifest"
        let response = try #require(try RawHTTP.send(port: origin.port, "GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
        return try Envelope.decode(response.body).verifiedManifest(trusting: configuration.trustedKeys())
    }
}

/// `POST|GET` with the origin's token; the answer.
func call(_ origin: TestOrigin, _ method: String, _ path: String, token: String? = nil, body: [UInt8] = [], headers: String = "") throws -> RawHTTP.Response {
    let auth = (token ?? origin.token).isEmpty ? "" : "Authorization: Bearer \(token ?? origin.token)\r\n"
    let head = "\(method) \(path) HTTP/1.1\r\nHost: x\r\n\(auth)\(headers)Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
    return try #require(try RawHTTP.send(port: origin.port, head, body: body, timeout: RawHTTP.changeWait).first)
}

/// Access-log lines of successful GETs of blob `sha256`.
func blobGets(_ log: CapturedLog, _ sha256: String) -> Int {
    log.all.filter { $0.contains("method=GET") && $0.contains("/blobs/\(sha256)") && ($0.contains("status=200") || $0.contains("status=206")) }.count
}

/// The status a rollout reports (`GET …/rollouts/{channel}`).
struct RolloutStatusAnswer: Decodable {
    struct Trigger: Decodable { var reports: Int64; var failures: Int64 }
    var state: String
    var fraction: Double
    var manifest: Int
    var reports: Int64
    var failures: Int64
    var haltedBy: String?
    var trigger: Trigger?
}

func rolloutStatus(_ origin: TestOrigin, channel: String = "production") throws -> RolloutStatusAnswer {
    let response = try call(origin, "GET", "/v1/apps/\(origin.app)/rollouts/\(channel)")
    #expect(response.status == 200, "\(response.bodyText)")
    return try JSONDecoder().decode(RolloutStatusAnswer.self, from: Data(response.body))
}

/// A CPU-bound fleet (thousands of in-process syncs): run alone by `Deploy/setup.sh test`, with
/// the heavy suites, not in the parallel run where it would starve others.
@Suite("Guarded rollouts end to end: a fleet of simulated devices", .enabled(if: HeavyTests.enabled, "run alone by Deploy/setup.sh test, with DEPOT_HEAVY_TESTS=1"))
struct RolloutEndToEndTests {
    /// A few hundred devices in CI; `DEPOT_FLEET_SIZE=1000` for the full run.
    static var fleetSize: Int { Int(ProcessInfo.processInfo.environment["DEPOT_FLEET_SIZE"] ?? "") ?? 300 }

    @Test("A 10 % rollout: the share taking the candidate within binomial bounds; 50 % keeps every device that had it; halting brings all back; completing moves all; each device downloads only what its choice needs")
    func fleet() async throws {
        let log = CapturedLog()
        try await withServer(configure: { $0.logger = log.logger() }) { origin in
            let work = TemporaryDirectory("depot-rollout")
            defer { work.remove() }
            let (core, v1, v2) = (bytes(4_000, seed: 1), bytes(6_000, seed: 2), bytes(6_500, seed: 3))
            try put(origin, "core", core, policy: "essential")
            try put(origin, "level", v1)
            try put(origin, "level", v2, query: "&channel=beta")
            let fleet = try RolloutFleet(origin: origin, root: work.path, count: Self.fleetSize)
            let n = fleet.count
            for device in 0..<n { try await fleet.sync(device) }
            let current = try fleet.manifest()
            let (coreSHA, v1SHA) = (try #require(current[pack: "core"]).sha256, try #require(current[pack: "level"]).sha256)
            let v2SHA = try #require(try fleet.manifest(channel: "beta")[pack: "level"]).sha256
            #expect(blobGets(log, v1SHA) == n && blobGets(log, coreSHA) == n)

            /// Syncs every device; checks each against its own choice, computed here from the
            /// signed manifest and the install id in its state; returns who took the candidate.
            func round(expectRollout: Bool) async throws -> (taken: Set<Int>, manifest: Manifest) {
                let manifest = try fleet.manifest()
                #expect((manifest.rollout != nil) == expectRollout)
                var taken = Set<Int>()
                for device in 0..<n {
                    let report = try await fleet.sync(device)
                    #expect(report.failed.isEmpty)
                    let chosen = manifest.resolved(installID: try fleet.installID(device))
                    let level = try #require(chosen[pack: "level"])
                    let installed = try #require(try fleet.installed(device, "level"))
                    #expect(installed.revision == level.revision && installed.sha256 == level.sha256)
                    if level.sha256 == v2SHA { taken.insert(device) }
                    if device % 37 == 0 {
                        // Byte for byte what was published.
                        #expect(try FileSystem.readFile(fleet.destination(device) + "/packs/level") == (level.sha256 == v2SHA ? v2 : v1))
                        #expect(try FileSystem.readFile(fleet.destination(device) + "/packs/core") == core)
                    }
                }
                return (taken, manifest)
            }
            func bounds(_ share: Double) -> ClosedRange<Int> {
                let mean = Double(n) * share, spread = 4.5 * (Double(n) * share * (1 - share)).squareRoot()
                return Int((mean - spread).rounded(.down))...Int((mean + spread).rounded(.up))
            }

            var start = try call(origin, "POST", "/v1/apps/\(origin.app)/rollouts/production/start?release=3&fraction=0.1")
            #expect(start.status == 201, "\(start.bodyText)")
            let (v1Before, v2Before) = (blobGets(log, v1SHA), blobGets(log, v2SHA))
            let (tenth, first) = try await round(expectRollout: true)
            #expect(bounds(0.1).contains(tenth.count), "\(tenth.count) of \(n) took a 10 % candidate")
            #expect(blobGets(log, v2SHA) - v2Before == tenth.count && blobGets(log, v1SHA) == v1Before, "only the devices that took it download it")

            start = try call(origin, "POST", "/v1/apps/\(origin.app)/rollouts/production/advance?fraction=0.5")
            #expect(start.status == 201, "\(start.bodyText)")
            let v2Mid = blobGets(log, v2SHA)
            let (half, second) = try await round(expectRollout: true)
            #expect(tenth.isSubset(of: half) && bounds(0.5).contains(half.count), "\(half.count) of \(n) at 50 %")
            #expect(blobGets(log, v2SHA) - v2Mid == half.count - tenth.count && blobGets(log, v1SHA) == v1Before)
            #expect(second.version > first.version)

            #expect(try call(origin, "POST", "/v1/apps/\(origin.app)/rollouts/production/halt").status == 201)
            let v1Halt = blobGets(log, v1SHA)
            let (none, third) = try await round(expectRollout: true)
            #expect(none.isEmpty && third.rollout?.fraction == 0 && third.version > second.version)
            #expect(blobGets(log, v1SHA) - v1Halt == half.count, "each device that had the candidate goes back to the current revision")
            #expect(try rolloutStatus(origin).state == "halted")

            #expect(try call(origin, "POST", "/v1/apps/\(origin.app)/rollouts/production/complete").status == 201)
            let v2End = blobGets(log, v2SHA)
            let (all, last) = try await round(expectRollout: false)
            #expect(all.count == n && last.version > third.version && last[pack: "level"]?.sha256 == v2SHA)
            #expect(blobGets(log, v2SHA) - v2End == n && blobGets(log, coreSHA) == n, "the unchanged pack was never downloaded again")
            #expect(try rolloutStatus(origin).state == "completed")
            // Another sync changes nothing: completing kept the candidate's revision.
            let again = try await fleet.sync(0)
            #expect(again.installed.isEmpty && again.unchanged.sorted() == ["core", "level"])
            print("RolloutEndToEndTests: \(n) devices; 10 %: \(tenth.count), 50 %: \(half.count)")
        }
    }
}
