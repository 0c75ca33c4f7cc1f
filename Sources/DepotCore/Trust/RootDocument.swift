import Foundation

/// An app's root of trust, signed by its root keys, whose private halves the operator keeps off
/// the origin (see <doc:RootOfTrust>). It says which online keys may sign the app's manifests,
/// which release keys sign its protected channels' releases, and until when it holds. The root
/// rotates by a chain: version n+1 is trusted when signed by the root keys of version n and by its
/// own (TUF's rule), so a device that pinned an old version walks to the newest.
public struct RootDocument: Codable, Hashable, Sendable {
    /// The payload type of a root document's envelope.
    public static let payloadType = "application/vnd.assetdepot.root+json"
    /// The most keys a list may hold.
    public static let keyLimit = 64

    /// Always `root`.
    public var type: String
    /// The app id.
    public var app: String
    /// 1, then each rotation's next.
    public var version: Int
    /// After this instant a device whose newest root is this one accepts no new manifest.
    public var expiresAt: Date
    /// Base64 Ed25519 public keys that sign the next version (and this one).
    public var rootKeys: [String]
    /// How many root keys must sign.
    public var rootThreshold: Int
    /// Base64 public keys of the origin's manifest signing keys this app trusts.
    public var onlineKeys: [String]
    /// Base64 public keys that sign releases of protected channels.
    public var releaseKeys: [String]
    /// How many release keys must sign a release statement.
    public var releaseThreshold: Int
    /// Channels whose devices require a release statement.
    public var protectedChannels: [String]

    public init(
        app: String, version: Int, expiresAt: Date, rootKeys: [Ed25519PublicKey], rootThreshold: Int, onlineKeys: [Ed25519PublicKey],
        releaseKeys: [Ed25519PublicKey], releaseThreshold: Int, protectedChannels: [String]
    ) {
        type = "root"
        (self.app, self.version, self.expiresAt) = (app, version, expiresAt)
        (self.rootKeys, self.rootThreshold) = (rootKeys.map(PublicKeyList.text), rootThreshold)
        self.onlineKeys = onlineKeys.map(PublicKeyList.text)
        (self.releaseKeys, self.releaseThreshold) = (releaseKeys.map(PublicKeyList.text), releaseThreshold)
        self.protectedChannels = protectedChannels.sorted()
    }

    /// Whether devices on `channel` require a release statement.
    public func protects(_ channel: String) -> Bool { protectedChannels.contains(channel) }

    /// The root keys, parsed.
    public func rootPublicKeys() throws(TrustError) -> [Ed25519PublicKey] { try PublicKeyList.parse(rootKeys, name: "root version \(version)'s rootKeys") }
    /// The online keys, parsed.
    public func onlinePublicKeys() throws(TrustError) -> [Ed25519PublicKey] { try PublicKeyList.parse(onlineKeys, name: "root version \(version)'s onlineKeys") }
    /// The release keys, parsed.
    public func releasePublicKeys() throws(TrustError) -> [Ed25519PublicKey] { try PublicKeyList.parse(releaseKeys, name: "root version \(version)'s releaseKeys") }

    /// What makes the document unusable, or nil.
    public var problem: String? {
        guard type == "root" else { return "not a root document" }
        guard Identifier.isValidApp(app), version >= 1 else { return "the app id or the version is not valid" }
        for (name, list) in [("rootKeys", rootKeys), ("onlineKeys", onlineKeys), ("releaseKeys", releaseKeys)] {
            guard list.count <= Self.keyLimit, Set(list).count == list.count else { return "\(name) holds more than \(Self.keyLimit) keys or a key twice" }
            if case .failure(let error) = Result(catching: { () throws(TrustError) in try PublicKeyList.parse(list, name: name) }) { return error.description }
        }
        guard !rootKeys.isEmpty, (1...rootKeys.count).contains(rootThreshold) else { return "rootThreshold must be between 1 and the number of root keys" }
        guard !onlineKeys.isEmpty else { return "no online key may sign manifests" }
        // An online key lives on the origin: were it also a root or release key, the origin's
        // holder would hold what the root keeps offline.
        guard Set(onlineKeys).isDisjoint(with: rootKeys + releaseKeys) else { return "an online key is also a root or release key" }
        guard (0...releaseKeys.count).contains(releaseThreshold) else { return "releaseThreshold is larger than the number of release keys" }
        guard protectedChannels.allSatisfy(Identifier.isValidChannel), Set(protectedChannels).count == protectedChannels.count else { return "protectedChannels holds a name that is not a channel, or a channel twice" }
        guard protectedChannels.isEmpty || releaseThreshold >= 1 else { return "protected channels need release keys and a releaseThreshold of at least 1" }
        return nil
    }

    /// Canonical JSON: sorted keys, ISO 8601 dates.
    public func encoded() -> [UInt8] { Array(try! Manifest.encoder.encode(self)) }

    /// Parses and checks a root document's JSON.
    public static func decode(_ bytes: [UInt8]) throws(TrustError) -> RootDocument {
        guard let document = try? Manifest.decoder.decode(RootDocument.self, from: Data(bytes)) else { throw TrustError("a root document is not valid JSON of its form") }
        if let problem = document.problem { throw TrustError("root version \(document.version): \(problem)") }
        return document
    }

    /// Signs the document with the given root keys (a rotation signs with the old keys and the new).
    public func signed(with keys: [any Ed25519Signer]) throws -> Envelope {
        try Envelope.sign(payload: encoded(), type: Self.payloadType, with: keys)
    }
}

/// A root document a device (or the origin) trusts, with the SHA-256 of its payload (what a device
/// records, so that no other document of the same version is accepted later).
public struct TrustedRoot: Sendable, Hashable {
    public let document: RootDocument
    /// Lower-case hex SHA-256 of the document's signed bytes.
    public let payloadSHA256: String
    /// The envelope it came in.
    public let envelope: Envelope
    /// Every version the walk that reached it passed through, with its payload's SHA-256 (its own
    /// included): what a device checks its record against again under its state's lock, where
    /// another process may have recorded a newer root meanwhile.
    public internal(set) var walked: [Int: String] = [:]

    init(document: RootDocument, payloadSHA256: String, envelope: Envelope) {
        (self.document, self.payloadSHA256, self.envelope) = (document, payloadSHA256, envelope)
        walked = [document.version: payloadSHA256]
    }

    /// The envelope as a device or a signer keeps it: the payload and only the signatures of the
    /// document's own root keys that verify, nothing else (no member an origin could pad: the
    /// signatures do not cover `roots`, `releases` or signatures by other keys), so that what is
    /// recorded is at most the document and 64 signatures.
    public var kept: Envelope {
        Envelope(payloadType: envelope.payloadType, payload: envelope.payload, signatures: envelope.validSignatures(among: (try? document.rootPublicKeys()) ?? []))
    }
}

/// Walking an app's root chain.
public enum RootChain {
    /// The most root documents a chain may hold.
    public static let lengthLimit = 1_000

    /// A root trusted by itself: the first version, or the one a build pins (signed by its own root
    /// keys, threshold met).
    public static func selfSigned(_ envelope: Envelope, app: String) throws(TrustError) -> TrustedRoot {
        let unverified = try peek(envelope)
        let bytes = try envelope.payload(
            ofType: RootDocument.payloadType, signedBy: unverified.rootPublicKeys(), threshold: unverified.rootThreshold,
            what: "root version \(unverified.version)", keysName: "its own root keys"
        )
        let document = try RootDocument.decode(bytes)
        guard document.app == app else { throw TrustError("root version \(document.version) is app \(document.app)'s, not \(app)'s") }
        return TrustedRoot(document: document, payloadSHA256: Hex.encode(SHA256Hasher.hash(bytes)), envelope: envelope)
    }

    /// The version after `trusted`, checked by TUF's rule: signed by `trusted`'s root keys and by its
    /// own, the very next version, the same app.
    public static func next(_ envelope: Envelope, after trusted: TrustedRoot) throws(TrustError) -> TrustedRoot {
        let old = trusted.document
        let what = "root version \(old.version + 1)"
        _ = try envelope.payload(
            ofType: RootDocument.payloadType, signedBy: old.rootPublicKeys(), threshold: old.rootThreshold, what: what,
            keysName: "version \(old.version)'s root keys"
        )
        let next = try selfSigned(envelope, app: old.app)
        guard next.document.version == old.version + 1 else { throw TrustError("\(what) is numbered \(next.document.version)") }
        return next
    }

    /// Walks from `start` through `chain` (any order; versions at or below the start are skipped
    /// unless they are `mustInclude`'s): the newest root reached. With `mustInclude`, the walk must
    /// reach that version with that payload (a device's record of the newest root it accepted):
    /// otherwise refused, so that keys an older root listed cannot fork the chain.
    public static func walk(
        from start: TrustedRoot, through chain: [Envelope], mustInclude record: (version: Int, payloadSHA256: String)? = nil
    ) throws(TrustError) -> TrustedRoot {
        guard chain.count <= lengthLimit else { throw TrustError("the root chain holds more than \(lengthLimit) documents") }
        var byVersion: [Int: Envelope] = [:]
        for envelope in chain {
            guard let version = try? peek(envelope).version, version > start.document.version else { continue }
            guard byVersion[version] == nil else { throw TrustError("the root chain holds version \(version) twice") }
            byVersion[version] = envelope
        }
        var trusted = start
        if let record, record.version == trusted.document.version, record.payloadSHA256 != trusted.payloadSHA256 {
            throw TrustError("root version \(record.version) is not the one this device trusts")
        }
        var walked = trusted.walked
        while let envelope = byVersion[trusted.document.version + 1] {
            trusted = try next(envelope, after: trusted)
            walked[trusted.document.version] = trusted.payloadSHA256
            trusted.walked = walked
            if let record, record.version == trusted.document.version, record.payloadSHA256 != trusted.payloadSHA256 {
                throw TrustError("root version \(record.version) is not the one this device trusts: the chain was forked")
            }
        }
        if let record, trusted.document.version < record.version {
            throw TrustError("the origin's root chain ends at version \(trusted.document.version), below version \(record.version), which this device already trusts")
        }
        return trusted
    }

    /// The document inside, unverified (to learn which keys must have signed it).
    static func peek(_ envelope: Envelope) throws(TrustError) -> RootDocument {
        guard envelope.payloadType == RootDocument.payloadType, let bytes = envelope.payloadBytes else { throw TrustError("a root document's envelope is malformed") }
        return try RootDocument.decode(bytes)
    }
}
