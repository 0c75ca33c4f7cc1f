import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// The attestation routes in process, where the origin's configuration can be set: a challenge
/// that has expired (a lifetime of zero: no waiting) and what the log keeps of a refusal.
@Suite("App Attest routes: an expired challenge, and a log without the attestation's bytes")
struct AttestRouteTests {
    static let appID = "ABCDE12345.com.example.game"

    static func post(_ port: UInt16, _ path: String, body: [UInt8] = []) throws -> RawHTTP.Response {
        let head = "POST /v1/apps/com.example.game/attest/\(path) HTTP/1.1\r\nHost: x\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        return try #require(try RawHTTP.send(port: port, head, body: body).first)
    }

    static func challenge(_ port: UInt16) throws -> [UInt8] {
        let answer = try post(port, "challenges")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any], "\(answer.status) \(answer.bodyText)")
        let text = try #require(object["challenge"] as? String)
        return Array(try #require(Data(base64Encoded: text)))
    }

    static func body(_ keyID: String, _ challenge: [UInt8], _ object: Data) -> [UInt8] {
        Array(#"{"keyId":"\#(keyID)","challenge":"\#(Data(challenge).base64EncodedString())","attestation":"\#(object.base64EncodedString())"}"#.utf8)
    }

    @Test("A challenge past its lifetime is refused (400 unknown_challenge) and stores nothing; the same attestation over a live one is accepted")
    func expired() async throws {
        let device = try TestAppAttest(appID: Self.appID)
        try await withServer(configure: { $0.appAttestAnchor = device.root; $0.attestChallengeLifetime = .zero }) { origin in
            try AppStore(folder: DataFolder(origin.data.path)).setAttestation(origin.app, AttestationSettings(appID: Self.appID))
            let keyID = try await device.generateKey()
            let challenge = try Self.challenge(origin.port)
            let object = try await device.attestKey(keyID, clientDataHash: Data(SHA256Hasher.hash(challenge)))
            let answer = try Self.post(origin.port, "keys", body: Self.body(keyID, challenge, object))
            #expect(answer.status == 400 && answer.bodyText.contains("unknown_challenge") && answer.bodyText.contains("expired"), "\(answer.bodyText)")
            #expect(FileSystem.contents(of: origin.data.path + "/apps/\(origin.app)/attest").filter { $0.hasSuffix(".json") }.isEmpty)
        }
        try await withServer(configure: { $0.appAttestAnchor = device.root }) { origin in
            try AppStore(folder: DataFolder(origin.data.path)).setAttestation(origin.app, AttestationSettings(appID: Self.appID))
            let keyID = try await device.generateKey()
            let challenge = try Self.challenge(origin.port)
            let object = try await device.attestKey(keyID, clientDataHash: Data(SHA256Hasher.hash(challenge)))
            #expect(try Self.post(origin.port, "keys", body: Self.body(keyID, challenge, object)).status == 201)
        }
    }

    @Test("A refused attestation is logged with its app, reason and key id, never with the attestation's bytes")
    func logged() async throws {
        let device = try TestAppAttest(appID: Self.appID)
        let log = CapturedLog()
        try await withServer(configure: { $0.appAttestAnchor = device.root; $0.logger = log.logger() }) { origin in
            try AppStore(folder: DataFolder(origin.data.path)).setAttestation(origin.app, AttestationSettings(appID: Self.appID))
            let keyID = try await device.generateKey()
            let challenge = try Self.challenge(origin.port)
            let object = try device.attestKey(keyID, clientDataHash: Data(SHA256Hasher.hash(challenge)), tampering: .init(counter: 3))
            let answer = try Self.post(origin.port, "keys", body: Self.body(keyID, challenge, object))
            #expect(answer.status == 422 && answer.bodyText.contains("counter"), "\(answer.bodyText)")
            let lines = log.all.filter { $0.contains("app attest key refused") }
            #expect(lines.count == 1 && lines[0].contains("counter") && lines[0].contains(keyID), "\(log.all)")
            let text = log.all.joined(separator: "\n")
            #expect(!text.contains(object.base64EncodedString().prefix(40)) && !text.contains(Data(challenge).base64EncodedString()), "the log holds the attestation or the challenge")
        }
    }
}
