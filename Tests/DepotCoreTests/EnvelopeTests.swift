// Also compiled into CryptoKitBackendTests, against the CryptoKit backend.
#if DEPOT_CRYPTOKIT
import DepotCoreCryptoKit
#else
import DepotCore
#endif
import Foundation
import Testing

@Suite("Manifest and DSSE envelope")
struct EnvelopeTests {
    let key = try! Ed25519PrivateKey(rawRepresentation: [UInt8](repeating: 1, count: 32))
    let manifest = Manifest(
        app: "com.example.game", version: 3,
        publishedAt: Date(timeIntervalSince1970: 1_800_000_000), expiresAt: Date(timeIntervalSince1970: 1_900_000_000),
        packs: [PackEntry(id: "level-1", revision: 2, url: "https://cdn.example.com/v1/apps/com.example.game/blobs/" + String(repeating: "a", count: 64),
                          size: 1234, sha256: String(repeating: "a", count: 64), installSize: 1000, plaintextSHA256: String(repeating: "b", count: 64),
                          policy: .essential, tags: ["intro"], keyID: "k1", contentType: "application/octet-stream")]
    )

    @Test("Sign and verify round trip")
    func roundTrip() throws {
        let envelope = try Envelope.sign(manifest, with: [key])
        let decoded = try Envelope.decode(envelope.encoded())
        #expect(try decoded.verifiedManifest(trusting: [key.publicKey]) == manifest)
        #expect(decoded.signatures.first?.keyid == ManifestSigningKey.keyID(for: key.publicKey))
    }

    @Test("Manifest JSON uses the documented camelCase fields and ISO 8601 dates")
    func manifestJSON() throws {
        let json = String(decoding: manifest.encoded(), as: UTF8.self)
        for field in ["\"schemaVersion\":1", "\"app\":\"com.example.game\"", "\"version\":3", "\"publishedAt\":\"2027-01-15T08:00:00Z\"",
                      "\"installSize\":1000", "\"plaintextSHA256\"", "\"policy\":\"essential\"", "\"keyID\":\"k1\"", "\"contentType\""] {
            #expect(json.contains(field), "missing \(field) in \(json)")
        }
    }

    @Test("A tampered payload, a wrong key and a wrong type are refused")
    func refusals() throws {
        var envelope = try Envelope.sign(manifest, with: [key])
        let other = try Ed25519PrivateKey(rawRepresentation: [UInt8](repeating: 2, count: 32))
        #expect(throws: EnvelopeError.untrustedKey([ManifestSigningKey.keyID(for: key.publicKey)])) {
            try envelope.verifiedManifest(trusting: [other.publicKey])
        }
        var changed = manifest
        changed.version = 4
        envelope.payload = Data(changed.encoded()).base64EncodedString()
        #expect(throws: EnvelopeError.badSignature) { try envelope.verifiedManifest(trusting: [key.publicKey]) }
        envelope = try Envelope.sign(manifest, with: [key])
        envelope.payloadType = "text/plain"
        #expect(throws: EnvelopeError.wrongPayloadType("text/plain")) { try envelope.verifiedManifest(trusting: [key.publicKey]) }
        #expect(throws: EnvelopeError.malformed) { try Envelope.decode(Array("{\"payload\": 1}".utf8)) }
    }

    @Test("Two signatures during a key rotation: either trusted key verifies")
    func rotation() throws {
        let next = try Ed25519PrivateKey(rawRepresentation: [UInt8](repeating: 3, count: 32))
        let envelope = try Envelope.sign(manifest, with: [key, next])
        #expect(try envelope.verifiedManifest(trusting: [next.publicKey]).version == 3)
        #expect(try envelope.verifiedManifest(trusting: [key.publicKey]).version == 3)
    }

    @Test("Key ring loads from JSON and from the environment, and rejects bad keys")
    func keyRing() throws {
        let ring = try KeyRing(["k1": [UInt8](repeating: 5, count: 32)])
        #expect(try KeyRing(json: ring.json) == ring)
        setenv("DEPOT_TEST_RING", String(decoding: ring.json, as: UTF8.self), 1)
        #expect(try KeyRing(environment: "DEPOT_TEST_RING") == ring)
        #expect(throws: KeyError.self) { try KeyRing(json: Array("{\"k1\":\"AAAA\"}".utf8)) }
        #expect(throws: KeyError.self) { try KeyRing(json: Array("[]".utf8)) }
        #expect(throws: KeyError.self) { try KeyRing(["bad id/": [UInt8](repeating: 5, count: 32)]) }
        #expect(throws: KeyError.missing("DEPOT_TEST_UNSET")) { try KeyRing(environment: "DEPOT_TEST_UNSET") }
    }

    @Test("App and pack id rules", arguments: [
        ("com.example.game", true), ("level-1", true), ("a", true), ("..", false), ("a..b", false), ("a/b", false),
        ("level_1", false), (".hidden", false), ("", false), (String(repeating: "a", count: 65), false), ("a%2e", false),
    ])
    func identifiers(id: String, valid: Bool) {
        #expect(Identifier.isValidPack(id) == valid)
    }
}
