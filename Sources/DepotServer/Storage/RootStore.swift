import DepotCore
import Foundation
import Synchronization

/// An app's root of trust as the origin keeps it (see DepotCore's RootOfTrust article): the root
/// documents the operator signed offline, `apps/<app>/roots/NNNNNN.json` (immutable, version 1
/// first), and the release statements accepted for its channels,
/// `apps/<app>/statements/<channel>/NNNNNN.json` by release number. The origin holds no key that
/// signs either: it stores them, checks them, and attaches them to the manifests it signs.
///
/// Both are read again only when their folder changes (a `depot root add` beside the running
/// origin renames a file into `roots/`, which gives the folder a new stamp).
public final class RootStore: Sendable {
    let folder: DataFolder
    /// Per app: the stamp of its `roots/` folder and the chain read under it.
    private let chains = Mutex<[String: (stamp: FileStamp?, trust: AppTrust?)]>([:])
    /// Per app and channel: the stamp of the statements folder and what its files bind.
    private let indexes = Mutex<[String: (stamp: FileStamp?, index: [IndexedStatement])]>([:])
    /// Per app: the stamps of what decides its manifests' attachments, as last looked at.
    private let looked = Mutex<[String: [FileStamp?]]>([:])

    public init(folder: DataFolder) { self.folder = folder }

    /// An app's root chain, verified from version 1.
    public struct AppTrust: Sendable {
        /// Every root envelope, oldest first (what a manifest's `roots` carries).
        public let envelopes: [Envelope]
        /// The newest root, reached by TUF's rule from version 1.
        public let newest: TrustedRoot
    }

    /// A stored statement, unverified: its release and the digest of the packs it binds.
    struct IndexedStatement: Sendable {
        let release: Int
        let packsDigest: String
    }

    /// The app's root chain, or nil when it has none. A chain on disk that does not verify is
    /// an error (the origin never signs as if the app had no root).
    public func trust(_ app: String) throws -> AppTrust? {
        let path = folder.roots(app)
        let stamp = FileStampCache<Int>.stamp(path)
        if let known = chains.withLock({ $0[app] }), known.stamp == stamp { return known.trust }
        let trust = stamp == nil ? nil : try load(app)
        chains.withLock { chains in
            if chains.count >= 4096 && chains[app] == nil { chains.remove(at: chains.startIndex) }
            chains[app] = (stamp, trust)
        }
        return trust
    }

    /// Reads and walks `roots/`: versions 1, 2, … with no gap, each trusted by the one before.
    private func load(_ app: String) throws -> AppTrust? {
        let versions = ReleaseStore.versions(in: folder.roots(app))
        guard !versions.isEmpty else { return nil }
        guard versions == Array(1...versions.count), versions.count <= RootChain.lengthLimit else {
            throw DepotError(.failure, "root_chain_damaged", "\(folder.roots(app)) holds versions \(versions.prefix(10).map(String.init).joined(separator: ", ")): a chain is numbered 1, 2, 3… with no gap; restore the folder from a backup")
        }
        var envelopes: [Envelope] = []
        var newest: TrustedRoot?
        for version in versions {
            let path = folder.rootDocument(app, version: version)
            do {
                let envelope = try Envelope.decode(FileSystem.readFile(path, limit: 1 << 20))
                newest = try newest.map { try RootChain.next(envelope, after: $0) } ?? RootChain.selfSigned(envelope, app: app)
                envelopes.append(envelope)
            } catch {
                throw DepotError(.failure, "root_chain_damaged", "\(path) does not continue app \(app)'s root chain: \(error); restore the folder from a backup")
            }
        }
        return AppTrust(envelopes: envelopes, newest: newest!)
    }

    /// Whether what decides `app`'s attachments and signatures (its roots; `keys`, the stamp of
    /// the signing keys' file) changed since the last look; at the first look, whether it has
    /// roots. Each look records.
    func changedSinceLastLook(_ app: String, keys: FileStamp?) -> Bool {
        let stamps = [FileStampCache<Int>.stamp(folder.roots(app)), keys]
        let before = looked.withLock { looked in
            let before = looked[app]
            if looked.count >= 4096 && before == nil { looked.remove(at: looked.startIndex) }
            looked[app] = stamps
            return before
        }
        return before.map { $0 != stamps } ?? (stamps[0] != nil)
    }

    /// The stamp of the signing keys' file.
    var signingKeysStamp: FileStamp? { FileStampCache<Int>.stamp(folder.signingKey) }

    // MARK: Statements

    /// The statements of `channel` that bind exactly `packs`, highest release first (unverified:
    /// each was verified when accepted, and is verified again against the newest root before use).
    /// The highest release any accepted statement of `channel` names (verified or not under the
    /// newest root): devices that recorded it refuse a statement of a lower release.
    func highestStatementRelease(_ app: String, channel: String) -> Int? { index(app, channel: channel).map(\.release).max() }

    func statements(_ app: String, channel: String, binding packs: [PackEntry]) -> [(release: Int, envelope: Envelope)] {
        let digest = ReleaseStatement.digest(of: packs) + "/\(packs.count)"
        return index(app, channel: channel).filter { $0.packsDigest == digest }.sorted { $0.release > $1.release }.compactMap { entry in
            guard let bytes = try? FileSystem.readFile(folder.statement(app, channel: channel, release: entry.release), limit: StatementLimits.bodyLimit),
                  let envelope = try? Envelope.decode(bytes) else { return nil }
            return (entry.release, envelope)
        }
    }

    /// The stored statement of `channel` for `release`, if any.
    func statement(_ app: String, channel: String, release: Int) -> Envelope? {
        guard let bytes = try? FileSystem.readFile(folder.statement(app, channel: channel, release: release), limit: StatementLimits.bodyLimit) else { return nil }
        return try? Envelope.decode(bytes)
    }

    /// What the statements of a channel bind, re-read when its folder changes.
    private func index(_ app: String, channel: String) -> [IndexedStatement] {
        let key = app + "\u{0}" + channel
        let path = folder.statements(app, channel: channel)
        let stamp = FileStampCache<Int>.stamp(path)
        if let known = indexes.withLock({ $0[key] }), known.stamp == stamp { return known.index }
        var index: [IndexedStatement] = []
        for release in ReleaseStore.versions(in: path) {
            guard let envelope = statement(app, channel: channel, release: release), let payload = envelope.payloadBytes,
                  let statement = try? ReleaseStatement.decode(payload), statement.release == release else { continue }
            index.append(IndexedStatement(release: release, packsDigest: statement.packsSHA256 + "/\(statement.packCount)"))
        }
        indexes.withLock { indexes in
            if indexes.count >= 4096 && indexes[key] == nil { indexes.remove(at: indexes.startIndex) }
            indexes[key] = (stamp, index)
        }
        return index
    }
}

/// Bounds on what a statement upload may be.
enum StatementLimits {
    /// The largest statement body accepted: a statement binds its packs by one digest, so it is a
    /// few hundred bytes and a signature of about 150 bytes per signer (64 at most).
    static let bodyLimit = 64 << 10
}
