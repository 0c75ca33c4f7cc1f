import DepotCore
import Foundation

extension AppStore {
    /// The manifest signing keys in force, newest last, created on first use (one set per data
    /// folder). During a rotation's grace period both the old and the new key sign every manifest.
    public func signingKeys(now: Date = WallClock.now()) throws -> [Ed25519PrivateKey] {
        let stored = try storedSigningKeys()
        return try stored.filter { ($0.retireAt ?? .distantFuture) > now }.map { key in
            guard let seed = Data(base64Encoded: key.seed) else { throw KeyError.malformed("\(folder.signingKey): a seed is not base64") }
            return try Ed25519PrivateKey(rawRepresentation: Array(seed))
        }
    }

    /// The newest signing key.
    public func signingKey() throws -> Ed25519PrivateKey {
        guard let key = try signingKeys().last else { throw KeyError.malformed("\(folder.signingKey) has no key in force") }
        return key
    }

    /// Adds a new manifest signing key. With no `grace`, the current keys keep co-signing until
    /// the operator retires them (``retireSigningKey(_:now:)``): no build that trusts only them
    /// stops receiving manifests on a date nobody chose. With `grace`, they retire after it.
    /// Returns the new key's id.
    @discardableResult
    public func rotateSigningKey(grace: TimeInterval? = nil, now: Date = WallClock.now()) throws -> String {
        try FileSystem.createDirectory(folder.keys, mode: 0o700)
        return try LockedFile.withLock(folder.signingKey) {
            var stored = try readSigningKeys() ?? []
            if let grace {
                // A root lists the keys its devices accept; the new key is in none yet. Retiring
                // every key a root lists on a date would leave its devices accepting nothing then.
                let roots = RootStore(folder: folder)
                for app in list() {
                    guard let root = try roots.trust(app)?.newest.document else { continue }
                    throw DepotError.conflict("root_needs_key", "app \(app) has a root of trust (version \(root.version)), which lists the keys its devices accept: --grace-days would retire them on a date while no root lists the new key. Rotate without --grace-days, sign and add the next root version naming the new key, then retire the old one (depot keys retire-signing). Nothing changed")
                }
                for index in stored.indices where stored[index].retireAt == nil || stored[index].retireAt! > now + grace {
                    stored[index].retireAt = now + grace
                }
            }
            let key = Ed25519PrivateKey()
            stored.append(StoredSigningKey(seed: Data(key.rawRepresentation).base64EncodedString(), createdAt: now, retireAt: nil))
            try StoredJSON.write(StoredSigningKeys(keys: stored), to: folder.signingKey, mode: 0o600)
            return ManifestSigningKey.keyID(for: key.publicKey)
        }
    }

    /// A manifest signing key as `depot keys` lists it.
    public struct SigningKeyInfo: Sendable {
        public let id: String
        public let publicKey: String
        public let createdAt: Date
        public let retireAt: Date?
    }

    /// Every stored signing key, oldest first, retired ones included.
    public func signingKeyInfo() throws -> [SigningKeyInfo] {
        try storedSigningKeys().map { key in
            guard let seed = Data(base64Encoded: key.seed) else { throw KeyError.malformed("\(folder.signingKey): a seed is not base64") }
            let publicKey = try Ed25519PrivateKey(rawRepresentation: Array(seed)).publicKey
            return SigningKeyInfo(id: ManifestSigningKey.keyID(for: publicKey), publicKey: OfflineKeyFile.publicText(publicKey), createdAt: key.createdAt, retireAt: key.retireAt)
        }
    }

    /// Retires the signing key `id` now: manifests are signed without it from the next re-sign
    /// on, so builds that trust only it stop accepting them. Refused for the last key in force,
    /// and for a key an app's newest root lists as its only online key in force (its manifests
    /// would carry no signature its devices accept: sign and add a root listing another first).
    public func retireSigningKey(_ id: String, now: Date = WallClock.now()) throws {
        let roots = RootStore(folder: folder)
        try LockedFile.withLock(folder.signingKey) {
            var stored = try readSigningKeys() ?? []
            let ids = try stored.map { key -> String in
                guard let seed = Data(base64Encoded: key.seed) else { throw KeyError.malformed("\(folder.signingKey): a seed is not base64") }
                return ManifestSigningKey.keyID(for: try Ed25519PrivateKey(rawRepresentation: Array(seed)).publicKey)
            }
            let inForce = { (index: Int) in (stored[index].retireAt ?? .distantFuture) > now }
            guard let index = ids.firstIndex(of: id), inForce(index) else {
                throw DepotError.notFound("a signing key \(id) in force (depot keys list-signing lists them)")
            }
            let remaining = stored.indices.filter { $0 != index && inForce($0) }.map { ids[$0] }
            guard !remaining.isEmpty else {
                throw DepotError.conflict("last_signing_key", "\(id) is the only signing key in force: add the next one first (depot keys rotate-signing). Nothing changed")
            }
            for app in list() {
                guard let root = try roots.trust(app)?.newest.document else { continue }
                let listed = Set(try root.onlinePublicKeys().map(ManifestSigningKey.keyID))
                guard listed.contains(where: remaining.contains) else {
                    throw DepotError.conflict("root_needs_key", "app \(app)'s root (version \(root.version)) lists no other online key in force: its devices would accept no manifest. Sign root version \(root.version + 1) listing the new key (depot root sign --online-keys-from CONFIG.json) and add it (depot root add) first. Nothing changed")
                }
            }
            stored[index].retireAt = now
            try StoredJSON.write(StoredSigningKeys(keys: stored), to: folder.signingKey, mode: 0o600)
        }
    }

    /// The stored signing keys; the first is made on first use, under the file's lock (two
    /// processes starting on a new folder make one key, not one each).
    private func storedSigningKeys() throws -> [StoredSigningKey] {
        if let keys = try readSigningKeys() { return keys }
        try FileSystem.createDirectory(folder.keys, mode: 0o700)
        return try LockedFile.withLock(folder.signingKey) {
            if let keys = try readSigningKeys() { return keys }
            let key = Ed25519PrivateKey()
            let first = StoredSigningKey(seed: Data(key.rawRepresentation).base64EncodedString(), createdAt: WallClock.now(), retireAt: nil)
            try StoredJSON.write(StoredSigningKeys(keys: [first]), to: folder.signingKey, mode: 0o600)
            return [first]
        }
    }

    /// The signing keys on disk, nil when there is no file yet.
    private func readSigningKeys() throws -> [StoredSigningKey]? {
        guard FileSystem.exists(folder.signingKey) else { return nil }
        if let set = try? StoredJSON.read(StoredSigningKeys.self, from: folder.signingKey) { return set.keys }
        // The first format held one key.
        if let single = try? StoredJSON.read(StoredSigningKey.self, from: folder.signingKey) { return [single] }
        throw KeyError.malformed("\(folder.signingKey) is unreadable")
    }
}

struct StoredSigningKey: Codable {
    var seed: String
    var createdAt: Date
    /// After this instant the key no longer signs; nil: in force.
    var retireAt: Date?
}

struct StoredSigningKeys: Codable {
    var keys: [StoredSigningKey]
}
