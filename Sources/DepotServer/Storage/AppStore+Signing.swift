import DepotCore
import Foundation

extension AppStore {
    /// The manifest signing keys in force, newest last, created on first use (one set per data
    /// folder). During a rotation's grace period both the old and the new key sign every manifest.
    public func signingKeys(now: Date = Date()) throws -> [Ed25519PrivateKey] {
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

    /// Adds a new manifest signing key. The current keys keep signing for `grace` more (so that
    /// app builds trusting only them keep working while builds with the new key ship), then retire.
    /// Returns the new key's id.
    @discardableResult
    public func rotateSigningKey(grace: TimeInterval, now: Date = Date()) throws -> String {
        try FileSystem.createDirectory(folder.keys, mode: 0o700)
        return try LockedFile.withLock(folder.signingKey) {
            var stored = try readSigningKeys() ?? []
            for index in stored.indices where stored[index].retireAt == nil || stored[index].retireAt! > now + grace {
                stored[index].retireAt = now + grace
            }
            let key = Ed25519PrivateKey()
            stored.append(StoredSigningKey(seed: Data(key.rawRepresentation).base64EncodedString(), createdAt: now, retireAt: nil))
            try StoredJSON.write(StoredSigningKeys(keys: stored), to: folder.signingKey, mode: 0o600)
            return ManifestSigningKey.keyID(for: key.publicKey)
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
            let first = StoredSigningKey(seed: Data(key.rawRepresentation).base64EncodedString(), createdAt: Date(), retireAt: nil)
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
