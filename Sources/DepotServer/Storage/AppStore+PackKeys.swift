import DepotCore
import Foundation

/// What each of an app's pack keys is for (`keys/<app>.json`): the current key encrypts new
/// packs; staged keys are handed out in builds (``AppStore/clientConfiguration(_:)``) before any
/// pack uses them; retired keys encrypt no new pack, and stay in the ring for the packs (and
/// patches) already encrypted under them.
public struct PackKeyStates: Sendable, Hashable {
    /// The key new packs are encrypted with.
    public var current: String
    /// Keys builds carry that no pack uses yet, in the order they were added: the first becomes
    /// current when the current key is retired.
    public var staged: [String]
    /// Keys no longer used for new packs, sorted: every key of the file that is neither current
    /// nor staged (the file's first form recorded no retirement).
    public var retired: [String]
    /// When each key was retired, for those retired by `depot keys retire`.
    public var retiredAt: [String: Date]

    /// What a key is for; nil for an id the app lacks.
    public func state(of id: String) -> PackKeyState? {
        if id.utf8.elementsEqual(current.utf8) { return .current }
        if staged.contains(where: { $0.utf8.elementsEqual(id.utf8) }) { return .staged }
        return retired.contains(where: { $0.utf8.elementsEqual(id.utf8) }) ? .retired : nil
    }
}

/// What one pack key is for.
public enum PackKeyState: String, Sendable, Hashable {
    /// Builds carry it; no pack uses it yet.
    case staged
    /// New packs are encrypted with it.
    case current
    /// No new pack uses it; packs already encrypted under it keep it.
    case retired
}

/// What `depot keys retire` did.
public struct PackKeyRetirement: Sendable, Hashable {
    /// The key retired (or, when it was staged, dropped).
    public var keyID: String
    /// Whether it was a staged key, dropped: no pack ever used it.
    public var wasStaged: Bool
    /// The key new packs are encrypted with from now on.
    public var current: String
    /// Whether the new current key was made fresh (no key was staged): no build carries it.
    public var fresh: Bool
}

extension AppStore {
    /// The app's pack key ring (every key: current, staged and retired, which older packs and
    /// patches need) and the id new packs are encrypted with.
    public func packKeys(_ id: String) throws -> (ring: KeyRing, current: String) {
        let stored = try storedPackKeys(id)
        return (try stored.ring(), stored.current)
    }

    /// What each of the app's pack keys is for.
    public func packKeyStates(_ id: String) throws -> PackKeyStates { try storedPackKeys(id).states }

    /// The app's key file, read once and checked.
    func storedPackKeys(_ id: String) throws -> PackKeys {
        let stored = try StoredJSON.read(PackKeys.self, from: folder.packKeys(id))
        try stored.check(folder.packKeys(id))
        return stored
    }

    /// Adds the next pack key as staged: builds exported from now on carry it, no pack uses it
    /// until the current key is retired (``retirePackKey(_:keyID:allowFresh:now:)``). Returns its id.
    @discardableResult
    public func rotatePackKey(_ id: String) throws -> String {
        guard settings(id) != nil else { throw DepotError.notFound("app \(id)") }
        return try LockedFile.update(PackKeys.self, at: folder.packKeys(id), mode: 0o600) { stored in
            guard var keys = stored else { throw KeyError.malformed("\(folder.packKeys(id)) is missing") }
            try keys.check(folder.packKeys(id))
            let keyID = keys.addKey()
            keys.staged = (keys.staged ?? []) + [keyID]
            keys.format = PackKeys.format
            try folder.raiseFormat(to: 2)
            stored = keys
            return keyID
        }
    }

    /// Retires `keyID`, under the key file's lock (a running origin reads the file for every
    /// pack: the next one uses the new current key).
    ///
    /// - The current key: the oldest staged key becomes current; with none staged a fresh key
    ///   does — only with `allowFresh`, since no build in the field holds it (a leaked key).
    /// - A staged key: dropped (never used for a pack; builds that carry it are unaffected).
    /// - A key the app lacks, or one already retired: refused, nothing changed.
    @discardableResult
    public func retirePackKey(_ id: String, keyID: String, allowFresh: Bool, now: Date = WallClock.now()) throws -> PackKeyRetirement {
        guard settings(id) != nil else { throw DepotError.notFound("app \(id)") }
        return try LockedFile.update(PackKeys.self, at: folder.packKeys(id), mode: 0o600) { stored in
            guard var keys = stored else { throw KeyError.malformed("\(folder.packKeys(id)) is missing") }
            try keys.check(folder.packKeys(id))
            let states = keys.states
            switch states.state(of: keyID) {
            case .current:
                var staged = keys.staged ?? []
                let fresh = staged.isEmpty
                if fresh {
                    guard allowFresh else {
                        throw DepotError.conflict("no_staged_key", """
                            no key is staged for app \(id): retiring \(keyID), the current key, makes a fresh key current at once, \
                            and no build in the field can read packs published from then on. If \(keyID) leaked, run again with --yes; \
                            otherwise stage the next key first (depot keys rotate --app \(id)), ship builds with it, then retire \(keyID). Nothing changed
                            """)
                    }
                    staged = [keys.addKey()]
                }
                keys.current = staged.removeFirst()
                keys.staged = staged
                keys.retired = (keys.retired ?? [:]).merging([keyID: now]) { $1 }
                keys.format = PackKeys.format
                try folder.raiseFormat(to: 2)
                stored = keys
                return PackKeyRetirement(keyID: keyID, wasStaged: false, current: keys.current, fresh: fresh)
            case .staged:
                keys.staged = (keys.staged ?? []).filter { !$0.utf8.elementsEqual(keyID.utf8) }
                keys.keys[keyID] = nil
                keys.format = PackKeys.format
                try folder.raiseFormat(to: 2)
                stored = keys
                return PackKeyRetirement(keyID: keyID, wasStaged: true, current: keys.current, fresh: false)
            case .retired:
                let when = states.retiredAt[keyID].map { " on " + ISO8601DateFormatter().string(from: $0) } ?? ""
                throw DepotError.conflict("key_retired", "pack key \(keyID) of app \(id) is already retired\(when); nothing changed")
            case nil:
                throw DepotError(.notFound, "not_found", "app \(id) has no pack key \(keyID.prefix(80)) (depot keys list --app \(id) lists its keys); nothing changed")
            }
        }
    }
}

/// `keys/<app>.json` (mode 0600). Its first form is `{"current", "keys"}`; the second adds
/// `"format": 2`, `"staged"` and `"retired"` (read by this version, and by older ones, which
/// see only the current key and the ring). See the PackKeys article of DepotCore's documentation.
struct PackKeys: Codable {
    /// The form this version writes.
    static let format = 2
    /// Absent in the first form.
    var format: Int?
    var current: String
    /// Every key, by id, base64.
    var keys: [String: String]
    /// Staged keys, oldest first (absent in the first form: none).
    var staged: [String]?
    /// When keys were retired by `depot keys retire` (absent in the first form).
    var retired: [String: Date]?

    /// Refuses a file this version cannot read whole or whose states do not name its keys.
    func check(_ path: String) throws {
        guard (format ?? 1) <= Self.format else {
            throw KeyError.malformed("\(path) is of form \(format ?? 1), newer than this depot reads (\(Self.format)): run the newer depot")
        }
        guard keys[current] != nil else { throw KeyError.malformed("current key \(current) is missing") }
        for id in staged ?? [] where keys[id] == nil || id == current { throw KeyError.malformed("\(path): staged key \(id) is missing or current") }
    }

    /// Every key, as a key ring.
    func ring() throws -> KeyRing {
        var ring = try KeyRing([String: [UInt8]]())
        for (keyID, text) in keys {
            guard let data = Data(base64Encoded: text) else { throw KeyError.invalidKey(keyID) }
            try ring.insert(Array(data), id: keyID)
        }
        return ring
    }

    var states: PackKeyStates {
        let staged = self.staged ?? []
        let retired = keys.keys.filter { $0 != current && !staged.contains($0) }.sorted()
        return PackKeyStates(current: current, staged: staged, retired: retired, retiredAt: (self.retired ?? [:]).filter { keys[$0.key] != nil })
    }

    /// Adds a fresh random key to the ring; returns its id.
    mutating func addKey() -> String {
        var keyID = KeyRing.newKeyID()
        while keys[keyID] != nil { keyID = KeyRing.newKeyID() }
        keys[keyID] = Data(SecureRandom.bytes(32)).base64EncodedString()
        return keyID
    }
}
