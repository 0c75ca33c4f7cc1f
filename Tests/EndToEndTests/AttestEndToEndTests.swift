import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// App Attest on the real `depot serve` (a debug build, its anchor a test CA's root through
/// `DEPOT_APP_ATTEST_TEST_ANCHOR`) with a software device (``TestAppAttest``) and the real
/// `depot attest` commands: a key attested once over a single-use challenge, listed, revoked;
/// every refusal with its status, its code and the check it names, and no key file left by one.
@Suite("App Attest on the origin: challenges, attestations, the key store and its commands", .ownThreads)
struct AttestEndToEndTests {
    static let app = "com.example.dev"
    static let appID = "ABCDE12345.com.example.dev"

    /// A running origin whose app takes App Attest keys, and a device of it.
    final class Setup {
        let work = TemporaryDirectory("depot-attest")
        var data: String { work.path + "/data" }
        let device: TestAppAttest
        let server: ServeProcess
        static let metricsToken = "attest-metrics-token-0123456789"

        init(environment: [String: String] = [:], configure: Bool = true) throws {
            device = try TestAppAttest(appID: AttestEndToEndTests.appID)
            let anchor = work.path + "/anchor.der"
            try FileSystem.writeAtomically(device.root, to: anchor)
            try FileSystem.writeAtomically(Array(Self.metricsToken.utf8), to: work.path + "/metrics-token", mode: 0o600)
            server = try ServeProcess(data: work.path + "/data", environment: [
                "DEPOT_APP_ATTEST_TEST_ANCHOR": anchor, "DEPOT_METRICS_TOKEN_FILE": work.path + "/metrics-token", "DEPOT_ATTEST_RATE_PER_ADDRESS": "1000", "DEPOT_ATTEST_RATE_TOTAL": "1000",
            ].merging(environment) { $1 })
            if configure {
                let configured = try depot(["attest", "configure", "--app", AttestEndToEndTests.app, "--app-id", AttestEndToEndTests.appID])
                #expect(configured.status == 0 && configured.stdout.contains("App Attest for \(AttestEndToEndTests.appID), production"), "\(configured.stderr)")
            }
        }

        deinit {
            server.process.terminate()
            server.process.waitUntilExit()
            work.remove()
        }

        func depot(_ arguments: [String]) throws -> Processes.Result {
            try Processes.run(Processes.depotBinary, arguments + ["--data", data])
        }

        func post(_ path: String, body: [UInt8] = [], app: String = AttestEndToEndTests.app, headers: [String] = []) throws -> RawHTTP.Response {
            var head = "POST /v1/apps/\(app)/attest/\(path) HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\nConnection: close\r\n"
            for header in headers { head += header + "\r\n" }
            return try #require(try RawHTTP.send(port: UInt16(server.port)!, head + "\r\n", body: body).first)
        }

        /// A challenge's bytes (201), or nil with the answer recorded.
        func challenge(app: String = AttestEndToEndTests.app) throws -> [UInt8]? {
            let answer = try post("challenges", app: app)
            guard answer.status == 201, let object = try? JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any],
                  let text = object["challenge"] as? String, let bytes = Data(base64Encoded: text), object["expiresIn"] as? Int == 300 else {
                Issue.record("no challenge: \(answer.status) \(answer.bodyText)")
                return nil
            }
            #expect(answer.headers.contains { $0.0.lowercased() == "cache-control" && $0.1 == "no-store" })
            return Array(bytes)
        }

        func body(keyID: String, challenge: [UInt8], attestation: Data) -> [UInt8] {
            Array(#"{"keyId":"\#(keyID)","challenge":"\#(Data(challenge).base64EncodedString())","attestation":"\#(attestation.base64EncodedString())"}"#.utf8)
        }

        /// Attests `keyID` over `challenge` as the device would (clientDataHash = SHA-256 of the challenge).
        func attest(_ keyID: String, challenge: [UInt8], tampering: TestAppAttest.Tampering? = nil) async throws -> RawHTTP.Response {
            let hash = Data(SHA256Hasher.hash(challenge))
            let object: Data
            if let tampering {
                object = try device.attestKey(keyID, clientDataHash: hash, tampering: tampering)
            } else {
                object = try await device.attestKey(keyID, clientDataHash: hash)
            }
            return try post("keys", body: body(keyID: keyID, challenge: challenge, attestation: object))
        }

        func keyFiles() -> [String] { FileSystem.contents(of: data + "/apps/\(AttestEndToEndTests.app)/attest").filter { $0.hasSuffix(".json") } }

        func metric(_ result: String, route: String = "keys") throws -> String {
            try Processes.run("/usr/bin/curl", ["-s", "-H", "Authorization: Bearer \(Self.metricsToken)", server.url + "/metrics"]).stdout
                .split(separator: "\n").first { $0.hasPrefix("depot_attest_total") && $0.contains("route=\"\(route)\"") && $0.contains("result=\"\(result)\"") }
                .map(String.init) ?? ""
        }
    }

    static func code(_ answer: RawHTTP.Response) -> String {
        ((try? JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any])?["error"] as? [String: Any])?["code"] as? String ?? ""
    }

    @Test("A device attests its key over a challenge; depot attest list shows it; the challenge cannot be used again; the same key again is 409; revoked, it is listed revoked and cannot attest again")
    func attestListRevoke() async throws {
        let setup = try Setup()
        let keyID = try await setup.device.generateKey()
        let challenge = try #require(try setup.challenge())
        let attested = try await setup.attest(keyID, challenge: challenge)
        #expect(attested.status == 201, "\(attested.bodyText)")
        #expect(attested.bodyText.contains("\"keyId\" : \"\(keyID)\"") && attested.bodyText.contains("\"environment\" : \"production\""), "\(attested.bodyText)")
        let keyBytes = Array(try #require(Data(base64Encoded: keyID)))
        #expect(setup.keyFiles() == [Hex.encode(keyBytes) + ".json"])

        let listed = try setup.depot(["attest", "list", "--app", Self.app])
        let line = try #require(listed.stdout.split(separator: "\n").first, "\(listed.stderr)")
        let fields = line.split(separator: "\t").map(String.init)
        #expect(fields.count == 5 && fields[0] == keyID && fields[1] == "production" && fields[2].hasPrefix("attested 20") && fields[3] == "counter 0" && fields[4] == "active", "\(listed.stdout)")
        // The stored public key is the device's.
        let stored = try #require(try AttestedKeys(folder: DataFolder(setup.data)).key(app: Self.app, keyID: keyBytes))
        #expect(stored.key.publicKey == (try setup.device.publicKey(keyID)))

        // The challenge was used: another key attested over it is refused, and stores nothing.
        let other = try await setup.device.generateKey()
        let reused = try await setup.attest(other, challenge: challenge)
        #expect(reused.status == 400 && Self.code(reused) == "unknown_challenge", "\(reused.bodyText)")
        // A challenge never issued, likewise.
        let made = try await setup.attest(other, challenge: SecureRandom.bytes(32))
        #expect(made.status == 400 && Self.code(made) == "unknown_challenge")
        // The same key over a fresh challenge: 409.
        let again = try await setup.attest(keyID, challenge: try #require(try setup.challenge()))
        #expect(again.status == 409 && Self.code(again) == "key_known", "\(again.bodyText)")
        #expect(setup.keyFiles().count == 1)

        let revoked = try setup.depot(["attest", "revoke", "--app", Self.app, keyID])
        #expect(revoked.status == 0 && revoked.stdout.contains("revoked key \(keyID)"), "\(revoked.stderr)")
        let relisted = try setup.depot(["attest", "list", "--app", Self.app])
        #expect(relisted.stdout.contains(keyID) && relisted.stdout.contains("\trevoked 20"), "\(relisted.stdout)")
        let twice = try setup.depot(["attest", "revoke", "--app", Self.app, Hex.encode(keyBytes)])
        #expect(twice.status == 0 && twice.stdout.contains("was revoked already"))
        let afterRevoke = try await setup.attest(keyID, challenge: try #require(try setup.challenge()))
        #expect(afterRevoke.status == 409 && afterRevoke.bodyText.contains("revoked"), "\(afterRevoke.bodyText)")
        let unknown = try setup.depot(["attest", "revoke", "--app", Self.app, other])
        #expect(unknown.status != 0 && unknown.stderr.contains("has no attested key"))
        #expect(try setup.metric("accepted").hasSuffix(" 1") && setup.metric("unknown_challenge").hasSuffix(" 2") && setup.metric("key_known").hasSuffix(" 2"))
    }

    @Test("Refused with their reasons and no key file: the wrong App ID (app_id), the wrong environment (environment), another CA (chain); a body of another shape (400), over 16 KiB (413); an app without App Attest (404)")
    func refusals() async throws {
        let setup = try Setup()
        let keyID = try await setup.device.generateKey()
        let wrongApp = try await setup.attest(keyID, challenge: try #require(try setup.challenge()), tampering: .init(appID: "ZZZZZ99999.com.example.other"))
        #expect(wrongApp.status == 422 && Self.code(wrongApp) == "attestation_refused" && wrongApp.bodyText.contains("app_id"), "\(wrongApp.bodyText)")
        let development = Array("appattestdevelop".utf8)
        let wrongEnvironment = try await setup.attest(keyID, challenge: try #require(try setup.challenge()), tampering: .init(aaguid: development))
        #expect(wrongEnvironment.status == 422 && wrongEnvironment.bodyText.contains("environment"), "\(wrongEnvironment.bodyText)")
        // A device of another CA (not the anchor): the chain.
        let stranger = try TestAppAttest(appID: Self.appID)
        let strangerKey = try await stranger.generateKey()
        let challenge = try #require(try setup.challenge())
        let object = try await stranger.attestKey(strangerKey, clientDataHash: Data(SHA256Hasher.hash(challenge)))
        let chain = try setup.post("keys", body: setup.body(keyID: strangerKey, challenge: challenge, attestation: object))
        #expect(chain.status == 422 && chain.bodyText.contains("chain"), "\(chain.bodyText)")
        #expect(setup.keyFiles().isEmpty, "a refused attestation left a key file")
        #expect(try setup.metric("app_id").hasSuffix(" 1") && setup.metric("environment").hasSuffix(" 1") && setup.metric("chain").hasSuffix(" 1"))

        // Shapes: not JSON, a name missing, a name twice, a short key id.
        let good = setup.body(keyID: keyID, challenge: SecureRandom.bytes(32), attestation: Data([1, 2, 3]))
        let text = String(decoding: good, as: UTF8.self)
        for bad in ["not json", #"{"keyId":"\#(keyID)"}"#, text.replacingOccurrences(of: "{", with: #"{"keyId":"x","#), text.replacingOccurrences(of: keyID, with: "AAAA")] {
            let answer = try setup.post("keys", body: Array(bad.utf8))
            #expect(answer.status == 400 && Self.code(answer) == "bad_request", "\(bad): \(answer.bodyText)")
        }
        let large = try setup.post("keys", body: [UInt8](repeating: 0x20, count: 16 * 1024 + 1))
        #expect(large.status == 413, "\(large.bodyText)")
        #expect(try setup.metric("invalid").hasSuffix(" 4") && setup.metric("too_large").hasSuffix(" 1"))

        // An app without App Attest: 404 on both routes.
        #expect(try setup.depot(["apps", "create", "com.example.plain"]).status == 0)
        let none = try setup.post("challenges", app: "com.example.plain")
        #expect(none.status == 404 && Self.code(none) == "attestation_not_configured", "\(none.bodyText)")
        let noKeys = try setup.post("keys", body: good, app: "com.example.plain")
        #expect(noKeys.status == 404 && Self.code(noKeys) == "attestation_not_configured")
        // Turned off: the same.
        #expect(try setup.depot(["attest", "configure", "--app", Self.app, "--off"]).status == 0)
        let off = try setup.post("challenges")
        #expect(off.status == 404 && Self.code(off) == "attestation_not_configured")
    }

    @Test("Challenges past 16 unused from one address: 429 with Retry-After; past the token bucket: 429 rate_limited")
    func bounds() async throws {
        let setup = try Setup()
        var issued: [[UInt8]] = []
        for _ in 0..<16 { issued.append(try #require(try setup.challenge())) }
        let seventeenth = try setup.post("challenges")
        #expect(seventeenth.status == 429 && Self.code(seventeenth) == "too_many_challenges", "\(seventeenth.bodyText)")
        let wait = seventeenth.headers.first { $0.0.lowercased() == "retry-after" }.flatMap { Int($0.1) } ?? 0
        #expect(wait > 200 && wait <= 300, "Retry-After \(wait): until the oldest challenge expires")
        #expect(try setup.metric("too_many_challenges", route: "challenge").hasSuffix(" 1"))
        // Using one frees its place.
        let attested = try await setup.attest(try await setup.device.generateKey(), challenge: issued[0])
        #expect(attested.status == 201, "\(attested.bodyText)")
        #expect(try setup.challenge() != nil)

        // A second origin with the bucket at 1 a second (burst 2): the third request at once is refused.
        let limited = try Setup(environment: ["DEPOT_ATTEST_RATE_PER_ADDRESS": "1"])
        var statuses: [Int] = []
        for _ in 0..<3 { statuses.append(try limited.post("challenges").status) }
        #expect(statuses == [201, 201, 429], "\(statuses)")
        let refused = try limited.post("keys", body: Array("{}".utf8))
        #expect(refused.status == 429 && Self.code(refused) == "rate_limited" && refused.headers.contains { $0.0.lowercased() == "retry-after" })
    }
}
