import DepotCore
import Foundation
import Synchronization

/// The App Attest keys the origin accepted, a small file each: `apps/<app>/attest/<keyIdHex>.json`
/// (``StoredKey``). The origin stores them (`POST …/attest/keys`) and advances their counters
/// (attested reports); `depot attest list` and `depot attest revoke` read and change them beside
/// a running origin. Every change is a read-modify-write under the file's lock (``LockedFile``),
/// written atomically and durably through the crash-point seam, so a revocation and a counter
/// change made at once both hold. Assertion counters are not in these files after the
/// attestation: they go to one append-only journal per app (``advance(app:keyID:to:)``). The folder goes with its app (backups copy it, a restore
/// brings it back, `depot apps remove` removes it).
///
/// Lookups are cached in memory (``FileStampCache``: bounded, one `stat` per lookup), so a key
/// changed by another process (a revocation) is seen at its next use, and an unknown key id,
/// which nothing caches, costs a `stat` and no read.
public final class AttestedKeys: Sendable {
    let folder: DataFolder
    private let cache: FileStampCache<StoredKey>
    /// Each app's counter journal, once read (``advance(app:keyID:to:)``).
    let journals = Mutex<[String: CounterJournal]>([:])
    /// (key, channel, release) triples that counted as attested (``firstReport(app:keyID:channel:release:)``).
    let reported = Mutex<Set<CounterJournal.Digest>>([])

    /// A journal is compacted once it is larger than this and twice its last compacted size.
    let compactAbove: Int64

    public init(folder: DataFolder, cached: Int = 16_384, compactAbove: Int64 = 1 << 20) {
        self.folder = folder
        self.compactAbove = compactAbove
        cache = FileStampCache(relativeTo: folder.apps, limit: cached)
    }

    func path(app: String, keyID: [UInt8]) -> String { folder.attestedKeys(app) + "/" + Hex.encode(keyID) + ".json" }

    /// The key `keyID` of `app`, revoked or not; nil when the origin never accepted it.
    public func key(app: String, keyID: [UInt8]) throws -> StoredKey? {
        guard Identifier.isValidApp(app), keyID.count == 32 else { return nil }
        if let stored = cache.value(for: app + "/" + Hex.encode(keyID), path: { path(app: app, keyID: keyID) }, load: { try StoredJSON.read(StoredKey.self, from: $0) }) {
            return stored
        }
        // A key file that is there and cannot be read (reported on /healthz) is no unknown key:
        // the device would throw its genuine key away.
        let file = path(app: app, keyID: keyID)
        guard !FileSystem.exists(file) else {
            throw DepotError(.failure, "attested_key_unreadable", "\(file) cannot be read now; the report was not counted (the origin's /healthz names the file)")
        }
        return nil
    }

    /// Stores a key just attested, durably, before the origin answers for it; `409 key_known`
    /// when the key id is stored already (revoked or not: a revoked key cannot attest again).
    public func store(app: String, key: AttestedKey, at date: Date) throws {
        guard Identifier.isValidApp(app) else { throw DepotError.invalidID("app id") }
        // The folder made durable into the app's before a key file relies on it.
        try FileSystem.createDirectory(folder.attestedKeys(app))
        try LockedFile.update(StoredKey.self, at: path(app: app, keyID: key.keyID)) { stored in
            if let stored { throw Self.known(stored) }
            stored = StoredKey(key: key, counter: 0, attestedAt: date)
        }
    }

    static func known(_ stored: StoredKey) -> DepotError {
        DepotError.conflict("key_known", stored.isRevoked
            ? "key \(stored.keyID) was revoked and cannot attest again: generate a new key on the device"
            : "key \(stored.keyID) is attested already: sign reports with it, or generate a new key")
    }

    /// Revokes a key (`depot attest revoke`): the origin refuses its reports (`403
    /// attested_key_revoked`) from its next one. False when it was revoked already (the first
    /// date is kept); `404` when there is no such key.
    @discardableResult
    public func revoke(app: String, keyID: [UInt8], at date: Date) throws -> Bool {
        let path = path(app: app, keyID: keyID)
        guard Identifier.isValidApp(app), keyID.count == 32, FileSystem.exists(path) else { throw Self.unknown(app: app, keyID: keyID) }
        return try LockedFile.update(StoredKey.self, at: path) { stored in
            guard var key = stored else { throw Self.unknown(app: app, keyID: keyID) }
            guard key.revokedAt == nil else { return false }
            key.revokedAt = date
            stored = key
            return true
        }
    }

    static func unknown(app: String, keyID: [UInt8]) -> DepotError {
        DepotError(.notFound, "unknown_attested_key", "app \(app) has no attested key \(Data(keyID).base64EncodedString()) (see depot attest list)")
    }

    /// Every key of `app`, the oldest attested first, with its counter as the journal has it. A file that cannot be read fails the list
    /// (named in the error): a key the origin answered 2xx for is never silently left out.
    public func list(app: String) throws -> [StoredKey] {
        guard Identifier.isValidApp(app) else { throw DepotError.invalidID("app id") }
        let folder = folder.attestedKeys(app)
        // The counters from the journal (this process's, or the file as the writer left it).
        let journal = try journals.withLock({ $0[app] }) ?? CounterJournal.read(CounterJournal.path(self.folder, app))
        return try FileSystem.contents(of: folder).filter { $0.hasSuffix(".json") && !$0.hasPrefix(".tmp-") }.map { name in
            do {
                var key = try StoredJSON.read(StoredKey.self, from: folder + "/" + name)
                if let digest = CounterJournal.Digest(key.key.keyID), let counter = journal.counters[digest] { key.counter = max(key.counter, counter) }
                return key
            } catch {
                throw DepotError(.failure, "attested_key_unreadable", "\(folder)/\(name) cannot be read: \(error)")
            }
        }.sorted { ($0.attestedAt, $0.keyID) < ($1.attestedAt, $1.keyID) }
    }

    static func revoked(_ key: StoredKey) -> DepotError {
        DepotError(.forbidden, "attested_key_revoked", "key \(key.keyID) was revoked by the operator: its reports are not counted (generate and attest a new key)")
    }
}
