import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// The origin's App Attest state: the attested keys on disk (``AttestedKeys``) and the challenges
/// in memory (``AttestChallenges``), each with an injected clock where time matters.
@Suite("App Attest: the key store and the challenges")
struct AttestStoreTests {
    static let app = "com.example.attest"

    static func key(_ seed: UInt8, environment: AppAttestEnvironment = .production) -> AttestedKey {
        let publicKey = [4] + [UInt8](repeating: seed, count: 64)
        return AttestedKey(keyID: SHA256Hasher.hash(publicKey), publicKey: publicKey, environment: environment, receipt: [1, 2, 3, seed])
    }

    static func store() throws -> (TemporaryDirectory, AttestedKeys) {
        let data = TemporaryDirectory("depot-attest")
        let folder = DataFolder(data.path)
        try folder.prepare()
        try AppStore(folder: folder).create(app)
        return (data, AttestedKeys(folder: folder))
    }

    @Test("A stored key reads back with its bytes in its file; the same key id again is 409 key_known, revoked or not; revoke keeps the first date")
    func storeAndRevoke() throws {
        let (data, keys) = try Self.store()
        defer { data.remove() }
        let first = Self.key(1), second = Self.key(2, environment: .development)
        let at = Date(timeIntervalSince1970: 1_800_000_000)
        try keys.store(app: Self.app, key: first, at: at)
        try keys.store(app: Self.app, key: second, at: at.addingTimeInterval(5))
        let file = data.path + "/apps/\(Self.app)/attest/" + Hex.encode(first.keyID) + ".json"
        let text = String(decoding: try FileSystem.readFile(file), as: UTF8.self)
        #expect(text.contains("\"keyId\" : \"\(Data(first.keyID).base64EncodedString())\""), "\(text)")
        #expect(text.contains("\"receipt\" : \"AQIDAQ==\"") && text.contains("\"counter\" : 0") && !text.contains("revokedAt"), "\(text)")
        #expect(try keys.key(app: Self.app, keyID: first.keyID) == StoredKey(key: first, counter: 0, attestedAt: at))
        #expect(try keys.list(app: Self.app).map(\.key) == [first, second])

        #expect(throws: DepotError.self) { try keys.store(app: Self.app, key: first, at: at) }
        do { try keys.store(app: Self.app, key: first, at: at) } catch let error as DepotError { #expect(error.code == "key_known") }

        let revokedAt = at.addingTimeInterval(60)
        #expect(try keys.revoke(app: Self.app, keyID: first.keyID, at: revokedAt) == true)
        #expect(try keys.revoke(app: Self.app, keyID: first.keyID, at: revokedAt.addingTimeInterval(60)) == false)
        // The cache sees the change made through the file (as a CLI's beside a running origin).
        #expect(try keys.key(app: Self.app, keyID: first.keyID)?.revokedAt == revokedAt)
        do {
            try keys.store(app: Self.app, key: first, at: at)
            Issue.record("a revoked key attested again")
        } catch let error as DepotError {
            #expect(error.code == "key_known" && error.message.contains("revoked"))
        }
        do {
            _ = try keys.revoke(app: Self.app, keyID: Self.key(9).keyID, at: at)
            Issue.record("an unknown key revoked")
        } catch let error as DepotError {
            #expect(error.code == "unknown_attested_key" && error.kind == .notFound)
        }
        #expect(try keys.key(app: Self.app, keyID: Self.key(9).keyID) == nil)
    }

    @Test("advance: only a rising counter is taken, in memory, and written by the writer's pass (writeCounters); a revoked key refuses it; a revocation and advances at once both hold")
    func advance() async throws {
        let (data, keys) = try Self.store()
        defer { data.remove() }
        let key = Self.key(3)
        try keys.store(app: Self.app, key: key, at: Date())
        #expect(try keys.advance(app: Self.app, keyID: key.keyID, to: 1) == true)
        #expect(try keys.advance(app: Self.app, keyID: key.keyID, to: 1) == false, "a replayed counter")
        #expect(try keys.advance(app: Self.app, keyID: key.keyID, to: 7) == true)
        #expect(try keys.advance(app: Self.app, keyID: key.keyID, to: 5) == false, "a lower counter")
        // Not on disk until the report writer's pass writes it (with the counts of the reports
        // it took): no fsync per report on a serving thread.
        #expect(try Self.listed(data, key.keyID)?.counter == 0)
        #expect(keys.writeCounters().isEmpty)
        // On disk, as a new store (another process) reads it; this store still refuses 7 and below.
        #expect(try Self.listed(data, key.keyID)?.counter == 7)
        #expect(try keys.advance(app: Self.app, keyID: key.keyID, to: 7) == false)
        #expect(keys.writeCounters().isEmpty)
        #expect(try keys.advance(app: Self.app, keyID: key.keyID, to: 6) == false, "a lower counter, after the write")
        do {
            _ = try keys.advance(app: Self.app, keyID: Self.key(8).keyID, to: 1)
            Issue.record("an unknown key advanced")
        } catch let error as DepotError {
            #expect(error.code == "unknown_attested_key")
        }

        // Many advances from threads and a revocation in the middle: the highest counter taken
        // before the revocation is kept, and so is the revocation.
        let other = Self.key(4)
        try keys.store(app: Self.app, key: other, at: Date())
        let accepted = await withTaskGroup(of: UInt32?.self) { group in
            for counter in UInt32(1)...64 {
                group.addTask {
                    if counter == 32 { _ = try? keys.revoke(app: Self.app, keyID: other.keyID, at: Date()) }
                    return (try? keys.advance(app: Self.app, keyID: other.keyID, to: counter)) == true ? counter : nil
                }
            }
            var all: [UInt32] = []
            for await counter in group { if let counter { all.append(counter) } }
            return all
        }
        #expect(keys.writeCounters().isEmpty)
        let stored = try #require(try Self.listed(data, other.keyID))
        #expect(stored.revokedAt != nil, "the revocation was lost to an advance")
        #expect(stored.counter == (accepted.max() ?? 0), "the stored counter is the highest accepted")
        do {
            _ = try keys.advance(app: Self.app, keyID: other.keyID, to: 1_000)
            Issue.record("a revoked key advanced")
        } catch let error as DepotError {
            #expect(error.code == "attested_key_revoked" && error.kind == .forbidden)
        }
    }

    /// A key as `depot attest list` reads it (a new store: another process), its counter the journal's.
    static func listed(_ data: TemporaryDirectory, _ keyID: [UInt8]) throws -> StoredKey? {
        try AttestedKeys(folder: DataFolder(data.path)).list(app: app).first { $0.key.keyID == keyID }
    }

    @Test("The counter journal: one append per pass for any number of keys; a line a crash cut short is skipped and cut off; compacted once it doubles; a restarted store refuses what was written and takes what rises")
    func counterJournal() throws {
        let data = TemporaryDirectory("depot-attest")
        defer { data.remove() }
        let folder = DataFolder(data.path)
        try folder.prepare()
        try AppStore(folder: folder).create(Self.app)
        let keys = AttestedKeys(folder: folder, compactAbove: 512)
        let all = (10..<30).map { Self.key(UInt8($0)) }
        for key in all { try keys.store(app: Self.app, key: key, at: Date()) }
        for key in all { #expect(try keys.advance(app: Self.app, keyID: key.keyID, to: 5)) }
        #expect(keys.writeCounters().isEmpty)
        let path = folder.attestedKeys(Self.app) + "/counters.log"
        let lines = String(decoding: try FileSystem.readFile(path), as: UTF8.self).split(separator: "\n")
        #expect(lines.count == 20 && lines.allSatisfy { $0.hasSuffix(" 5") && $0.count == 66 }, "\(lines)")
        // A crash cut the next append short: a torn line at the end.
        let torn = try FileSystem.readFile(path) + Array((Hex.encode(all[0].keyID) + " 9").utf8)
        try FileSystem.writeAtomically(torn, to: path)
        let restarted = AttestedKeys(folder: folder, compactAbove: 512)
        #expect(try restarted.list(app: Self.app).map(\.counter) == Array(repeating: 5, count: 20), "the torn line (9) is not taken")
        #expect(try restarted.advance(app: Self.app, keyID: all[0].keyID, to: 5) == false, "a written counter is refused after a restart")
        #expect(try restarted.advance(app: Self.app, keyID: all[0].keyID, to: 6))
        #expect(restarted.writeCounters().isEmpty)
        let after = String(decoding: try FileSystem.readFile(path), as: UTF8.self)
        #expect(after.hasSuffix(Hex.encode(all[0].keyID) + " 6\n") && !after.contains(" 9"), "the torn tail was cut off before the append")
        // Grown past twice its compacted size: one line per key again.
        for round in UInt32(7)...40 {
            #expect(try restarted.advance(app: Self.app, keyID: all[1].keyID, to: round))
            #expect(restarted.writeCounters().isEmpty)
        }
        let compacted = String(decoding: try FileSystem.readFile(path), as: UTF8.self).split(separator: "\n")
        #expect(compacted.count < 20 + 1 + 34, "\(compacted.count) lines: never compacted")
        let final = try AttestedKeys(folder: folder).list(app: Self.app)
        #expect(final.first { $0.key.keyID == all[0].keyID }?.counter == 6 && final.first { $0.key.keyID == all[1].keyID }?.counter == 40)
    }

    @Test("A challenge is used once, for its app only, before it expires (an injected clock: no waiting)")
    func challengesOnce() throws {
        let challenges = AttestChallenges(lifetime: .seconds(300))
        let t0 = ContinuousClock.now
        let first = try challenges.issue(app: "a", address: "10.0.0.1", now: t0)
        #expect(first.count == 32)
        #expect(challenges.take(first, app: "a", now: t0 + .seconds(1)))
        #expect(!challenges.take(first, app: "a", now: t0 + .seconds(2)), "used twice")

        let other = try challenges.issue(app: "a", address: "10.0.0.1", now: t0)
        #expect(!challenges.take(other, app: "b", now: t0), "another app's challenge")
        #expect(!challenges.take(other, app: "a", now: t0), "tried once for the wrong app, it is gone")

        let late = try challenges.issue(app: "a", address: "10.0.0.1", now: t0)
        #expect(!challenges.take(late, app: "a", now: t0 + .seconds(300)), "expired at its lifetime")
        let justInTime = try challenges.issue(app: "a", address: "10.0.0.1", now: t0)
        #expect(challenges.take(justInTime, app: "a", now: t0 + .seconds(299)))
        #expect(!challenges.take(SecureRandom.bytes(32), app: "a", now: t0), "never issued")
        #expect(challenges.count == 0)
    }

    @Test("Challenges are bounded per address and in all, with the seconds until the oldest expires; expired ones free their places")
    func challengeBounds() throws {
        let challenges = AttestChallenges(lifetime: .seconds(300), perAddress: 4, total: 10)
        let t0 = ContinuousClock.now
        for index in 0..<4 { _ = try challenges.issue(app: "a", address: "10.0.0.1", now: t0 + .seconds(index)) }
        #expect(throws: AttestChallenges.Refusal.address(retryAfter: 290)) { try challenges.issue(app: "a", address: "10.0.0.1", now: t0 + .seconds(10)) }
        for index in 0..<6 { _ = try challenges.issue(app: "a", address: "10.0.1.\(index)", now: t0 + .seconds(20)) }
        #expect(throws: AttestChallenges.Refusal.full(retryAfter: 280)) { try challenges.issue(app: "a", address: "10.0.2.1", now: t0 + .seconds(20)) }
        // The first address's oldest challenge expires: a place for it, and one in all.
        let again = try challenges.issue(app: "a", address: "10.0.0.1", now: t0 + .seconds(300))
        #expect(challenges.take(again, app: "a", now: t0 + .seconds(301)))
        // All expired: every place is free again, and nothing is kept.
        _ = try challenges.issue(app: "a", address: "10.0.2.1", now: t0 + .seconds(700))
        #expect(challenges.count == 1)
    }
}

extension AttestStoreTests {
    @Test("Attested keys go with their app: a backup copies them, a restore brings them back, removing the app removes them")
    func backupRestoreRemove() throws {
        let (data, keys) = try Self.store()
        defer { data.remove() }
        let work = TemporaryDirectory("depot-attest-backup")
        defer { work.remove() }
        let key = Self.key(5)
        try keys.store(app: Self.app, key: key, at: Date(timeIntervalSince1970: 1_800_000_000))
        _ = try keys.revoke(app: Self.app, keyID: key.keyID, at: Date(timeIntervalSince1970: 1_800_000_100))
        try keys.store(app: Self.app, key: Self.key(6), at: Date(timeIntervalSince1970: 1_800_000_200))
        let before = try keys.list(app: Self.app)

        _ = try DataBackup.take(data: data.path, to: work.path + "/backup")
        _ = try DataRestore.restore(backup: work.path + "/backup", into: work.path + "/restored", replace: false)
        #expect(try AttestedKeys(folder: DataFolder(work.path + "/restored")).list(app: Self.app) == before)

        let folder = DataFolder(data.path)
        _ = try AppStore(folder: folder).remove(Self.app)
        #expect(!FileSystem.exists(folder.attestedKeys(Self.app)))
        #expect(try AttestedKeys(folder: folder).key(app: Self.app, keyID: key.keyID) == nil)
    }
}
