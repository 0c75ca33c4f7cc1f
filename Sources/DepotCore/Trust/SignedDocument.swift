import Foundation

/// Why a root of trust, a release statement, or a manifest under them was refused.
public struct TrustError: Error, Hashable, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Signing and threshold checks shared by the documents an app's offline keys sign (root
/// documents, release statements): DSSE envelopes like the manifest's, with their own payload types.
extension Envelope {
    /// The most signatures read from one document (a document listing more is refused: a device
    /// checks at most this many).
    public static let signatureLimit = 64

    /// Signs `payload` of `type` with each key.
    public static func sign(payload: [UInt8], type: String, with keys: [any Ed25519Signer]) throws -> Envelope {
        let message = pae(payloadType: type, payload: payload)
        let signatures = try keys.map { key in
            Signature(keyid: ManifestSigningKey.keyID(for: key.publicKey), sig: Data(try key.signature(for: message)).base64EncodedString())
        }
        return Envelope(payloadType: type, payload: Data(payload).base64EncodedString(), signatures: signatures)
    }

    /// The envelope with `key`'s signature added (a second signer of a k-of-n document); a key
    /// that already signed is not added twice.
    public func adding(signatureBy key: any Ed25519Signer) throws -> Envelope {
        let id = ManifestSigningKey.keyID(for: key.publicKey)
        guard !signatures.contains(where: { $0.keyid == id }) else { return self }
        guard let payloadBytes = Data(base64Encoded: payload) else { throw TrustError("the document's payload is not base64") }
        var copy = self
        copy.signatures.append(Signature(keyid: id, sig: Data(try key.signature(for: Self.pae(payloadType: payloadType, payload: Array(payloadBytes)))).base64EncodedString()))
        return copy
    }

    /// The payload bytes, unverified (nil when not base64).
    public var payloadBytes: [UInt8]? { Data(base64Encoded: payload).map { Array($0) } }

    /// How many distinct keys of `keys` signed the payload validly (a key id repeated counts once;
    /// unknown ids are skipped).
    public func validSigners(among keys: [Ed25519PublicKey]) -> Int { validSignatures(among: keys).count }

    /// The signatures by distinct keys of `keys` that verify, in order (a key's first valid one);
    /// none when the envelope carries more than ``signatureLimit``.
    public func validSignatures(among keys: [Ed25519PublicKey]) -> [Signature] {
        guard signatures.count <= Self.signatureLimit, let bytes = payloadBytes else { return [] }
        let message = Self.pae(payloadType: payloadType, payload: bytes)
        let byID = Dictionary(keys.map { (ManifestSigningKey.keyID(for: $0), $0) }, uniquingKeysWith: { a, _ in a })
        var counted = Set<String>()
        var valid: [Signature] = []
        for signature in signatures where !counted.contains(signature.keyid) {
            guard let key = byID[signature.keyid], let sig = Data(base64Encoded: signature.sig), key.isValidSignature(Array(sig), for: message) else { continue }
            counted.insert(signature.keyid)
            valid.append(signature)
        }
        return valid
    }

    /// The payload of `type`, when at least `threshold` distinct keys of `keys` signed it.
    /// `what` names the document and the keys in the error ("root version 3", "the root keys of version 2").
    public func payload(ofType type: String, signedBy keys: [Ed25519PublicKey], threshold: Int, what: String, keysName: String) throws(TrustError) -> [UInt8] {
        guard payloadType == type else { throw TrustError("\(what): unexpected payload type \"\(payloadType.prefix(100))\"") }
        guard signatures.count <= Self.signatureLimit else { throw TrustError("\(what) carries more than \(Self.signatureLimit) signatures") }
        guard let bytes = payloadBytes else { throw TrustError("\(what): the payload is not base64") }
        let valid = validSigners(among: keys)
        guard threshold >= 1, valid >= threshold else {
            throw TrustError("\(what) is signed by \(valid) of \(keysName), and needs \(max(threshold, 1))")
        }
        return bytes
    }
}

/// Base64 Ed25519 public keys, parsed.
enum PublicKeyList {
    static func parse(_ list: [String], name: String) throws(TrustError) -> [Ed25519PublicKey] {
        var keys: [Ed25519PublicKey] = []
        for text in list {
            guard let data = Data(base64Encoded: text), let key = try? Ed25519PublicKey(rawRepresentation: Array(data)) else {
                throw TrustError("\(name) lists \"\(text.prefix(60))\", which is not a base64 Ed25519 public key")
            }
            keys.append(key)
        }
        return keys
    }

    /// The base64 form of a public key (what documents and configurations list).
    static func text(_ key: Ed25519PublicKey) -> String { Data(key.rawRepresentation).base64EncodedString() }
}

/// A private key the operator keeps offline (a root key, a release key), in its file form:
/// `{"ed25519PrivateKey": "<base64 32-byte seed>", "publicKey": "<base64>"}`.
public struct OfflineKeyFile: Codable, Sendable {
    public var ed25519PrivateKey: String
    public var publicKey: String

    /// The file form of a new key.
    public static func generate() -> (file: OfflineKeyFile, key: Ed25519PrivateKey) {
        let key = Ed25519PrivateKey()
        return (OfflineKeyFile(ed25519PrivateKey: Data(key.rawRepresentation).base64EncodedString(), publicKey: PublicKeyList.text(key.publicKey)), key)
    }

    /// Reads a key file; the stated public key must match the seed.
    public static func load(_ bytes: [UInt8], path: String) throws(TrustError) -> Ed25519PrivateKey {
        guard let file = try? JSONDecoder().decode(OfflineKeyFile.self, from: Data(bytes)),
              let seed = Data(base64Encoded: file.ed25519PrivateKey), let key = try? Ed25519PrivateKey(rawRepresentation: Array(seed)) else {
            throw TrustError("\(path) is not an AssetDepot key file (depot root keygen writes them)")
        }
        guard PublicKeyList.text(key.publicKey) == file.publicKey else { throw TrustError("\(path): the public key does not match the private key") }
        return key
    }

    /// The file's bytes (pretty JSON, a newline at the end).
    public func encoded() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        return Array(try! encoder.encode(self)) + [10]
    }

    /// The base64 public key of `key`, as documents list it.
    public static func publicText(_ key: Ed25519PublicKey) -> String { PublicKeyList.text(key) }
}
