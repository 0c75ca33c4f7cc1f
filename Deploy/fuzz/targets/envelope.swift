// Fuzz target: the envelope parser and verifier and the manifest decoder (DepotCore), compiled
// with DepotCore. First byte even: the rest is an envelope, verified against a fixed key (it
// must be refused: nothing here holds that key's signature). Odd: the rest is a manifest payload
// signed here with that key, so the verifier's whole path and Manifest.decode run on it.
import Foundation

let fuzzSigningKey = try! Ed25519PrivateKey(rawRepresentation: [UInt8](repeating: 9, count: 32))

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzEnvelope(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: count))
    guard let mode = bytes.first else { return 0 }
    let rest = Array(bytes.dropFirst())
    if mode & 1 == 0 {
        guard let envelope = try? Envelope.decode(rest) else { return 0 }
        if (try? envelope.verifiedManifest(trusting: [fuzzSigningKey.publicKey])) != nil {
            // Only a signature by fuzzSigningKey verifies, and the fuzzer cannot make one unless it
            // copied one from an odd-mode input: then the payload must be that manifest's.
            _ = try? Manifest.decode(Array(Data(base64Encoded: envelope.payload) ?? Data()))
        }
    } else {
        let payloadType = Envelope.manifestPayloadType
        let signature = try! fuzzSigningKey.signature(for: Envelope.pae(payloadType: payloadType, payload: rest))
        let envelope = Envelope(
            payloadType: payloadType, payload: Data(rest).base64EncodedString(),
            signatures: [.init(keyid: ManifestSigningKey.keyID(for: fuzzSigningKey.publicKey), sig: Data(signature).base64EncodedString())]
        )
        let decoded = try? Envelope.decode(envelope.encoded())
        precondition(decoded != nil, "an envelope this code encoded does not decode")
        _ = try? decoded!.verifiedManifest(trusting: [fuzzSigningKey.publicKey])
    }
    return 0
}
