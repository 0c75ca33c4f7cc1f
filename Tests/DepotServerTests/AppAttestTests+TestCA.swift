import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// App Attest with a test-made chain (DepotTestSupport's ``TestAppAttest``): the checks Apple's
/// sample cannot reach (a non-zero counter, the other environment's aaguid, a credential id that
/// is not the key id, another CA) and assertions with their counters.
@Suite("App Attest: a test CA's attestations and assertions")
struct AppAttestTestCATests {
    static let appID = "ABCDE12345.com.example.depot"
    let hash = Data(SHA256Hasher.hash(Array("challenge".utf8)))

    func verify(_ device: TestAppAttest, _ keyId: String, tampering: TestAppAttest.Tampering = .init(),
                verifier: AppAttestVerifier? = nil) throws -> Result<AttestedKey, AppAttestRefusal> {
        let object = try device.attestKey(keyId, clientDataHash: hash, tampering: tampering)
        let verifier = verifier ?? AppAttestVerifier(appID: Self.appID, environment: device.environment, anchor: device.root)
        return Result { () throws(AppAttestRefusal) in
            try verifier.attestation(Array(object), keyID: Array(Data(base64Encoded: keyId)!), clientDataHash: Array(hash), at: Date())
        }
    }

    @Test("A test device's attestation is accepted with the test anchor, in both environments")
    func accepted() async throws {
        for environment in AppAttestEnvironment.allCases {
            let device = try TestAppAttest(appID: Self.appID, environment: environment)
            let keyId = try await device.generateKey()
            let object = try await device.attestKey(keyId, clientDataHash: hash)
            let key = try AppAttestVerifier(appID: Self.appID, environment: environment, anchor: device.root)
                .attestation(Array(object), keyID: Array(Data(base64Encoded: keyId)!), clientDataHash: Array(hash), at: Date())
            #expect(key.publicKey == (try device.publicKey(keyId)))
            #expect(key.environment == environment)
        }
    }

    @Test("Counter not 0: counter; development aaguid for a production app: environment; credential id not the key id: credential_id")
    func fields() async throws {
        let device = try TestAppAttest(appID: Self.appID)
        let keyId = try await device.generateKey()
        let counter = try verify(device, keyId, tampering: .init(counter: 1))
        #expect(counter.refusal?.description == "counter: authData's counter is 1, expected 0 for a new key")
        let environment = try verify(device, keyId, tampering: .init(aaguid: AppAttestEnvironment.development.aaguid))
        #expect(environment.refusal?.check == .environment)
        #expect(environment.refusal?.detail.hasPrefix("the aaguid is development's, expected production's") == true)
        #expect(try verify(device, keyId, tampering: .init(aaguid: [UInt8](repeating: 7, count: 16))).refusal?.check == .environment)
        let credential = try verify(device, keyId, tampering: .init(credentialID: [UInt8](repeating: 1, count: 32)))
        #expect(credential.refusal?.check == .credentialID)
        #expect(try verify(device, keyId, tampering: .init(appID: "ABCDE12345.com.example.other")).refusal?.check == .appID)
        #expect(try verify(device, keyId, tampering: .init(nonce: [UInt8](repeating: 0, count: 32))).refusal?.check == .nonce)
        #expect(try verify(device, keyId, tampering: .init(nonce: [UInt8](repeating: 0, count: 31))).refusal?.check == .nonce)
        #expect(try verify(device, keyId).refusal == nil)
    }

    @Test("A chain from a CA that is not the anchor (another test CA, or Apple's root): chain")
    func otherCA() async throws {
        let device = try TestAppAttest(appID: Self.appID), other = try TestAppAttest(appID: Self.appID)
        let keyId = try await device.generateKey()
        let refusal = try verify(device, keyId, verifier: AppAttestVerifier(appID: Self.appID, environment: .production, anchor: other.root)).refusal
        #expect(refusal?.check == .chain)
        #expect(refusal?.detail.contains("unable to get local issuer certificate") == true)
        #expect(try verify(device, keyId, verifier: AppAttestVerifier(appID: Self.appID, environment: .production)).refusal?.check == .chain)
    }

    @Test("Assertions: accepted with their counter; a counter not rising, other client data, another key, another App ID or garbage refused")
    func assertions() async throws {
        let device = try TestAppAttest(appID: Self.appID)
        let keyId = try await device.generateKey(), otherKeyId = try await device.generateKey()
        let verifier = AppAttestVerifier(appID: Self.appID, environment: .production, anchor: device.root)
        let key = try verify(device, keyId).get()
        let body = Array(#"{"report":"ok"}"#.utf8)
        func check(_ assertion: Data, _ data: [UInt8] = body, after counter: UInt32) -> Result<UInt32, AppAttestRefusal> {
            Result { () throws(AppAttestRefusal) in try verifier.assertion(Array(assertion), clientData: data, key: key, after: counter) }
        }
        let first = try await device.generateAssertion(keyId, clientDataHash: Data(SHA256Hasher.hash(body)))
        #expect(try check(first, after: 0).get() == 1)
        let second = try await device.generateAssertion(keyId, clientDataHash: Data(SHA256Hasher.hash(body)))
        #expect(try check(second, after: 1).get() == 2)
        #expect(check(first, after: 2).refusal?.description
            == "counter: the assertion's counter is 1, expected more than the last one seen, 2 (a replayed or stale assertion)")
        #expect(check(second, after: 2).refusal?.check == .counter)
        #expect(check(second, Array(#"{"report":"failed"}"#.utf8), after: 1).refusal?.check == .signature)
        let byOther = try await device.generateAssertion(otherKeyId, clientDataHash: Data(SHA256Hasher.hash(body)))
        #expect(check(byOther, after: 0).refusal?.check == .signature)
        let otherApp = try device.generateAssertion(keyId, clientDataHash: Data(SHA256Hasher.hash(body)), tampering: .init(appID: "ABCDE12345.com.example.other"))
        #expect(check(otherApp, after: 2).refusal?.check == .appID)
        #expect(check(second.prefix(second.count - 1), after: 1).refusal?.check == .format)
        #expect(check(Data("garbage".utf8), after: 1).refusal?.check == .format)
        #expect(check(Data(), after: 1).refusal?.check == .format)
        #expect(check(Data(count: AppAttestVerifier.maximumAssertionBytes + 1), after: 1).refusal?.detail
            == "the assertion is 1025 bytes, at most 1024 expected")
        let short = CBORValue.map([CBORMapEntry(key: .text("signature"), value: .bytes([1])),
                                   CBORMapEntry(key: .text("authenticatorData"), value: .bytes([UInt8](repeating: 0, count: 36)))])
        #expect(check(Data(short.encoded), after: 1).refusal?.check == .format)
        var flipped = Array(second)
        flipped[flipped.count - 1] ^= 1 // the counter's last byte, inside the signed authenticatorData
        #expect(check(Data(flipped), after: 1).refusal?.check == .signature)
    }
}

extension Result where Failure == AppAttestRefusal {
    var refusal: AppAttestRefusal? {
        if case .failure(let refusal) = self { return refusal }
        return nil
    }
}
