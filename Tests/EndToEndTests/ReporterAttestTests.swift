import DepotClient
import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// An App Attest device that records what it was asked, in order, around another one (or none:
/// then it answers nothing and throws `failure`). `isSupported` as given.
final class RecordingAppAttest: AppAttesting {
    enum Call: Equatable {
        /// `attestKey` with the key id and the clientDataHash it was given.
        case generateKey, attestKey(String, Data), generateAssertion(String)
    }

    let supported: Bool
    let inner: (any AppAttesting)?
    /// Errors to throw, by call kind, once each, before the call reaches `inner`.
    private let failures = Locked<[String: [any Error]]>([:])
    private let log = Locked<[Call]>([])

    init(supported: Bool = true, wrapping inner: (any AppAttesting)? = nil) {
        (self.supported, self.inner) = (supported, inner)
    }

    var calls: [Call] { log.withLock { $0 } }
    var isSupported: Bool { supported }

    /// The next `kind` call ("generateKey", "attestKey", "generateAssertion") throws `error`.
    func fail(_ kind: String, with error: any Error) { failures.withLock { $0[kind, default: []].append(error) } }

    private func record(_ call: Call, _ kind: String) throws {
        log.withLock { $0.append(call) }
        if let error = failures.withLock({ $0[kind]?.isEmpty == false ? $0[kind]!.removeFirst() : nil }) { throw error }
    }

    func generateKey() async throws -> String {
        try record(.generateKey, "generateKey")
        guard let inner else { throw Self.unsupported }
        return try await inner.generateKey()
    }

    func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data {
        try record(.attestKey(keyId, clientDataHash), "attestKey")
        guard let inner else { throw Self.unsupported }
        return try await inner.attestKey(keyId, clientDataHash: clientDataHash)
    }

    func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data {
        try record(.generateAssertion(keyId), "generateAssertion")
        guard let inner else { throw Self.unsupported }
        return try await inner.generateAssertion(keyId, clientDataHash: clientDataHash)
    }

    /// DeviceCheck's errors as the framework throws them (`DCErrorDomain`, `DCError.Code`).
    static func deviceCheckError(_ code: Int) -> NSError { NSError(domain: "com.apple.devicecheck.error", code: code) }
    static let unsupported = deviceCheckError(1)  // featureUnsupported
    static let invalidKey = deviceCheckError(3)
    static let serverUnavailable = deviceCheckError(4)
}

/// The test CA's software device is what DCAppAttestService is to DepotClient.
extension TestAppAttest: AppAttesting {}

/// What `DeviceReporter` keeps in its state folder (`attest-key.json`), read as the next send would.
struct KeptKey: Decodable {
    var app: String
    var keyId: String
    var attested: Bool
    var challenge: String?
    var attestation: String?
    var notBefore: String?

    static func read(_ folder: String) -> KeptKey? {
        guard let bytes = try? FileSystem.readFile(folder + "/attest-key.json") else { return nil }
        return try? JSONDecoder().decode(KeptKey.self, from: Data(bytes))
    }
}

@Suite("Attested reports: DeviceReporter with App Attest against the origin", .ownThreads)
struct ReporterAttestTests {
    static func installed(_ origin: TestOrigin) throws -> DeviceReport {
        try put(origin, "level", bytes(2_000, seed: 1))
        return DeviceReport(channel: "production", release: 1, packs: [.init(id: "level", revision: 1, outcome: .installed, bytes: 2_000)])
    }

    struct Counted: Equatable {
        var reports: Int64
        var attested: Int64
    }

    /// The production channel's reports and attested reports, summed over the days `GET …/fleet` shows.
    static func fleet(_ origin: TestOrigin) throws -> Counted {
        origin.server.flushReports()
        let response = try call(origin, "GET", "/v1/apps/\(origin.app)/fleet?channel=production")
        #expect(response.status == 200, "\(response.bodyText)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])
        func sum(_ key: String) -> Int64 { ((object[key] as? [Any]) ?? []).reduce(0) { $0 + ((($1 as? NSNumber)?.int64Value) ?? 0) } }
        return Counted(reports: sum("reports"), attested: sum("attestedReports"))
    }

    @Test("A device without App Attest (isSupported false) sends its report unattested: no DeviceCheck call, no key kept, counted")
    func unsupportedDevice() async throws {
        try await withServer { origin in
            let state = TemporaryDirectory("depot-attest-state")
            defer { state.remove() }
            let device = RecordingAppAttest(supported: false)
            let reporter = DeviceReporter(server: origin.baseURL, app: origin.app, attestation: device, stateFolder: state.path)
            let report = try Self.installed(origin)
            #expect(try await reporter.send(report) == 202)
            #expect(device.calls.isEmpty)
            #expect(!FileSystem.exists(state.path + "/attest-key.json"))
            #expect(try Self.fleet(origin) == Self.Counted(reports: 1, attested: 0))
        }
    }

    @Test("An origin that does not attest the app (no attestation settings): the report goes unattested, and no key is generated for it")
    func originWithoutAttestation() async throws {
        try await withServer { origin in
            let state = TemporaryDirectory("depot-attest-state")
            defer { state.remove() }
            let device = RecordingAppAttest()
            let reporter = DeviceReporter(server: origin.baseURL, app: origin.app, attestation: device, stateFolder: state.path)
            let report = try Self.installed(origin)
            #expect(try await reporter.send(report) == 202)
            #expect(device.calls.isEmpty, "the challenge is asked for before a key is made")
            let challenge = try call(origin, "POST", "/v1/apps/\(origin.app)/attest/challenges", token: "")
            #expect(challenge.status == 404 && challenge.bodyText.contains("attestation_not_configured"), "what the reporter met: \(challenge.bodyText)")
            // No key; attestation paused for six hours (no challenge asked for before each report).
            let kept = try #require(KeptKey.read(state.path))
            #expect(kept.keyId == "" && kept.notBefore != nil, "\(kept)")
            #expect(try await reporter.send(report) == 202)
            #expect(device.calls.isEmpty)
        }
    }

    @Test("Attestation without a state folder to keep the key in is refused before anything is sent")
    func stateFolderRequired() async throws {
        var reporter = DeviceReporter(server: URL(string: "http://127.0.0.1:9")!, app: "com.example.game")
        reporter.attestation = RecordingAppAttest()
        await #expect {
            try await reporter.send(DeviceReport(channel: "production", release: 1, packs: []))
        } throws: { error in
            (error as? ClientError)?.kind == .state && "\(error)".contains("stateFolder")
        }
    }

    @Test("Against the real depot serve (its anchor a test CA's, DEPOT_APP_ATTEST_TEST_ANCHOR), set up by depot attest configure: the first send attests once and signs, the second only signs — one generateKey, one attestKey in all — the key counted once as attested for the release (the second report unattested); depot attest list shows the key and its counter 2")
    func againstDepotServe() async throws {
        let (app, appID) = ("com.example.dev", "ABCDE12345.com.example.dev")
        let work = TemporaryDirectory("depot-reporter-serve")
        defer { work.remove() }
        let device = try TestAppAttest(appID: appID)
        try FileSystem.writeAtomically(device.root, to: work.path + "/anchor.der")
        let data = work.path + "/data"
        let server = try ServeProcess(data: data, environment: ["DEPOT_APP_ATTEST_TEST_ANCHOR": work.path + "/anchor.der"])
        defer {
            server.process.terminate()
            server.process.waitUntilExit()
        }
        let depot = { (arguments: [String]) in try Processes.run(Processes.depotBinary, arguments + ["--data", data]) }
        let configured = try depot(["attest", "configure", "--app", app, "--app-id", appID])
        #expect(configured.status == 0, "\(configured.stdout)\(configured.stderr)")
        let pack = bytes(3_000, seed: 9)
        let head = "PUT /v1/apps/\(app)/packs/level?release=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(server.token)\r\nContent-Length: \(pack.count)\r\nConnection: close\r\n\r\n"
        #expect(try RawHTTP.send(port: UInt16(server.port)!, head, body: pack).first?.status == 201)

        let state = TemporaryDirectory("depot-reporter-serve-state")
        defer { state.remove() }
        let recorder = RecordingAppAttest(wrapping: device)
        let reporter = DeviceReporter(server: URL(string: server.url)!, app: app, attestation: recorder, stateFolder: state.path)
        let report = DeviceReport(channel: "production", release: 1, packs: [.init(id: "level", revision: 1, outcome: .installed, bytes: 3_000)])
        #expect(try await reporter.send(report) == 202)
        #expect(try await reporter.send(report) == 202)
        let key = try #require(KeptKey.read(state.path)?.keyId)
        #expect(recorder.calls.filter { $0 == .generateKey }.count == 1)
        #expect(recorder.calls.filter { if case .attestKey = $0 { true } else { false } }.count == 1)
        #expect(recorder.calls.filter { $0 == .generateAssertion(key) }.count == 2)

        // Counted as attested (the origin writes its counts within a second).
        func attested() -> Int64? {
            let get = "GET /v1/apps/\(app)/fleet?channel=production HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(server.token)\r\nConnection: close\r\n\r\n"
            guard let body = try? RawHTTP.send(port: UInt16(server.port)!, get).first?.body,
                  let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else { return nil }
            return ((object["attestedReports"] as? [Any]) ?? []).reduce(0) { $0 + ((($1 as? NSNumber)?.int64Value) ?? 0) }
        }
        // The key counts once per channel release among the attested reports; its second report
        // about release 1 counts unattested.
        #expect(Eventually.wait(every: .milliseconds(100)) { attested() == 1 }, "attested reports: \(String(describing: attested()))")
        // The counter is written by the origin's report writer, with the counts.
        var listed = try depot(["attest", "list", "--app", app])
        #expect(try Eventually.wait {
            listed = try depot(["attest", "list", "--app", app])
            return listed.stdout.contains("counter 2")
        }, "\(listed.stdout)")
        #expect(listed.stdout.contains(key) && listed.stdout.contains("active"), "\(listed.stdout)")
    }
}
