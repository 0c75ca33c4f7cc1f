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
    /// A manifest envelope of an app with a root of trust: the app's root documents, oldest first
    /// (each a signed envelope of its own; <doc:RootOfTrust>). Not covered by the manifest's
    /// signatures; absent otherwise. Clients built before roots ignore it.
    public var roots: [Envelope]?
    /// A manifest envelope of a protected channel: the release statements its packs (and a running
    /// rollout's candidate) are bound by, each signed by the app's release keys. Not covered by the
    /// manifest's signatures; absent otherwise.
    public var releases: [Envelope]?

    public init(payloadType: String, payload: String, signatures: [Signature], roots: [Envelope]? = nil, releases: [Envelope]? = nil) {
        self.payloadType = payloadType
        self.payload = payload
        self.signatures = signatures
        self.roots = roots
        self.releases = releases
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

    /// Parses envelope JSON. An envelope whose top-level keys are escaped or repeated is refused
    /// : every reader of it must see the same payload.
    public static func decode(_ bytes: [UInt8]) throws(EnvelopeError) -> Envelope {
        guard bytes.withUnsafeBytes({ JSONScanner($0).member("payload") != nil }),
              let envelope = try? JSONDecoder().decode(Envelope.self, from: Data(bytes)) else { throw .malformed }
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
        var tried = Set<String>()
        for signature in signatures {
            guard let key = trusted[signature.keyid] else { continue }
            sawTrustedKey = true
            guard tried.insert(signature.keyid).inserted else { continue }
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
    /// No memory for the message a signature covers.
    public static func noMemory(_ bytes: Int) -> EnvelopeError { EnvelopeError("no memory for the \(bytes)-byte signed manifest") }
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

// MARK: Verifying in little memory

extension Envelope {
    /// The members of an envelope other than its payload.
    struct Head: Decodable {
        var payloadType: String
        var signatures: [Signature]
        var roots: [Envelope]?
        var releases: [Envelope]?
    }

    /// Verifies the envelope in the file at `path` (at most `limit` bytes) and returns its
    /// manifest, as ``verifiedManifest(trusting:)`` does, in about the memory of the file: the
    /// payload is base64-decoded from the file's bytes straight into the message the signature
    /// covers, the file's bytes are released before the manifest is decoded, and the manifest's
    /// packs are decoded one at a time. What a Background Assets extension calls, whose memory
    /// limit is a few MiB.
    public static func verifiedManifest(file path: String, limit: Int, trusting keys: [Ed25519PublicKey]) throws -> Manifest {
        try verifiedManifest(file: path, limit: limit) { _ in keys }.manifest
    }

    /// ``verifiedManifest(file:limit:trusting:)`` for envelope bytes in memory.
    public static func verifiedManifest(envelope bytes: [UInt8], trusting keys: [Ed25519PublicKey]) throws(EnvelopeError) -> Manifest {
        let signed: Result<(Head, PageBuffer, Int), EnvelopeError> = bytes.withUnsafeBytes { buffer in Result { () throws(EnvelopeError) in try signedMessage(buffer) } }
        let (head, message, payloadStart) = try signed.get()
        return try verify(head, message: message, payloadStart: payloadStart, trusting: keys)
    }

    /// What a manifest envelope carries besides its payload: the root documents and release
    /// statements (``roots``, ``releases``), unverified.
    public struct Attachments: Sendable {
        public var roots: [Envelope]
        public var releases: [Envelope]
    }

    /// ``verifiedManifest(file:limit:trusting:)`` with the trusted keys chosen from the envelope's
    /// attachments (a device with a root of trust walks the roots first), returned with them.
    public static func verifiedManifest(
        file path: String, limit: Int, keys: (Attachments) throws -> [Ed25519PublicKey]
    ) throws -> (manifest: Manifest, attachments: Attachments) {
        let (head, message, payloadStart) = try {
            let bytes = try FileSystem.readFile(path, limit: limit)
            return try bytes.withUnsafeBytes { try signedMessage($0) }
        }()
        let attachments = Attachments(roots: head.roots ?? [], releases: head.releases ?? [])
        return (try verify(head, message: message, payloadStart: payloadStart, trusting: keys(attachments)), attachments)
    }

    /// ``verifiedManifest(file:limit:keys:)`` for envelope bytes in memory.
    public static func verifiedManifest(
        envelope bytes: [UInt8], keys: (Attachments) throws -> [Ed25519PublicKey]
    ) throws -> (manifest: Manifest, attachments: Attachments) {
        let signed: Result<(Head, PageBuffer, Int), EnvelopeError> = bytes.withUnsafeBytes { buffer in Result { () throws(EnvelopeError) in try signedMessage(buffer) } }
        let (head, message, payloadStart) = try signed.get()
        let attachments = Attachments(roots: head.roots ?? [], releases: head.releases ?? [])
        return (try verify(head, message: message, payloadStart: payloadStart, trusting: keys(attachments)), attachments)
    }

    /// The envelope's other members, and the PAE message with the decoded payload at `payloadStart`.
    private static func signedMessage(_ buffer: UnsafeRawBufferPointer) throws(EnvelopeError) -> (Head, PageBuffer, Int) {
        guard let base = buffer.baseAddress, buffer.count > 0 else { throw .malformed }
        let data = Data(bytesNoCopy: UnsafeMutableRawPointer(mutating: base), count: buffer.count, deallocator: .none)
        guard let head = try? JSONDecoder().decode(Head.self, from: data) else { throw .malformed }
        guard head.payloadType == manifestPayloadType else { throw .wrongPayloadType(head.payloadType) }
        guard let range = JSONScanner(buffer).member("payload"), range.lowerBound > 0, buffer[range.lowerBound - 1] == UInt8(ascii: "\"") else { throw .malformed }
        let encoded = UnsafeRawBufferPointer(rebasing: buffer[range])
        guard !encoded.contains(UInt8(ascii: "\\")) else {
            // An escaped payload (`\/`, which this project's signer never writes): the plain way.
            guard let envelope = try? JSONDecoder().decode(Envelope.self, from: data), let payload = Data(base64Encoded: envelope.payload) else { throw .malformed }
            let prefix = paePrefix(payloadType: head.payloadType, count: payload.count)
            guard let message = PageBuffer(count: prefix.count + payload.count) else { throw .noMemory(prefix.count + payload.count) }
            message.memory.copyBytes(from: prefix)
            UnsafeMutableRawBufferPointer(rebasing: message.memory[prefix.count...]).copyBytes(from: payload)
            return (head, message, prefix.count)
        }
        guard let count = Base64.decodedCount(encoded) else { throw .malformed }
        let prefix = paePrefix(payloadType: head.payloadType, count: count)
        // The message in pages of its own, so that the text of packs already decoded can be given
        // back while the rest is decoded (``PageBuffer``).
        guard let message = PageBuffer(count: prefix.count + count) else { throw .noMemory(prefix.count + count) }
        message.memory.copyBytes(from: prefix)
        guard Base64.decode(encoded, into: UnsafeMutableRawBufferPointer(rebasing: message.memory[prefix.count...])) else { throw .malformed }
        return (head, message, prefix.count)
    }

    private static func paePrefix(payloadType: String, count: Int) -> [UInt8] {
        let type = Array(payloadType.utf8)
        return Array("DSSEv1 \(type.count) ".utf8) + type + Array(" \(count) ".utf8)
    }

    private static func verify(_ head: Head, message: PageBuffer, payloadStart: Int, trusting keys: [Ed25519PublicKey]) throws(EnvelopeError) -> Manifest {
        let trusted = Dictionary(keys.map { (ManifestSigningKey.keyID(for: $0), $0) }, uniquingKeysWith: { a, _ in a })
        var sawTrustedKey = false
        var tried = Set<String>()
        for signature in head.signatures {
            guard let key = trusted[signature.keyid] else { continue }
            sawTrustedKey = true
            // One verification per trusted key: an envelope repeating a key id with bad
            // signatures cannot make the device verify a large message again and again.
            guard tried.insert(signature.keyid).inserted else { continue }
            guard let sig = Data(base64Encoded: signature.sig), key.isValidSignature(Array(sig), for: message.bytes) else { continue }
            do {
                // Verified: decoded pack by pack, the text before each pack given back.
                return try Manifest.decode(buffer: UnsafeRawBufferPointer(rebasing: message.bytes[payloadStart...])) { offset in
                    message.release(before: payloadStart + offset)
                }
            } catch let error as ManifestError {
                throw .invalidManifest(error.description)
            } catch {
                throw .malformedManifest
            }
        }
        throw sawTrustedKey ? .badSignature : .untrustedKey(head.signatures.map(\.keyid))
    }
}

/// Standard base64 (RFC 4648, with padding), decoded without building a `Data`.
enum Base64 {
    private static let table: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8.enumerated() { table[Int(c)] = UInt8(i) }
        return table
    }()

    /// The decoded size of `text`, or nil if it is not a whole number of 4-character groups.
    static func decodedCount(_ text: UnsafeRawBufferPointer) -> Int? {
        guard text.count % 4 == 0 else { return nil }
        guard text.count > 0 else { return 0 }
        let padding = text[text.count - 1] == UInt8(ascii: "=") ? (text[text.count - 2] == UInt8(ascii: "=") ? 2 : 1) : 0
        return text.count / 4 * 3 - padding
    }

    /// Decodes `text` into `out` (exactly ``decodedCount(_:)`` bytes); false on a character that is not base64.
    static func decode(_ text: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer) -> Bool {
        var o = 0
        var i = 0
        while i < text.count {
            let last = i + 4 == text.count
            let a = table[Int(text[i])], b = table[Int(text[i + 1])]
            let pad2 = last && text[i + 2] == UInt8(ascii: "="), pad3 = last && text[i + 3] == UInt8(ascii: "=")
            let c = pad2 ? 0 : table[Int(text[i + 2])], d = pad3 ? 0 : table[Int(text[i + 3])]
            guard a | b | c | d != 0xFF, a < 64, b < 64, c < 64, d < 64, !(pad2 && !pad3) else { return false }
            out[o] = a << 2 | b >> 4
            if !pad2 { out[o + 1] = b << 4 | c >> 2 }
            if !pad3 { out[o + 2] = c << 6 | d }
            o += 3 - (pad2 ? 1 : 0) - (pad3 ? 1 : 0)
            i += 4
        }
        return o == out.count
    }
}
