import DepotCore
import DepotServer
import Foundation

/// Roots of trust and release statements for tests, made with DepotCore's formats as `depot root
/// sign` and `depot release sign` make them (the keys stay in the test, as an operator's stay offline).
public struct TrustFixture: Sendable {
    public let app: String
    public let rootKey = Ed25519PrivateKey()
    public let releaseKeys: [Ed25519PrivateKey]
    public let releaseThreshold: Int

    public init(app: String, releaseKeys: Int = 1, releaseThreshold: Int = 1) {
        self.app = app
        self.releaseKeys = (0..<releaseKeys).map { _ in Ed25519PrivateKey() }
        self.releaseThreshold = releaseThreshold
    }

    /// Root version `version` of the app, signed by `signers` (its root key by default), listing
    /// `online` as its online keys (the data folder's signing keys in force, when given one).
    public func root(
        version: Int = 1, dataPath: String? = nil, online: [Ed25519PublicKey] = [], protect: [String] = ["production"], signers: [Ed25519PrivateKey]? = nil,
        expiresAt: Date = Date().addingTimeInterval(365 * 86_400)
    ) throws -> Envelope {
        let held = try dataPath.map { try AppStore(folder: DataFolder($0)).signingKeys().map(\.publicKey) } ?? []
        let document = RootDocument(
            app: app, version: version, expiresAt: expiresAt, rootKeys: [rootKey.publicKey], rootThreshold: 1, onlineKeys: online + held,
            releaseKeys: releaseKeys.map(\.publicKey), releaseThreshold: releaseThreshold, protectedChannels: protect
        )
        return try document.signed(with: signers ?? [rootKey])
    }

    /// Adds root version 1 to the app of the data folder (what `depot root add` does).
    @discardableResult
    public func addRoot(dataPath: String, protect: [String] = ["production"]) throws -> Envelope {
        let envelope = try root(dataPath: dataPath, protect: protect)
        _ = try RootAdmin(dataPath: dataPath).add(envelope.encoded(), app: app)
        return envelope
    }

    /// The statement of release `release` (whose packs are `packs`) for `channel`, signed by `keys`
    /// (the first `releaseThreshold` release keys by default).
    public func statement(release: Int, packs: [PackEntry], channel: String = "production", app: String? = nil, keys: [Ed25519PrivateKey]? = nil) throws -> Envelope {
        try ReleaseStatement(app: app ?? self.app, channel: channel, release: release, signedAt: Date(), packs: packs)
            .signed(with: keys ?? Array(releaseKeys.prefix(releaseThreshold)))
    }

    /// The manifest inside envelope bytes, unverified (a test reading what the origin serves).
    public static func manifest(_ bytes: [UInt8]) throws -> Manifest {
        try Manifest.decode(try Envelope.decode(bytes).payloadBytes ?? [])
    }

    /// A key file's bytes (what `depot root keygen` writes) for `key`.
    public static func keyFile(_ key: Ed25519PrivateKey) -> [UInt8] {
        let fields = ["ed25519PrivateKey": Data(key.rawRepresentation).base64EncodedString(), "publicKey": OfflineKeyFile.publicText(key.publicKey)]
        return Array(try! JSONEncoder().encode(fields))
    }
}
