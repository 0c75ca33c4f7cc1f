import DepotCore
import Foundation

extension AppStore {
    /// The app's pack key ring and the id new packs are encrypted with.
    public func packKeys(_ id: String) throws -> (ring: KeyRing, current: String) {
        let stored = try StoredJSON.read(PackKeys.self, from: folder.packKeys(id))
        var ring = try KeyRing([String: [UInt8]]())
        for (keyID, text) in stored.keys {
            guard let data = Data(base64Encoded: text) else { throw KeyError.invalidKey(keyID) }
            try ring.insert(Array(data), id: keyID)
        }
        guard ring[stored.current] != nil else { throw KeyError.malformed("current key \(stored.current) is missing") }
        return (ring, stored.current)
    }

    /// Adds a fresh pack master key and makes it current: new packs use it, older packs keep
    /// theirs (the key ring keeps every key). Returns the new key id.
    @discardableResult
    public func rotatePackKey(_ id: String) throws -> String {
        guard settings(id) != nil else { throw DepotError.notFound("app \(id)") }
        return try LockedFile.update(PackKeys.self, at: folder.packKeys(id), mode: 0o600) { stored in
            guard var keys = stored else { throw KeyError.malformed("\(folder.packKeys(id)) is missing") }
            var keyID = KeyRing.newKeyID()
            while keys.keys[keyID] != nil { keyID = KeyRing.newKeyID() }
            keys.keys[keyID] = Data(SecureRandom.bytes(32)).base64EncodedString()
            keys.current = keyID
            stored = keys
            return keyID
        }
    }
}

struct PackKeys: Codable {
    var current: String
    var keys: [String: String]
}
