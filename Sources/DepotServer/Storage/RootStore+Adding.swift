import DepotCore
import Foundation

/// Adding a root document (`depot root add`) and accepting a release statement
/// (`POST …/channels/{channel}/statements`): each checked, then written atomically under a lock.
extension RootStore {
    /// What adding a root did.
    public struct Addition: Sendable {
        /// The root, as stored.
        public let root: TrustedRoot
        /// False when that very document was stored already (adding it again changes nothing).
        public let added: Bool
    }

    /// Adds the root document in `bytes` (an envelope's JSON) as the app's next version: the
    /// first must be version 1, signed by its own root keys; each next one is checked by TUF's
    /// rule against the newest stored. Refused too when it has expired, or when it lists an
    /// online key this origin does not hold in force: the chain is never rewritten, and a device
    /// that walked to a root listing a key the origin cannot sign with would refuse every
    /// manifest until the next root. `inForce`: the folder's manifest signing keys in force.
    /// `everHeld`: the base64 public keys of every signing key the folder holds, retired ones
    /// included (none may be a root or release key: the origin would hold what is meant to be
    /// offline); `retiring`: those of the keys in force with a retirement date set.
    public func add(
        _ bytes: [UInt8], app: String, inForce: [Ed25519PublicKey], everHeld: Set<String> = [], retiring: Set<String> = [], now: Date = WallClock.now()
    ) throws -> Addition {
        guard let envelope = try? Envelope.decode(bytes), envelope.payloadType == RootDocument.payloadType, let payload = envelope.payloadBytes else {
            throw DepotError.badRequest("this is not a signed root document (the JSON file `depot root sign` writes)")
        }
        let document: RootDocument
        do { document = try RootDocument.decode(payload) } catch { throw DepotError(.unprocessable, "root_refused", "\(error); nothing was added") }
        try FileSystem.createDirectory(folder.app(app) + "/roots")
        return try LockedFile.withLock(folder.roots(app)) {
            let stored = try trust(app)
            let newest = stored?.newest.document.version ?? 0
            if document.version <= newest, let stored {
                guard stored.envelopes[document.version - 1] == envelope else {
                    throw DepotError.conflict("root_exists", "app \(app) already has a root version \(document.version), another document: a chain is never rewritten; sign version \(newest + 1) (depot root sign --previous ROOT-\(newest).json). Nothing was added")
                }
                return Addition(root: try RootChain.selfSigned(envelope, app: app), added: false)
            }
            guard document.version == newest + 1 else {
                throw DepotError.conflict("root_version_gap", "this is root version \(document.version) of app \(app), and the next is \(newest + 1)\(newest == 0 ? " (the first root is version 1)" : ""): add the versions in order. Nothing was added")
            }
            let root: TrustedRoot
            do {
                root = try stored.map { try RootChain.next(envelope, after: $0.newest) } ?? RootChain.selfSigned(envelope, app: app)
            } catch {
                throw DepotError(.unprocessable, "root_refused", "\(error): a device would refuse it. Nothing was added")
            }
            guard root.document.expiresAt > now else {
                throw DepotError(.unprocessable, "root_expired", "root version \(document.version) expired at \(ISO8601DateFormatter().string(from: root.document.expiresAt)): sign it again with a later expiry (--expires-days). Nothing was added")
            }
            let held = Set(inForce.map(OfflineKeyFile.publicText))
            let unknown = root.document.onlineKeys.filter { !held.contains($0) }
            guard unknown.isEmpty else {
                let ids = try root.document.onlinePublicKeys().filter { !held.contains(OfflineKeyFile.publicText($0)) }.map(ManifestSigningKey.keyID)
                throw DepotError.conflict("root_online_key_unknown", "root version \(document.version) lists online key \(ids.joined(separator: ", ")), which this origin does not hold in force (keys/manifest-signing.json): it could never sign with it, and a key it does not hold is one someone else may. List the keys `depot keys export --app \(app)` prints (depot root sign --online-keys-from CONFIG.json). Nothing was added")
            }
            let offline = Set(root.document.rootKeys + root.document.releaseKeys).intersection(everHeld)
            guard offline.isEmpty else {
                throw DepotError.conflict("root_offline_key_online", "root version \(document.version) lists a root or release key that is one of this origin's manifest signing keys: whoever holds the origin would hold it too. Make root and release keys with depot root keygen, offline. Nothing was added")
            }
            guard !root.document.onlineKeys.allSatisfy(retiring.contains) else {
                throw DepotError.conflict("root_online_key_retiring", "every online key root version \(document.version) lists is due to retire (depot keys list-signing): its devices would accept no manifest after that. List a key that is not (depot keys rotate-signing adds one). Nothing was added")
            }
            try folder.raiseFormat(to: 2)
            try FileSystem.writeAtomically(envelope.encoded(), to: folder.rootDocument(app, version: document.version))
            return Addition(root: root, added: true)
        }
    }

    /// What accepting a statement answers.
    public struct AcceptedStatement: Codable, Sendable {
        public var release: Int
        public var channel: String
        /// Valid signatures by distinct release keys on the statement kept, and how many the root requires.
        public var signers: Int
        public var threshold: Int
    }

    /// Accepts the release statement in `body` for `channel`: it must verify against the app's
    /// newest root (its release keys, at its threshold), name this app and channel, and bind
    /// exactly the packs of the origin's release it names (`manifestOf` reads a release's manifest,
    /// nil when there is none). A statement already stored for that release stays unless the
    /// new one has more valid signatures.
    func accept(_ body: [UInt8], app: String, channel: String, manifestOf: (Int) throws -> Manifest?) throws -> AcceptedStatement {
        guard let trust = try trust(app) else {
            throw DepotError.conflict("no_root", "app \(app) has no root of trust, so no release keys to check a statement against: add one first (depot root add). Nothing was stored")
        }
        let root = trust.newest.document
        guard let envelope = try? Envelope.decode(body) else {
            throw DepotError.badRequest("the body is not a signed release statement (the JSON file `depot release sign` writes)")
        }
        let statement: ReleaseStatement
        do {
            statement = try ReleaseStatement.verified(envelope, root: root)
        } catch {
            throw DepotError(.unprocessable, "statement_refused", "\(error); nothing was stored")
        }
        guard statement.channel == channel else {
            throw DepotError(.unprocessable, "statement_wrong_channel", "release \(statement.release)'s statement is signed for channel \(statement.channel), not \(channel): sign it for \(channel) (depot release sign --channel \(channel)). Nothing was stored")
        }
        guard let manifest = try manifestOf(statement.release) else { throw DepotError.notFound("release \(statement.release) of app \(app)") }
        let packs = manifest.packs
        guard statement.binds(packs) else {
            throw DepotError.conflict("statement_packs_differ", "the statement binds other packs than release \(statement.release) of app \(app) holds (\(statement.packCount) packs with digest \(statement.packsSHA256.prefix(16))…, the release has \(packs.count) with digest \(ReleaseStatement.digest(of: packs).prefix(16))…): sign the release as this origin serves it (depot release sign --release \(statement.release)). Nothing was stored")
        }
        guard statement.primaryLanguage == nil || statement.primaryLanguage == ReleaseStatement.boundLanguage(of: manifest) else {
            throw DepotError.conflict("statement_language_differs", "the statement binds primary language \(statement.primaryLanguage ?? "none"), and release \(statement.release) of app \(app) carries \(ReleaseStatement.boundLanguage(of: manifest) ?? "none"): sign the release as this origin serves it (depot release sign --release \(statement.release)). Nothing was stored")
        }
        let keys = try root.releasePublicKeys()
        let signers = envelope.validSigners(among: keys)
        let path = folder.statement(app, channel: channel, release: statement.release)
        try FileSystem.createDirectory(folder.statements(app, channel: channel))
        return try LockedFile.withLock(path) {
            let kept = self.statement(app, channel: channel, release: statement.release).map { $0.validSigners(among: keys) } ?? 0
            if signers > kept { try FileSystem.writeAtomically(envelope.encoded(), to: path) }
            return AcceptedStatement(release: statement.release, channel: channel, signers: max(signers, kept), threshold: root.releaseThreshold)
        }
    }
}
