import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// App Attest's attestation check on Apple's published sample (DepotTestSupport's
/// ``AppleAttestationSample``: the "Attestation Object Validation Guide"'s example), accepted
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

    @Test("Apple's sample is accepted at 2026-04-21T18:13:12Z, with its key id and the leaf's public key")
    func accepted() throws {
        let key = try verifier.attestation(sample.object, keyID: sample.keyID, clientDataHash: Array(sample.challenge.utf8), at: sample.validAt)
        #expect(Data(key.keyID).base64EncodedString() == "zgSY9YSD+7TaDXssY6WlOPVS1K3Lmk+pFhlcSWE+ZV0=")
        #expect(Data(key.publicKey).base64EncodedString() == sample.publicKeyBase64)
        #expect(key.environment == .production)
        #expect(!key.receipt.isEmpty)
    }
}
