import DepotClient
import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// An origin (in this process) whose app takes App Attest keys from `device`'s test CA, a state
/// folder, and a reporter that signs with `device` wrapped in a recorder.
struct AttestingSetup {
    static let appID = "ABCDE12345.com.example.game"

    let origin: TestOrigin
    let device: TestAppAttest
    let recorder: RecordingAppAttest
    let state: TemporaryDirectory

    /// The reporter, with a timeout no loaded test machine reaches: these tests are about what the
    /// record says after each answer, not about a slow origin.
    var reporter: DeviceReporter {
        var reporter = DeviceReporter(server: origin.baseURL, app: origin.app, attestation: recorder, stateFolder: state.path)
        reporter.timeout = 300
        return reporter
    }
    var kept: KeptKey? { KeptKey.read(state.path) }

    /// Sends `report` until the kept record says attested, at most `sends` times (each accepted,
    /// 202), and returns how many it took. The attestation is a round trip to the origin, and a
    /// send whose round trip failed on the way (a connection lost under load) goes unattested by
    /// design and leaves no pause: the next send tries again. A send that ends unattested with a
    /// pause recorded, or `sends` of them, fails the test.
    func sendUntilAttested(_ report: DeviceReport, sends: Int = 3) async throws -> Int {
        for sent in 1...sends {
            #expect(try await reporter.send(report) == 202)
            if kept?.attested == true { return sent }
            try #require(kept?.notBefore == nil, "a pause after a send that did not attest: \(String(describing: kept)); calls \(recorder.calls)")
        }
        Issue.record("\(sends) sends and no attested key: \(String(describing: kept)); calls \(recorder.calls)")
        return sends
    }

    /// The keys the origin holds for the app, as `depot attest list` reads them.
    func originKeys() throws -> [StoredKey] { try AttestedKeys(folder: DataFolder(origin.data.path)).list(app: origin.app) }

    static func run(appID: String = appID, device deviceAppID: String = appID, _ body: (AttestingSetup) async throws -> Void) async throws {
        let device = try TestAppAttest(appID: deviceAppID)
        // Challenges live an hour here: these tests are about what the record says after each
        // answer, and in the full parallel suite two sends of one test can be minutes apart
        // (the client fetches a fresh challenge for one expiring within 30 s).
        try await withServer(configure: { $0.appAttestAnchor = device.root; $0.attestChallengeLifetime = .seconds(3_600) }) { origin in
            try AppStore(folder: DataFolder(origin.data.path)).setAttestation(origin.app, AttestationSettings(appID: appID))
            let state = TemporaryDirectory("depot-attest-state")
            defer { state.remove() }
            try await body(AttestingSetup(origin: origin, device: device, recorder: RecordingAppAttest(wrapping: device), state: state))
        }
    }
}

@Suite("Attested reports: the attestation round trip, once per install, and what survives a failure at each step", .ownThreads)
struct AttestationFlowTests {
    @Test("The first send attests the key once (challenge, attestKey over the challenge's SHA-256, the origin stores it) and signs; the second only signs")
    func attestsOnceThenSigns() async throws {
        try await AttestingSetup.run { setup in
            let report = try ReporterAttestTests.installed(setup.origin)
            #expect(try await setup.reporter.send(report) == 202)
            let key = try #require(setup.kept?.keyId)
            #expect(setup.kept?.attested == true && setup.kept?.attestation == nil && setup.kept?.challenge == nil)
            #expect(setup.recorder.calls.count == 3)
            #expect(setup.recorder.calls.first == .generateKey && setup.recorder.calls.last == .generateAssertion(key))
            guard case .attestKey(let attested, let hash) = setup.recorder.calls[1] else { Issue.record("\(setup.recorder.calls)"); return }
            #expect(attested == key && hash.count == 32)
            #expect(try setup.originKeys().map { Data($0.key.keyID).base64EncodedString() } == [key])

            #expect(try await setup.reporter.send(report) == 202)
            #expect(setup.recorder.calls.dropFirst(3) == [.generateAssertion(key)], "the second send only signs")
            // Written by the origin's report writer (within a second, with the counts).
            #expect(try Eventually.wait { try setup.originKeys().map(\.counter) == [2] }, "the origin advanced the key's counter for each report")
            // A key counts once per channel release among the attested reports.
            #expect(try ReporterAttestTests.fleet(setup.origin) == .init(reports: 2, attested: 1))
        }
    }

    @Test("A key the origin does not know (403 unknown_attested_key: another origin's, a restored data folder) is forgotten, the report sent again unattested; the next send attests a new one and is counted attested")
    func unknownKeyIsReplaced() async throws {
        try await AttestingSetup.run { setup in
            let report = try ReporterAttestTests.installed(setup.origin)
            // A key attested elsewhere: recorded as attested, unknown to this origin.
            let elsewhere = try await setup.device.generateKey()
            try FileSystem.writeAtomically(Array(#"{"app":"\#(setup.origin.app)","keyId":"\#(elsewhere)","attested":true}"#.utf8), to: setup.state.path + "/attest-key.json")
            // Refused (403), and sent again unattested: counted.
            #expect(try await setup.reporter.send(report) == 202)
            #expect(setup.kept?.keyId == "", "forgotten")
            #expect(setup.recorder.calls == [.generateAssertion(elsewhere)])
            let sends = try await setup.sendUntilAttested(report)
            #expect(setup.kept?.attested == true && setup.kept?.keyId != elsewhere)
            #expect(setup.recorder.calls.filter { $0 == .generateKey }.count == 1)
            #expect(try ReporterAttestTests.fleet(setup.origin) == .init(reports: Int64(1 + sends), attested: 1))
        }
    }

    @Test("A key the operator revoked (depot attest revoke: 403 attested_key_revoked) is forgotten; the next send attests a new one")
    func revokedKeyIsReplaced() async throws {
        try await AttestingSetup.run { setup in
            let report = try ReporterAttestTests.installed(setup.origin)
            #expect(try await setup.reporter.send(report) == 202)
            let first = try #require(setup.kept?.keyId)
            let revoke = try Processes.run(Processes.depotBinary, ["attest", "revoke", "--data", setup.origin.data.path, "--app", setup.origin.app, first])
            #expect(revoke.status == 0, "\(revoke.stdout)\(revoke.stderr)")
            #expect(try await setup.reporter.send(report) == 202, "refused (403), sent again unattested")
            #expect(setup.kept?.keyId == "" && setup.kept?.notBefore == nil)
            let sends = try await setup.sendUntilAttested(report)
            #expect(setup.kept?.attested == true && setup.kept?.keyId != first)
            #expect(try ReporterAttestTests.fleet(setup.origin) == .init(reports: Int64(2 + sends), attested: 2))
        }
    }

    @Test("App Attest turned off for the app (depot attest configure --off) after devices attested: a signed report is refused (404 attestation_not_configured) and sent again unattested, counted; the next reports go unattested without asking; the key is kept")
    func turnedOffAfterAttesting() async throws {
        try await AttestingSetup.run { setup in
            let report = try ReporterAttestTests.installed(setup.origin)
            #expect(try await setup.reporter.send(report) == 202)
            let key = try #require(setup.kept?.keyId)
            let off = try Processes.run(Processes.depotBinary, ["attest", "configure", "--data", setup.origin.data.path, "--app", setup.origin.app, "--off"])
            #expect(off.status == 0, "\(off.stdout)\(off.stderr)")
            #expect(try await setup.reporter.send(report) == 202, "sent again unattested")
            #expect(setup.kept?.keyId == key && setup.kept?.attested == true, "the key is kept for when attestation is back")
            let calls = setup.recorder.calls.count
            #expect(try await setup.reporter.send(report) == 202)
            #expect(setup.recorder.calls.count == calls, "paused: no assertion made for an origin that takes none")
            #expect(try Eventually.wait { try ReporterAttestTests.fleet(setup.origin) == .init(reports: 3, attested: 1) })
        }
    }

    @Test("DeviceCheck's serverUnavailable on attestKey: unattested this time; the next send attests the same key over the same clientDataHash, as Apple's page asks")
    func serverUnavailableRetriesTheSameInputs() async throws {
        try await AttestingSetup.run { setup in
            let report = try ReporterAttestTests.installed(setup.origin)
            setup.recorder.fail("attestKey", with: RecordingAppAttest.serverUnavailable)
            #expect(try await setup.reporter.send(report) == 202)
            let kept = try #require(setup.kept)
            #expect(!kept.attested && kept.challenge != nil && kept.attestation == nil)
            #expect(try setup.originKeys().isEmpty)

            #expect(try await setup.reporter.send(report) == 202)
            let calls = setup.recorder.calls
            #expect(calls.filter { $0 == .generateKey }.count == 1, "one key in all: \(calls)")
            let attests = calls.compactMap { if case .attestKey(let key, let hash) = $0 { (key, hash) } else { nil } }
            #expect(attests.count == 2 && attests[0] == attests[1] && attests[0].0 == kept.keyId, "the same key, the same clientDataHash")
            #expect(setup.kept?.attested == true && calls.last == .generateAssertion(kept.keyId))
            #expect(try setup.originKeys().count == 1)
        }
    }

    @Test("DeviceCheck's invalidKey on generateAssertion: the report goes unattested, the key is forgotten, the next send attests a new one")
    func invalidKeyReplacesTheKey() async throws {
        try await AttestingSetup.run { setup in
            let report = try ReporterAttestTests.installed(setup.origin)
            #expect(try await setup.reporter.send(report) == 202)
            let first = try #require(setup.kept?.keyId)
            setup.recorder.fail("generateAssertion", with: RecordingAppAttest.invalidKey)
            #expect(try await setup.reporter.send(report) == 202)
            #expect(setup.kept?.keyId == "" && setup.kept?.notBefore == nil, "forgotten, no pause")
            _ = try await setup.sendUntilAttested(report)
            let second = try #require(setup.kept?.keyId)
            #expect(second != first && setup.kept?.attested == true)
            #expect(setup.recorder.calls.filter { $0 == .generateKey }.count == 2)
            #expect(try setup.originKeys().count == 2)
        }
    }

    @Test("DeviceCheck's invalidKey on attestKey (a key attested already, or refused by Apple): unattested this time, the key forgotten, a new one attested at the next send")
    func invalidKeyOnAttestation() async throws {
        try await AttestingSetup.run { setup in
            let report = try ReporterAttestTests.installed(setup.origin)
            setup.recorder.fail("attestKey", with: RecordingAppAttest.invalidKey)
            #expect(try await setup.reporter.send(report) == 202)
            #expect(setup.kept?.keyId == "" && setup.kept?.notBefore == nil && setup.recorder.calls.count == 2)
            let sends = try await setup.sendUntilAttested(report)
            #expect(setup.kept?.attested == true && setup.recorder.calls.filter { $0 == .generateKey }.count == 2)
            #expect(try ReporterAttestTests.fleet(setup.origin) == .init(reports: Int64(1 + sends), attested: 1))
        }
    }

    @Test("An origin that refuses the attestation (422: another App ID): the key is discarded, as Apple says, and no attestation is tried again for a day")
    func refusedAttestationWaits() async throws {
        try await AttestingSetup.run(device: "ABCDE12345.com.example.other") { setup in
            let report = try ReporterAttestTests.installed(setup.origin)
            #expect(try await setup.reporter.send(report) == 202)
            #expect(setup.recorder.calls.count == 2, "generateKey and attestKey: \(setup.recorder.calls)")
            #expect(setup.kept?.keyId == "" && setup.kept?.attested == false)
            #expect(try await setup.reporter.send(report) == 202)
            #expect(setup.recorder.calls.count == 2, "nothing tried again at once")
            #expect(try setup.originKeys().isEmpty)
        }
    }

    @Test("Stopped after Apple's attestation was kept and before the origin's answer: the next send hands the same object over, with no new key and no second attestKey")
    func keptAttestationIsHandedOver() async throws {
        try await AttestingSetup.run { setup in
            let report = try ReporterAttestTests.installed(setup.origin)
            let keyId = try await setup.device.generateKey()
            let challenge = try #require(try Self.challenge(setup))
            let object = try await setup.device.attestKey(keyId, clientDataHash: Data(SHA256Hasher.hash(Data(base64Encoded: challenge)!)))
            try Self.keep(setup, keyId: keyId, challenge: challenge, attestation: object)
            #expect(try await setup.reporter.send(report) == 202)
            #expect(setup.recorder.calls == [.generateAssertion(keyId)])
            #expect(setup.kept?.attested == true)
            #expect(try setup.originKeys().map { Data($0.key.keyID).base64EncodedString() } == [keyId])
        }
    }

    @Test("Stopped after the origin stored the key, before its 201 arrived: the same object handed over again meets a taken challenge (400), the key is taken as attested, and the report's assertion proves it (counted attested)")
    func lostCreatedAnswer() async throws {
        try await AttestingSetup.run { setup in
            let report = try ReporterAttestTests.installed(setup.origin)
            let keyId = try await setup.device.generateKey()
            let challenge = try #require(try Self.challenge(setup))
            let object = try await setup.device.attestKey(keyId, clientDataHash: Data(SHA256Hasher.hash(Data(base64Encoded: challenge)!)))
            try Self.keep(setup, keyId: keyId, challenge: challenge, attestation: object)
            let body = try JSONSerialization.data(withJSONObject: ["keyId": keyId, "challenge": challenge, "attestation": object.base64EncodedString()])
            #expect(try call(setup.origin, "POST", "/v1/apps/\(setup.origin.app)/attest/keys", token: "", body: Array(body)).status == 201, "the answer the device never saw")
            #expect(try await setup.reporter.send(report) == 202)
            #expect(setup.recorder.calls == [.generateAssertion(keyId)] && setup.kept?.attested == true)
            #expect(try ReporterAttestTests.fleet(setup.origin) == .init(reports: 1, attested: 1))
        }
    }

    @Test("Stopped after Apple attested the key, and the origin never took it (its challenge gone): the key is spent (DeviceCheck attests a key once); its report is refused (403) and sent again unattested, and a new key attested at the next send")
    func spentKeyIsReplaced() async throws {
        try await AttestingSetup.run { setup in
            let report = try ReporterAttestTests.installed(setup.origin)
            let keyId = try await setup.device.generateKey()
            let gone = Data((0..<32).map { UInt8($0) }).base64EncodedString()  // no challenge the origin gave
            let object = try await setup.device.attestKey(keyId, clientDataHash: Data(SHA256Hasher.hash(Data(base64Encoded: gone)!)))
            try Self.keep(setup, keyId: keyId, challenge: gone, attestation: object)
            #expect(try await setup.reporter.send(report) == 202, "taken as attested, refused as unknown (403), sent again unattested")
            #expect(setup.kept?.keyId == "" && setup.kept?.notBefore == nil)
            let sends = try await setup.sendUntilAttested(report)
            #expect(setup.kept?.attested == true && setup.kept?.keyId != keyId)
            #expect(try setup.originKeys().count == 1)
            #expect(try ReporterAttestTests.fleet(setup.origin) == .init(reports: Int64(1 + sends), attested: 1))
        }
    }

    /// A challenge from the origin (base64).
    static func challenge(_ setup: AttestingSetup) throws -> String? {
        let response = try call(setup.origin, "POST", "/v1/apps/\(setup.origin.app)/attest/challenges", token: "")
        #expect(response.status == 201, "\(response.bodyText)")
        return (try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])?["challenge"] as? String
    }

    /// The record a send leaves when it stops after keeping Apple's attestation object.
    static func keep(_ setup: AttestingSetup, keyId: String, challenge: String, attestation: Data) throws {
        let record: [String: Any] = ["app": setup.origin.app, "keyId": keyId, "attested": false, "challenge": challenge,
                                     "challengeExpires": ISO8601DateFormatter().string(from: Date().addingTimeInterval(300)),
                                     "attestation": attestation.base64EncodedString()]
        try FileSystem.writeAtomically(Array(try JSONSerialization.data(withJSONObject: record)), to: setup.state.path + "/attest-key.json")
    }
}
