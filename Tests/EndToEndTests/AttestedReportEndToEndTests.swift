import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Attested reports on the real `depot serve` (a debug build trusting a test CA through
/// `DEPOT_APP_ATTEST_TEST_ANCHOR`) from software App Attest devices (``TestAppAttest``): what
/// counts as attested, what is refused and never counted, and the guard of an app that requires
/// attestation, which forged reports cannot move and attested failures halt.
@Suite("Attested reports end to end: assertions over a report's bytes, replays, revoked keys, the guard of an app that requires attestation", .ownThreads)
struct AttestedReportEndToEndTests {
    typealias Setup = AttestEndToEndTests.Setup
    static let app = AttestEndToEndTests.app

    /// Publishes `level` on production (release 1) and on beta (release 2).
    static func publish(_ setup: Setup) throws {
        for (bytes, channel) in [(bytes(3_000, seed: 31), "production"), (bytes(3_100, seed: 32), "beta")] {
            let put = try Self.send(setup, "PUT", "/v1/apps/\(app)/packs/level?release=true&channel=\(channel)", body: bytes, headers: ["Authorization: Bearer \(setup.server.token)"])
            #expect(put.status == 201, "\(put.bodyText)")
        }
    }

    static func send(_ setup: Setup, _ method: String, _ path: String, body: [UInt8] = [], headers: [String] = []) throws -> RawHTTP.Response {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: x\r\nContent-Length: \(body.count)\r\nConnection: close\r\n"
        for header in headers { head += header + "\r\n" }
        return try #require(try RawHTTP.send(port: UInt16(setup.server.port)!, head + "\r\n", body: body).first)
    }

    /// A report: `body`, signed by `keyID` when given (an assertion over exactly those bytes, or `signed` others).
    static func report(_ setup: Setup, _ body: [UInt8], keyID: String? = nil, signed: [UInt8]? = nil, assertion: Data? = nil) async throws -> (RawHTTP.Response, Data?) {
        var headers = ["Content-Type: application/json"]
        var made = assertion
        if let keyID {
            if made == nil { made = try await setup.device.generateAssertion(keyID, clientDataHash: Data(SHA256Hasher.hash(signed ?? body))) }
            headers += ["X-Depot-Attest-Key: \(keyID)", "X-Depot-Assertion: \(made!.base64EncodedString())"]
        }
        return (try send(setup, "POST", "/v1/apps/\(app)/reports", body: body, headers: headers), made)
    }

    /// A key of the device, attested over a fresh challenge.
    static func attestedKey(_ setup: Setup) async throws -> String {
        let keyID = try await setup.device.generateKey()
        let challenge = try #require(try setup.challenge())
        let attested = try await setup.attest(keyID, challenge: challenge)
        #expect(attested.status == 201, "\(attested.bodyText)")
        return keyID
    }

    static func json(_ response: RawHTTP.Response) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any], "\(response.bodyText)")
    }

    static func fleet(_ setup: Setup) throws -> [String: Any] {
        try json(send(setup, "GET", "/v1/apps/\(app)/fleet?days=1", headers: ["Authorization: Bearer \(setup.server.token)"]))
    }

    /// The reports, and the attested ones, the origin's writer has written to the day's files.
    static func written(_ setup: Setup) -> (reports: Int, attested: Int) {
        let folder = setup.data + "/apps/\(app)/reports"
        var (reports, attested) = (0, 0)
        for name in FileSystem.contents(of: folder) where name.hasSuffix(".log") || name.hasSuffix(".json") {
            let text = String(decoding: (try? FileSystem.readFile(folder + "/" + name)) ?? [], as: UTF8.self)
            for line in text.split(separator: "\n") {
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { continue }
                if name.hasSuffix(".json") {
                    reports += (object["reports"] as? [String: Int])?["production"] ?? 0
                    attested += (object["attestedReports"] as? [String: Int])?["production"] ?? 0
                } else if object["pack"] == nil, let count = object["reports"] as? Int {
                    if object["attested"] as? Bool == true { attested += count } else { reports += count }
                }
            }
        }
        return (reports, attested)
    }

    @Test("An attested report counts as attested; the same assertion replayed is 409 stale_counter, an assertion over other bytes 403 assertion_refused, an unknown key 403 unknown_attested_key, a revoked key 403 attested_key_revoked, one header alone 400 — none of them counted, as attested or not")
    func assertions() async throws {
        let setup = try Setup()
        try Self.publish(setup)
        let keyID = try await Self.attestedKey(setup)
        let body = Array(#"{"channel":"production","release":1,"packs":[{"id":"level","revision":1,"outcome":"installed","bytes":3000}]}"#.utf8)
        let (accepted, assertion) = try await Self.report(setup, body, keyID: keyID)
        #expect(accepted.status == 202, "\(accepted.bodyText)")
        // The same bytes and the same assertion again: its counter does not rise.
        let (replayed, _) = try await Self.report(setup, body, keyID: keyID, assertion: assertion)
        #expect(replayed.status == 409 && AttestEndToEndTests.code(replayed) == "stale_counter", "\(replayed.bodyText)")
        // An assertion the key made over other bytes (a report whose outcome was changed after signing).
        let failed = Array(String(decoding: body, as: UTF8.self).replacingOccurrences(of: #""outcome":"installed""#, with: #""outcome":"failed","error":"integrity""#).utf8)
        let (moved, _) = try await Self.report(setup, failed, keyID: keyID, signed: body)
        #expect(moved.status == 403 && AttestEndToEndTests.code(moved) == "assertion_refused" && moved.bodyText.contains("signature"), "\(moved.bodyText)")
        // A key id the origin never attested, and a key header without an assertion.
        let stranger = Data(SecureRandom.bytes(32)).base64EncodedString()
        let (unknown, _) = try await Self.report(setup, body, keyID: stranger, assertion: assertion)
        #expect(unknown.status == 403 && AttestEndToEndTests.code(unknown) == "unknown_attested_key", "\(unknown.bodyText)")
        let alone = try Self.send(setup, "POST", "/v1/apps/\(Self.app)/reports", body: body, headers: ["Content-Type: application/json", "X-Depot-Attest-Key: \(keyID)"])
        #expect(alone.status == 400 && alone.bodyText.contains("X-Depot-Assertion"), "\(alone.bodyText)")
        // Revoked by the operator beside the running origin: its next report is refused.
        #expect(try setup.depot(["attest", "revoke", "--app", Self.app, keyID]).status == 0)
        let (revoked, _) = try await Self.report(setup, body, keyID: keyID)
        #expect(revoked.status == 403 && AttestEndToEndTests.code(revoked) == "attested_key_revoked", "\(revoked.bodyText)")
        // An unattested report is still taken.
        let (plain, _) = try await Self.report(setup, body)
        #expect(plain.status == 202)
        // Counted: two reports, one of them attested; nothing refused is there.
        try Eventually.wait { (try Self.fleet(setup)["reports"] as? [Int]) == [2] }
        let fleet = try Self.fleet(setup)
        #expect(fleet["reports"] as? [Int] == [2] && fleet["attestedReports"] as? [Int] == [1], "\(fleet)")
        let row = try #require((fleet["revisions"] as? [[String: Any]])?.first)
        #expect(row["installed"] as? Int == 2 && row["failed"] as? Int == 0 && (row["attested"] as? [String: Int]) == ["installed": 1, "patched": 0, "failed": 0, "deferred": 0], "\(row)")
        // The key's counter is the accepted assertion's (1): the refused ones moved nothing.
        // (Written by the report writer's pass, with the counts.)
        var listed = try setup.depot(["attest", "list", "--app", Self.app])
        #expect(try Eventually.wait {
            listed = try setup.depot(["attest", "list", "--app", Self.app])
            return listed.stdout.contains("\tcounter 1\t")
        }, "\(listed.stdout)")
        let printed = try Processes.run(Processes.depotBinary, ["fleet", "--server", setup.server.url, "--app", Self.app, "--token", setup.server.token, "--days", "1"])
        #expect(printed.stdout.contains("2 reports in 1 days") && printed.stdout.contains("1 of them attested") && printed.stdout.contains("level\t1\t2\t0\t0\t0\t6000\t1\t0\t0\t0"), "\(printed.stdout)\(printed.stderr)")
    }

    @Test("A rollout of an app that requires attestation: 200 forged (unattested) failure reports, and forged assertions, leave it running; one genuine device's twenty signed failures count once; attested failures from five test devices halt it at the guard's minimum; status and the fleet show both kinds")
    func guardOfAnAttestedApp() async throws {
        let setup = try Setup(configure: false)
        try Self.publish(setup)
        let cli = ["--server", setup.server.url, "--app", Self.app, "--token", setup.server.token]
        // --attested-only for an app that takes no App Attest keys: refused, nothing started.
        let blind = try Processes.run(Processes.depotBinary, ["rollout", "start", "--release", "2", "--fraction", "1", "--attested-only"] + cli)
        #expect(blind.status != 0 && blind.stderr.contains("HTTP 409") && blind.stderr.contains("takes no App Attest keys"), "\(blind.stdout)\(blind.stderr)")
        #expect(try setup.depot(["attest", "configure", "--app", Self.app, "--app-id", AttestEndToEndTests.appID, "--require"]).status == 0)
        let start = try Processes.run(Processes.depotBinary, ["rollout", "start", "--release", "2", "--fraction", "1", "--halt-on-failure-rate", "0.2", "--min-reports", "5"] + cli)
        #expect(start.status == 0 && start.stdout.contains("guard: halts itself above 20 % failures once 5 attested reports are in (it counts only attested reports)"), "\(start.stdout)\(start.stderr)")
        let status = { try Self.json(Self.send(setup, "GET", "/v1/apps/\(Self.app)/rollouts/production", headers: ["Authorization: Bearer \(setup.server.token)"])) }
        let manifest = try #require(try status()["manifest"] as? Int)
        let revision = try #require(((try status()["candidates"] as? [[String: Any]])?.first)?["revision"] as? Int)
        let failure = Array(#"{"channel":"production","release":\#(manifest),"packs":[{"id":"level","revision":\#(revision),"outcome":"failed","error":"integrity","bytes":0}]}"#.utf8)

        // Forged: 200 unattested failures (anyone who can read the manifest can send them), and
        // failures carrying made-up key ids or another report's assertion.
        for _ in 0..<200 { #expect(try await Self.report(setup, failure).0.status == 202) }
        let keys = try await (0..<5).asyncMap { _ in try await Self.attestedKey(setup) }
        let elsewhere = try await setup.device.generateAssertion(keys[0], clientDataHash: Data(SHA256Hasher.hash(Array("other bytes".utf8))))
        for _ in 0..<20 {
            #expect(try await Self.report(setup, failure, keyID: Data(SecureRandom.bytes(32)).base64EncodedString(), assertion: elsewhere).0.status == 403)
            #expect(try await Self.report(setup, failure, keyID: keys[0], assertion: elsewhere).0.status == 403)
        }
        // Written by the writer (which lets the guard look right after each write).
        #expect(Eventually.wait { Self.written(setup) == (200, 0) })
        var now = try status()
        #expect(now["failures"] as? Int == 200 && now["attestedReports"] as? Int == 0 && now["attestedOnly"] as? Bool == true, "\(now)")

        // One genuine device signing failure after failure (each assertion new, its counter
        // rising): it counts once among the attested reports, its other reports unattested.
        for _ in 0..<20 {
            let (answer, _) = try await Self.report(setup, failure, keyID: keys[0])
            #expect(answer.status == 202, "\(answer.bodyText)")
        }
        #expect(Eventually.wait { Self.written(setup) == (220, 1) })
        now = try status()
        #expect(now["state"] as? String == "running" && now["attestedReports"] as? Int == 1, "one device made the guard's minimum alone: \(now)")

        // Other genuine devices whose candidate install failed: the fifth device's failure halts it.
        for (index, key) in keys.dropFirst().enumerated() {
            let (answer, _) = try await Self.report(setup, failure, keyID: key)
            #expect(answer.status == 202, "\(answer.bodyText)")
            // Once it is written, the guard has looked at every earlier write (the forged failures too).
            #expect(Eventually.wait { Self.written(setup) == (221 + index, 2 + index) })
            if index < 3 {
                now = try status()
                #expect(now["state"] as? String == "running", "after \(index + 2) attested failures: \(now)")
            } else {
                #expect(try Eventually.wait { try status()["state"] as? String == "halted" }, "the fifth attested failure did not halt it")
                now = try status()
            }
        }
        let trigger = try #require(now["trigger"] as? [String: Any])
        #expect(now["haltedBy"] as? String == "automatic" && trigger["reports"] as? Int == 5 && trigger["failures"] as? Int == 5, "\(now)")
        let printed = try Processes.run(Processes.depotBinary, ["rollout", "status"] + cli)
        #expect(printed.stdout.contains("reports about the candidate: 224, failures 224 (100 %)") && printed.stdout.contains("attested reports about the candidate: 5, failures 5 (100 %)"), "\(printed.stdout)")
        let fleet = try Self.fleet(setup)
        #expect(fleet["reports"] as? [Int] == [224] && fleet["attestedReports"] as? [Int] == [5], "\(fleet)")
        let row = try #require((fleet["revisions"] as? [[String: Any]])?.first { $0["revision"] as? Int == revision })
        #expect(row["failed"] as? Int == 224 && (row["attested"] as? [String: Int])?["failed"] == 5, "\(row)")
    }
}

extension Sequence {
    /// The elements mapped one after another by an async body.
    func asyncMap<T>(_ body: (Element) async throws -> T) async rethrows -> [T] {
        var out: [T] = []
        for element in self { out.append(try await body(element)) }
        return out
    }
}
