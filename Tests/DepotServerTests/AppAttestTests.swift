import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// App Attest's attestation check on Apple's published sample (DepotTestSupport's
/// ``AppleAttestationSample``: the example of Apple's "Attestation Object Validation Guide",
/// developer.apple.com/documentation/devicecheck/attestation-object-validation-guide), accepted
/// inside its certificates' validity, and refused with the named check for each field flipped.
@Suite("App Attest: Apple's sample attestation")
struct AppAttestTests {
    let sample = AppleAttestationSample.self
    let verifier = AppAttestVerifier(appID: AppleAttestationSample.appID, environment: .production)

    func refusal(_ object: [UInt8] = AppleAttestationSample.object, keyID: [UInt8] = AppleAttestationSample.keyID,
                 clientData: String = AppleAttestationSample.challenge, at: Date = AppleAttestationSample.validAt,
                 verifier: AppAttestVerifier? = nil) -> AppAttestRefusal? {
        do {
            _ = try (verifier ?? self.verifier).attestation(object, keyID: keyID, clientDataHash: Array(clientData.utf8), at: at)
            return nil
        } catch {
            return error
        }
    }

    /// Apple's sample with `change` applied to its decoded map, encoded again.
    func edited(_ change: (inout [CBORMapEntry]) -> Void) throws -> [UInt8] {
        guard case .map(var entries) = try CBORDecoder.decode(sample.object) else { throw CBORError(offset: 0, reason: "not a map") }
        change(&entries)
        return CBORValue.map(entries).encoded
    }

    /// Apple's sample with x5c replaced.
    func withX5C(_ certificates: ([[UInt8]]) -> [[UInt8]]) throws -> [UInt8] {
        try edited { entries in
            let index = entries.firstIndex { $0.key == .text("attStmt") }!
            guard case .map(var statement) = entries[index].value, case .array(let x5c) = statement[0].value else { return }
            statement[0].value = .array(certificates(x5c.compactMap(\.byteString)).map(CBORValue.bytes))
            entries[index].value = .map(statement)
        }
    }

    func withAuthData(_ change: (inout [UInt8]) -> Void) throws -> [UInt8] {
        try edited { entries in
            let index = entries.firstIndex { $0.key == .text("authData") }!
            var data = entries[index].value.byteString!
            change(&data)
            entries[index].value = .bytes(data)
        }
    }

    @Test("Apple's sample is accepted at 2026-04-21T18:13:12Z, with its key id and the leaf's public key")
    func accepted() throws {
        let key = try verifier.attestation(sample.object, keyID: sample.keyID, clientDataHash: Array(sample.challenge.utf8), at: sample.validAt)
        #expect(Data(key.keyID).base64EncodedString() == "zgSY9YSD+7TaDXssY6WlOPVS1K3Lmk+pFhlcSWE+ZV0=")
        #expect(Data(key.publicKey).base64EncodedString() == sample.publicKeyBase64)
        #expect(key.environment == .production)
        #expect(!key.receipt.isEmpty)
        // The edits below start from a faithful re-encoding.
        #expect(try edited { _ in } == sample.object)
    }

    @Test("The pinned root is Apple's: the embedded DER hashes to 1cb9823b…c932")
    func pinnedRoot() {
        #expect(AppAttestVerifier.appleRootSHA256 == "1cb9823ba28ba6ad2d33a006941de2ae4f513ef1d4e831b9f7e0fa7b6242c932")
        #expect(Hex.encode(SHA256Hasher.hash(AppAttestVerifier.appleRoot)) == AppAttestVerifier.appleRootSHA256)
        #expect(AppAttestVerifier(appID: "A", environment: .production).anchor == AppAttestVerifier.appleRoot)
    }

    @Test("DepotCore's X.509 helpers: the leaf's nonce, key and end of validity; a P-384 key, trailing bytes and garbage refused; the root's own chain")
    func x509() throws {
        guard case .array(let x5c)? = try CBORDecoder.decode(sample.object)["attStmt"]?["x5c"] else { throw CBORError(offset: 0, reason: "no x5c") }
        let certificates = x5c.compactMap(\.byteString)
        let leaf = try X509Certificate(der: certificates[0])
        #expect(try leaf.extensionValue(oid: "1.2.840.113635.100.8.2").map(Hex.encode)
            == "3024a122042087b7d06d93a4294e46f011e66b6cc400f0bab20729976c619580b42ae60bff6e")
        #expect(try leaf.extensionValue(oid: "1.2.3.4.5") == nil)
        #expect(try Data(leaf.p256PublicKey()).base64EncodedString() == sample.publicKeyBase64)
        #expect(try leaf.notAfter() == Date(timeIntervalSince1970: 1_776_967_992)) // 2026-04-23T18:13:12Z
        #expect(throws: CryptoError.self) { try X509Certificate(der: AppAttestVerifier.appleRoot).p256PublicKey() }
        #expect(throws: CryptoError.self) { try X509Certificate(der: certificates[0] + [0]) }
        #expect(throws: CryptoError.self) { try X509Certificate(der: Array("garbage".utf8)) }
        #expect(throws: CryptoError.self) { try X509Certificate(der: []) }
        try X509Chain.verify(certificates, anchor: AppAttestVerifier.appleRoot, at: sample.validAt)
        try X509Chain.verify([AppAttestVerifier.appleRoot], anchor: AppAttestVerifier.appleRoot, at: Date())
        #expect(throws: CryptoError.self) { try X509Chain.verify([], anchor: AppAttestVerifier.appleRoot, at: Date()) }
        #expect(!P256Signature.isValid([0x30, 0x00], for: [1, 2, 3], publicKey: sample.keyID))
        #expect(!P256Signature.isValid([0x30, 0x00], for: [1, 2, 3], publicKey: [0x04] + [UInt8](repeating: 1, count: 64)))
    }

    @Test("Today (after 2026-04-23T18:13:12Z) the sample has expired: chain")
    func expired() {
        let refusal = refusal(at: Date())
        #expect(refusal?.check == .chain)
        #expect(refusal?.detail.contains("certificate has expired") == true)
        #expect(self.refusal(at: Date(timeIntervalSince1970: 1_776_708_000))?.check == .chain) // 2026-04-20T18:00Z: not yet valid
    }

    @Test("x5c without its intermediate, with the root in its place, or with another CA's leaf: chain")
    func chain() async throws {
        #expect(refusal(try withX5C { [$0[0]] })?.check == .chain)
        #expect(refusal(try withX5C { [$0[0], AppAttestVerifier.appleRoot] })?.check == .chain)
        // Apple's intermediate in the leaf's place does chain to the root, but certifies no nonce.
        #expect(refusal(try withX5C { [$0[1], $0[0]] })?.check == .nonce)
        let device = try TestAppAttest(appID: sample.appID)
        let keyId = try await device.generateKey()
        let object = try device.attestKey(keyId, clientDataHash: Data(sample.challenge.utf8), tampering: .init())
        guard case .array(let x5c)? = try CBORDecoder.decode(Array(object))["attStmt"]?["x5c"], let testLeaf = x5c[0].byteString else {
            Issue.record("no leaf")
            return
        }
        let refusal = refusal(try withX5C { [testLeaf, $0[1]] })
        #expect(refusal?.check == .chain)
        #expect(refusal?.description.hasPrefix("chain: x5c does not chain to the Apple App Attestation Root CA at 2026-04-21T18:13:12Z") == true)
    }

    @Test("Other client data, or one byte of authData flipped: nonce")
    func nonce() throws {
        let other = refusal(clientData: "another_server_challenge")
        #expect(other?.check == .nonce)
        #expect(other?.detail.contains("87b7d06d93a4294e46f011e66b6cc400f0bab20729976c619580b42ae60bff6e") == true)
        for index in [0, 32, 36, 60, 120, 225] {
            #expect(refusal(try withAuthData { $0[index] ^= 0x01 })?.check == .nonce, "byte \(index)")
        }
    }

    @Test("Another key id: key_id; another App ID: app_id; the development environment: environment")
    func fields() {
        var keyID = sample.keyID
        keyID[31] ^= 1
        let key = refusal(keyID: keyID)
        #expect(key?.check == .keyID)
        #expect(key?.detail.contains("expected SHA-256 of the certificate's public key, zgSY9YSD+7TaDXssY6WlOPVS1K3Lmk+pFhlcSWE+ZV0=") == true)
        #expect(refusal(keyID: Array(keyID.prefix(16)))?.check == .keyID)
        let app = refusal(verifier: AppAttestVerifier(appID: "1234567890.com.example.otherapp", environment: .production))
        #expect(app?.check == .appID)
        #expect(app?.detail.contains("1234567890.com.example.otherapp") == true)
        let environment = refusal(verifier: AppAttestVerifier(appID: sample.appID, environment: .development))
        #expect(environment?.description == "environment: the aaguid is production's, expected development's \"appattestdevelop\"")
    }

    @Test("Malformed, truncated, oversized or misshapen objects: format")
    func format() throws {
        let object = sample.object
        #expect(refusal(Array(object.prefix(object.count - 1)))?.check == .format)
        #expect(refusal(Array(object.prefix(100)))?.check == .format)
        #expect(refusal([])?.check == .format)
        #expect(refusal(Array("not cbor at all".utf8))?.check == .format)
        let big = refusal(object + [UInt8](repeating: 0, count: AppAttestVerifier.maximumAttestationBytes))
        #expect(big?.description == "format: the attestation object is \(object.count + 16_384) bytes, at most 16384 expected")
        #expect(refusal(object + [0x00])?.check == .format)
        #expect(refusal(try edited { $0[0].value = .text("packed") })?.detail == "fmt is not \"apple-appattest\"")
        #expect(refusal(try edited { $0.removeAll { $0.key == .text("authData") } })?.check == .format)
        #expect(refusal(try withX5C { _ in [] })?.check == .format)
        #expect(refusal(try withX5C { [$0[0] + [0], $0[1]] })?.check == .format)
        #expect(refusal(try withAuthData { $0.removeLast(130) })?.check == .format)
        #expect(refusal(try withAuthData { $0[32] = 0x00 })?.check == .format) // no AT flag
        #expect(refusal(try withAuthData { $0[53] = 0xff })?.check == .format) // credential id longer than authData
    }
}
