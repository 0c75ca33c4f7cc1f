import DepotCore
import Foundation

/// What `depot root add` and `depot root show` do on a data folder, beside a running origin or
/// not: the root is written under its lock, and a running origin signs every channel's live
/// manifest again with the new chain within seconds (it watches the `roots/` folders).
public struct RootAdmin {
    private let folder: DataFolder
    private let apps: AppStore
    private let releases: ReleaseStore

    public init(dataPath: String) throws {
        folder = DataFolder(dataPath)
        guard folder.exists else { throw DepotError.notFound("a data folder at \(dataPath)") }
        apps = AppStore(folder: folder)
        releases = ReleaseStore(folder: folder, apps: apps, manifestLifetime: 90 * 86_400)
    }

    /// A protected channel as it stands: the release it serves and the statement binding its packs.
    public struct ChannelState: Sendable {
        public let channel: String
        /// The release the channel serves, nil when it has none yet.
        public let serving: Int?
        /// The release whose statement binds the packs it serves, nil when none does.
        public let signedRelease: Int?
        /// Valid signatures on that statement.
        public let signers: Int
    }

    /// Adds the root document in `bytes` to `app` (``RootStore/add(_:app:inForce:now:)``);
    /// returns it with the state of each channel it protects.
    public func add(_ bytes: [UInt8], app: String, now: Date = WallClock.now()) throws -> (addition: RootStore.Addition, channels: [ChannelState]) {
        guard apps.settings(app) != nil else { throw DepotError.notFound("app \(app)") }
        // Under the signing keys' lock (made on first use, before it is taken), which `depot keys
        // retire-signing` holds while it checks the roots: a key is never retired while a root
        // that needs it is added.
        _ = try apps.signingKeys(now: now)
        let addition = try LockedFile.withLock(folder.signingKey) {
            let held = try apps.signingKeyInfo()
            return try releases.roots.add(
                bytes, app: app, inForce: apps.signingKeys(now: now).map(\.publicKey), everHeld: Set(held.map(\.publicKey)),
                retiring: Set(held.filter { $0.retireAt.map { $0 > now } ?? false }.map(\.publicKey)), now: now
            )
        }
        return (addition, try channels(app, root: addition.root.document))
    }

    /// The app's root chain (nil without one), with the state of each channel its newest root protects.
    public func show(_ app: String) throws -> (trust: RootStore.AppTrust, channels: [ChannelState])? {
        guard apps.settings(app) != nil else { throw DepotError.notFound("app \(app)") }
        guard let trust = try releases.roots.trust(app) else { return nil }
        return (trust, try channels(app, root: trust.newest.document))
    }

    /// The ids of the manifest signing keys in force.
    public func signingKeysInForce(now: Date = WallClock.now()) throws -> Set<String> {
        Set(try apps.signingKeys(now: now).map { ManifestSigningKey.keyID(for: $0.publicKey) })
    }

    private func channels(_ app: String, root: RootDocument) throws -> [ChannelState] {
        try root.protectedChannels.map { channel in
            guard let live = try releases.current(app, channel: channel) else {
                return ChannelState(channel: channel, serving: nil, signedRelease: nil, signers: 0)
            }
            let signed = releases.signedRelease(app, channel: channel, packs: try live.manifest.packs, root: root)
            let signers = try signed.map { $0.envelope.validSigners(among: try root.releasePublicKeys()) } ?? 0
            return ChannelState(channel: channel, serving: live.version, signedRelease: signed?.release, signers: signers)
        }
    }
}
