import Foundation

/// A DSSE envelope (Dead Simple Signing Envelope v1) carrying a signed manifest. See <doc:SignedEnvelope>.
///
/// `{"payloadType": …, "payload": base64(manifest JSON), "signatures": [{"keyid": …, "sig": base64}]}`.
/// Each signature is Ed25519 over the pre-authentication encoding ``pae(payloadType:payload:)``.
public struct Envelope: Codable, Hashable, Sendable {
    /// The payload type of an AssetDepot manifest.
    public static let manifestPayloadType = "application/vnd.assetdepot.manifest+json"

    /// One signature.
    public struct Signature: Codable, Hashable, Sendable {
        /// The signing key's id (see ``ManifestSigningKey/keyID(for:)``).
        public var keyid: String
        /// Base64 of the 64-byte Ed25519 signature.
        public var sig: String
        public init(keyid: String, sig: String) {
            self.keyid = keyid
            self.sig = sig
        }
    }

    /// The payload's media type.
    public var payloadType: String
    /// Base64 of the payload bytes.
    public var payload: String
    /// The signatures.
    public var signatures: [Signature]

    public init(payloadType: String, payload: String, signatures: [Signature]) {
        self.payloadType = payloadType
        self.payload = payload
        self.signatures = signatures
    }

    /// DSSE's pre-authentication encoding: `"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`,
    /// lengths as ASCII decimal byte counts.
    public static func pae(payloadType: String, payload: [UInt8]) -> [UInt8] {
        let type = Array(payloadType.utf8)
        var out = Array("DSSEv1 \(type.count) ".utf8)
        out += type
        out += Array(" \(payload.count) ".utf8)
        out += payload
        return out
    }

    /// Signs `manifest` with each key.
    public static func sign(_ manifest: Manifest, with keys: [Ed25519PrivateKey]) throws -> Envelope {
        let payload = manifest.encoded()
        let message = pae(payloadType: manifestPayloadType, payload: payload)
        let signatures = try keys.map { key in
            Signature(keyid: ManifestSigningKey.keyID(for: key.publicKey), sig: Data(try key.signature(for: message)).base64EncodedString())
        }
        return Envelope(payloadType: manifestPayloadType, payload: Data(payload).base64EncodedString(), signatures: signatures)
    }

    /// The envelope's JSON bytes, as served.
    public func encoded() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array(try! encoder.encode(self))
    }

    /// Parses envelope JSON.
    public static func decode(_ bytes: [UInt8]) throws(EnvelopeError) -> Envelope {
        guard let envelope = try? JSONDecoder().decode(Envelope.self, from: Data(bytes)) else { throw .malformed }
        return envelope
    }

    /// Verifies the signature with the trusted keys and returns the manifest.
    ///
    /// At least one signature must come from a trusted key id and verify; signatures by
    /// unknown key ids are ignored (they allow rotation).
    public func verifiedManifest(trusting keys: [Ed25519PublicKey]) throws(EnvelopeError) -> Manifest {
        guard payloadType == Self.manifestPayloadType else { throw .wrongPayloadType(payloadType) }
        guard let payloadData = Data(base64Encoded: payload) else { throw .malformed }
        let payloadBytes = Array(payloadData)
        let message = Self.pae(payloadType: payloadType, payload: payloadBytes)
        let trusted = Dictionary(keys.map { (ManifestSigningKey.keyID(for: $0), $0) }, uniquingKeysWith: { a, _ in a })
        var sawTrustedKey = false
        for signature in signatures {
            guard let key = trusted[signature.keyid] else { continue }
            sawTrustedKey = true
            guard let sig = Data(base64Encoded: signature.sig), key.isValidSignature(Array(sig), for: message) else { continue }
            do {
                return try Manifest.decode(payloadBytes)
            } catch let error as ManifestError {
                throw .invalidManifest(error.description)
            } catch {
                throw .malformedManifest
            }
        }
        throw sawTrustedKey ? .badSignature : .untrustedKey(signatures.map(\.keyid))
    }
}

/// Why an envelope was refused.
public struct EnvelopeError: Error, Hashable, Sendable, CustomStringConvertible {
    public let description: String
    private init(_ description: String) { self.description = description }
    /// Not a DSSE envelope.
    public static let malformed = EnvelopeError("the manifest envelope is not valid DSSE JSON")
    /// The payload is not a manifest.
    public static func wrongPayloadType(_ type: String) -> EnvelopeError { EnvelopeError("unexpected payload type \"\(type.prefix(100))\"") }
    /// A trusted key signed, but the signature does not verify.
    public static let badSignature = EnvelopeError("the manifest signature does not verify")
    /// No signature comes from a trusted key.
    public static func untrustedKey(_ ids: [String]) -> EnvelopeError {
        EnvelopeError("the manifest is not signed by a trusted key (signed by: \(ids.joined(separator: ", ").prefix(200)))")
    }
    /// The signed payload is not valid manifest JSON.
    public static let malformedManifest = EnvelopeError("the signed payload is not a valid manifest")
    /// The signed manifest holds a value no device may use (a pack id that is not a file name, a
    /// digest that is not hex): ``Manifest/problem``.
    public static func invalidManifest(_ why: String) -> EnvelopeError { EnvelopeError("the signed manifest is refused: \(why)") }
}

/// Helpers for the manifest signing key.
public enum ManifestSigningKey {
    /// A key's id: `ed25519:` and the first 16 hex digits of SHA-256 of its 32 raw bytes.
    public static func keyID(for key: Ed25519PublicKey) -> String {
        "ed25519:" + Hex.encode(SHA256Hasher.hash(key.rawRepresentation).prefix(8))
    }
}
