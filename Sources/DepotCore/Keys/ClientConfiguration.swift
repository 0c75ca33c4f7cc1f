import Foundation

/// What an app is given to trust and read its packs: the manifest public keys and the pack key ring.
///
/// Printed by `depot keys export`; read by `depot sync --config` and by `DepotClient`.
/// JSON: `{"app": …, "manifestPublicKeys": ["<base64>", …], "packKeys": {"<id>": "<base64>"}, "root": "<base64>"}`.
/// With `root` (an app with a root of trust), the client trusts what that root, and the roots it
/// signs after it, say, and not `manifestPublicKeys` (kept for reading by older clients).
public struct ClientConfiguration: Codable, Hashable, Sendable {
    /// The app id.
    public var app: String
    /// Base64 Ed25519 public keys trusted to sign manifests (two during a rotation).
    public var manifestPublicKeys: [String]
    /// Pack master keys by key id, base64.
    public var packKeys: [String: String]
    /// Base64 of the signed root document (its envelope's JSON) the build pins, for an app with a
    /// root of trust; nil: the build trusts `manifestPublicKeys`.
    public var root: String?
    /// With a root: per protected channel, the signed release it served when the configuration
    /// was exported. A new install accepts no older signed release (before its first sync it has
    /// recorded none).
    public var releaseFloors: [String: Int]?

    public init(app: String, manifestPublicKeys: [Ed25519PublicKey], keyRing: KeyRing, root: Envelope? = nil) {
        self.app = app
        self.root = root.map { Data($0.encoded()).base64EncodedString() }
        self.manifestPublicKeys = manifestPublicKeys.map { Data($0.rawRepresentation).base64EncodedString() }
        self.packKeys = keyRing.keys.mapValues { Data($0).base64EncodedString() }
    }

    /// The trusted manifest keys.
    public func trustedKeys() throws -> [Ed25519PublicKey] {
        try manifestPublicKeys.map { text in
            guard let data = Data(base64Encoded: text) else { throw KeyError.malformed("manifest public key is not base64") }
            return try Ed25519PublicKey(rawRepresentation: Array(data))
        }
    }

    /// The root envelope the build pins, or nil.
    public func pinnedRoot() throws -> Envelope? {
        guard let root else { return nil }
        guard let data = Data(base64Encoded: root), let envelope = try? Envelope.decode(Array(data)) else {
            throw KeyError.malformed("the configuration's root is not a base64 signed root document")
        }
        _ = try RootChain.selfSigned(envelope, app: app)
        return envelope
    }

    /// The pack key ring.
    public func keyRing() throws -> KeyRing {
        var ring = try KeyRing([String: [UInt8]]())
        for (id, text) in packKeys {
            guard let data = Data(base64Encoded: text) else { throw KeyError.invalidKey(id) }
            try ring.insert(Array(data), id: id)
        }
        return ring
    }

    /// Pretty JSON with sorted keys.
    public func encoded() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        return Array(try! encoder.encode(self)) + [10]
    }

    /// Parses the JSON form.
    public static func decode(_ bytes: [UInt8]) throws -> ClientConfiguration {
        do { return try JSONDecoder().decode(ClientConfiguration.self, from: Data(bytes)) } catch {
            throw KeyError.malformed("client configuration: \(error)")
        }
    }
}
