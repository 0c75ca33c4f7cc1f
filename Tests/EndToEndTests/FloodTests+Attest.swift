import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// App Attest under flood (issue 53): challenges taken up, attestations over unknown challenges,
/// garbage bodies, reports signed by made-up key ids (a new one each request: each costs the
/// origin a `stat`) and reports whose assertion does not verify (each costs it one ECDSA
/// verification, bounded by the report buckets). While each runs, a genuine device still
/// attests a new key and sends attested reports (``AttestVictim``), and wrk measures another
/// app's blob as for every other route.
extension FloodTests {
    static let attestAppID = "ABCDE12345.com.example.dev"

    /// A device of the attacked app, with keys made in advance (one attested per flood).
    final class AttestVictim {
        let device: TestAppAttest
        let port: UInt16
        let app: String
        let report: [UInt8]
        var fresh: [String]
        var attested: String?

        init(device: TestAppAttest, port: UInt16, app: String, report: [UInt8], keys: [String]) {
            (self.device, self.port, self.app, self.report, fresh) = (device, port, app, report, keys)
        }

        func post(_ path: String, body: [UInt8], headers: [String] = []) throws -> RawHTTP.Response {
            var head = "POST /v1/apps/\(app)/\(path) HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\nConnection: close\r\n"
            for header in headers { head += header + "\r\n" }
            return try #require(try RawHTTP.send(port: port, head + "\r\n", body: body).first)
        }

        /// Attests one of its keys over a challenge (201 each), as a device's first report does.
        @discardableResult
        func attestKey(_ flood: String) throws -> String {
            let keyID = fresh.isEmpty ? try #require(attested) : fresh.removeLast()
            let challenge = try post("attest/challenges", body: [])
            let text = (try? JSONSerialization.jsonObject(with: Data(challenge.body)) as? [String: Any])?["challenge"] as? String
            #expect(challenge.status == 201, "\(flood): the device's challenge: \(challenge.status) \(challenge.bodyText)")
            let bytes = Array(Data(base64Encoded: text ?? "") ?? Data())
            let object = try device.attestKey(keyID, clientDataHash: Data(SHA256Hasher.hash(bytes)), tampering: .init())
            let body = #"{"keyId":"\#(keyID)","challenge":"\#(text ?? "")","attestation":"\#(object.base64EncodedString())"}"#
            let answer = try post("attest/keys", body: Array(body.utf8))
            #expect(answer.status == 201 || fresh.isEmpty && answer.status == 409, "\(flood): the device's attestation: \(answer.status) \(answer.bodyText)")
            if answer.status == 201 { attested = keyID }
            return keyID
        }

        /// Attests a new key and sends three reports signed with it: each 202.
        func check(_ flood: String) throws {
            let keyID = try attestKey(flood)
            for _ in 0..<3 {
                let assertion = try device.generateAssertion(keyID, clientDataHash: Data(SHA256Hasher.hash(report)), tampering: .init())
                let answer = try post("reports", body: report, headers: ["X-Depot-Attest-Key: \(keyID)", "X-Depot-Assertion: \(assertion.base64EncodedString())"])
                #expect(answer.status == 202, "\(flood): the device's attested report: \(answer.status) \(answer.bodyText)")
            }
        }
    }

    /// The floods of App Attest's routes and of attested reports, each with the victim device's check.
    static func attestFloods(work: String, port: UInt16, app: String, release: Int, victim: AttestVictim) throws -> [Flood] {
        let report = DeviceReport(channel: "production", release: release, packs: [.init(id: "p1", revision: release, outcome: .failed, error: "integrity", bytes: 0)]).encoded()
        let reportFile = work + "/attest-report.json"
        try FileSystem.writeAtomically(report, to: reportFile)
        // An assertion the device's attested key really made, over other bytes: it reaches the signature check.
        let signer = try victim.attestKey("setup")
        let elsewhere = try victim.device.generateAssertion(signer, clientDataHash: Data(SHA256Hasher.hash(Array("other bytes".utf8))), tampering: .init())
        // Attestations over challenges never issued: a garbage object and a real one.
        var keyBodies: [String] = []
        for (index, object) in [Data(SecureRandom.bytes(5_000)), try victim.device.attestKey(signer, clientDataHash: Data(SecureRandom.bytes(32)), tampering: .init())].enumerated() {
            let file = work + "/attest-keys-\(index).json"
            let body = #"{"keyId":"\#(Data(SecureRandom.bytes(32)).base64EncodedString())","challenge":"\#(Data(SecureRandom.bytes(32)).base64EncodedString())","attestation":"\#(object.base64EncodedString())"}"#
            try FileSystem.writeAtomically(Array(body.utf8), to: file)
            keyBodies.append(file)
        }
        let garbage = work + "/attest-garbage.bin"
        try FileSystem.writeAtomically(SecureRandom.bytes(8_000), to: garbage)
        // Reports naming made-up key ids, a new one each request (cycling through 4,096).
        let unknownKeys = (0..<4_096).map { _ in
            "/v1/apps/\(app)/reports|\(reportFile)|X-Depot-Attest-Key: \(Data(SecureRandom.bytes(32)).base64EncodedString())|X-Depot-Assertion: \(elsewhere.base64EncodedString())"
        }
        let check = { (name: String) in { try victim.check(name) } }
        return [
            Flood(name: "attest: challenges", method: "POST", path: "/v1/apps/\(app)/attest/challenges", expected: [201, 429], alongside: check("attest: challenges")),
            Flood(name: "attest: keys over unknown challenges", method: "POST", path: "/v1/apps/\(app)/attest/keys", headers: ["Content-Type: application/json"],
                  bodies: keyBodies, expected: [400, 429], alongside: check("attest: keys over unknown challenges")),
            Flood(name: "attest: keys, garbage bodies", method: "POST", path: "/v1/apps/\(app)/attest/keys", headers: ["Content-Type: application/json"],
                  bodies: [garbage], expected: [400, 429], alongside: check("attest: keys, garbage bodies")),
            Flood(name: "attested reports: unknown key ids (cycling)", method: "POST", path: "", headers: ["Content-Type: application/json"], bodies: unknownKeys,
                  expected: [403, 429], alongside: check("attested reports: unknown key ids")),
            Flood(name: "attested reports: bad signatures", method: "POST", path: "/v1/apps/\(app)/reports",
                  headers: ["Content-Type: application/json", "X-Depot-Attest-Key: \(signer)", "X-Depot-Assertion: \(elsewhere.base64EncodedString())"],
                  bodies: [reportFile], expected: [403, 429], alongside: check("attested reports: bad signatures")),
        ]
    }
}
