import DepotCore
import Foundation
import Synchronization

/// The App Attest keys the origin accepted, a small file each: `apps/<app>/attest/<keyIdHex>.json`
/// (``StoredKey``). The origin stores them (`POST …/attest/keys`) and advances their counters
/// (attested reports); `depot attest list` and `depot attest revoke` read and change them beside
/// a running origin. Every change is a read-modify-write under the file's lock (``LockedFile``),
/// written atomically and durably through the crash-point seam, so a revocation and a counter
/// write made at once both hold (counters are raised in memory and written each second:
/// ``advance(app:keyID:to:)``). The folder goes with its app (backups copy it, a restore
/// brings it back, `depot apps remove` removes it).
///
/// Lookups are cached in memory (``FileStampCache``: bounded, one `stat` per lookup), so a key
/// changed by another process (a revocation) is seen at its next use, and an unknown key id,
/// which nothing caches, costs a `stat` and no read.
public final class AttestedKeys: Sendable {
    let folder: DataFolder
    private let cache: FileStampCache<StoredKey>
    /// Counters raised by attested reports, by key file, until written and a while after (``advance(app:keyID:to:)``).
    private let raised = Mutex<[String: Raised]>([:])

    public init(folder: DataFolder, cached: Int = 16_384) {
        self.folder = folder
        cache = FileStampCache(relativeTo: folder.apps, limit: cached)
    }

    func path(app: String, keyID: [UInt8]) -> String { folder.attestedKeys(app) + "/" + Hex.encode(keyID) + ".json" }

    /// The key `keyID` of `app`, revoked or not; nil when the origin never accepted it.
    public func key(app: String, keyID: [UInt8]) throws -> StoredKey? {
        guard Identifier.isValidApp(app), keyID.count == 32 else { return nil }
        return cache.value(for: app + "/" + Hex.encode(keyID), path: { path(app: app, keyID: keyID) }) { try StoredJSON.read(StoredKey.self, from: $0) }
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

    /// Every key of `app`, the oldest attested first. A file that cannot be read fails the list
    /// (named in the error): a key the origin answered 2xx for is never silently left out.
    public func list(app: String) throws -> [StoredKey] {
        guard Identifier.isValidApp(app) else { throw DepotError.invalidID("app id") }
        let folder = folder.attestedKeys(app)
        return try FileSystem.contents(of: folder).filter { $0.hasSuffix(".json") && !DataBackup.skipped($0) }.map { name in
            do {
                return try StoredJSON.read(StoredKey.self, from: folder + "/" + name)
            } catch {
                throw DepotError(.failure, "attested_key_unreadable", "\(folder)/\(name) cannot be read: \(error)")
            }
        }.sorted { ($0.attestedAt, $0.keyID) < ($1.attestedAt, $1.keyID) }
    }

    /// Raises a key's counter to `counter` (an assertion's, already verified) for attested
    /// reports: false, changing nothing, when it does not exceed the highest one taken (a replayed
    /// or reordered assertion). Throws `403 attested_key_revoked` for a revoked key and `404
    /// unknown_attested_key` for one never stored.
    ///
    /// Cadence: the counter is raised in memory here (one lock, no I/O on the serving thread)
    /// and written by the report writer's next pass (``writeCounters()``, at most a second
    /// later), before that pass writes the counts of the reports it takes: a report's counts are
    /// never durable while its counter is not. A crash loses the last second's counters with the
    /// last second's counts, so an assertion replayed after it counts once, never twice. A
    /// genuine device making assertions as fast as it can therefore costs the origin a write per
    /// key per second, not an fsync per report on a serving thread (which would let one tenant's
    /// devices hold the threads every tenant's downloads are served from).
    public func advance(app: String, keyID: [UInt8], to counter: UInt32) throws -> Bool {
        guard let stored = try key(app: app, keyID: keyID) else { throw Self.unknown(app: app, keyID: keyID) }
        guard !stored.isRevoked else { throw Self.revoked(stored) }
        let path = path(app: app, keyID: keyID)
        return raised.withLock { raised in
            guard counter > max(stored.counter, raised[path]?.counter ?? 0) else { return false }
            raised[path] = Raised(counter: counter, written: false, at: .now)
            return true
        }
    }

    /// A counter raised in memory: whether it is written yet, and when it was raised.
    struct Raised {
        var counter: UInt32
        var written: Bool
        var at: ContinuousClock.Instant
    }

    /// Writes the counters raised since the last pass, each under its key file's lock (a
    /// revocation made meanwhile is kept). A counter stays in memory for ``raisedMemory`` after
    /// it is written, so that a report whose key was read from the file just before the write
    /// still meets it; the map holds what a few seconds of attested reports raised. Throws the
    /// first write that failed (the others are still tried; a failed one is tried again next pass).
    public func writeCounters() throws {
        let now = ContinuousClock.now
        let due = raised.withLock { raised -> [(String, UInt32)] in
            raised = raised.filter { !$0.value.written || now - $0.value.at < Self.raisedMemory }
            return raised.compactMap { $0.value.written ? nil : ($0.key, $0.value.counter) }
        }
        var failure: (any Error)?
        for (path, counter) in due {
            do {
                try LockedFile.update(StoredKey.self, at: path) { stored in
                    guard var key = stored, counter > key.counter else { return }
                    key.counter = counter
                    stored = key
                }
                raised.withLock { raised in
                    if raised[path]?.counter == counter { raised[path]?.written = true }
                }
            } catch {
                failure = failure ?? error
            }
        }
        if let failure { throw failure }
    }

    static let raisedMemory: Duration = .seconds(10)

    static func revoked(_ key: StoredKey) -> DepotError {
        DepotError(.forbidden, "attested_key_revoked", "key \(key.keyID) was revoked by the operator: its reports are not counted (generate and attest a new key)")
    }
}
