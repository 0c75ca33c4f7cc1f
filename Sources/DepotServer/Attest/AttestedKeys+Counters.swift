import DepotCore
import Foundation
import Synchronization

/// One app's assertion counters: `apps/<app>/attest/counters.log`, a line `<key id hex> <counter>`
/// per raise, appended once a pass with one fsync whatever the number of keys, and compacted (one
/// line per key, written atomically) when it has grown past twice its last compacted size. In
/// memory: the highest counter per key (read at the app's first attested report), what is raised
/// and not written yet, and how much of the file holds whole lines (a line a crash cut short is cut
/// off before the next append).
struct CounterJournal: Sendable {
    /// A key id's 32 bytes, as a small hashable value (no allocation per key).
    struct Digest: Hashable, Sendable {
        var a: UInt64, b: UInt64, c: UInt64, d: UInt64
        init?(_ bytes: [UInt8]) {
            guard bytes.count == 32 else { return nil }
            func word(_ at: Int) -> UInt64 { bytes[at..<at + 8].reduce(0) { $0 << 8 | UInt64($1) } }
            (a, b, c, d) = (word(0), word(8), word(16), word(24))
        }
        var bytes: [UInt8] { [a, b, c, d].flatMap { word in (0..<8).reversed().map { UInt8(truncatingIfNeeded: word >> (8 * UInt64($0))) } } }
    }

    var counters: [Digest: UInt32] = [:]
    var pending: [Digest: UInt32] = [:]
    /// The bytes of whole lines in the file; and its size after the last compaction.
    var length: Int64 = 0
    var compacted: Int64 = 0

    static func path(_ folder: DataFolder, _ app: String) -> String { folder.attestedKeys(app) + "/counters.log" }

    /// Reads an app's journal (none: empty). Lines that are not `<64 hex> <counter>` are skipped;
    /// `length` stops at the last newline.
    static func read(_ path: String) throws -> CounterJournal {
        var journal = CounterJournal()
        let bytes: [UInt8]
        do {
            bytes = try FileSystem.readFile(path, limit: 1 << 30)
        } catch {
            if error.errno == ENOENT { return journal }
            throw error
        }
        var start = 0
        for (index, byte) in bytes.enumerated() where byte == 10 {
            let line = bytes[start..<index]
            start = index + 1
            guard line.count > 65, line[line.startIndex + 64] == 32,
                  let key = Hex.decode(String(decoding: line.prefix(64), as: UTF8.self)).flatMap(Digest.init),
                  let counter = UInt32(String(decoding: line.dropFirst(65), as: UTF8.self)) else { continue }
            journal.counters[key] = max(journal.counters[key] ?? 0, counter)
        }
        journal.length = Int64(start)
        journal.compacted = Int64(start)
        return journal
    }

    static func line(_ key: Digest, _ counter: UInt32) -> [UInt8] { Array((Hex.encode(key.bytes) + " \(counter)\n").utf8) }
}

extension AttestedKeys {
    /// Raises a key's counter to `counter` (an assertion's, already verified) for attested
    /// reports: false, changing nothing, when it does not exceed the highest one taken (a replayed
    /// or reordered assertion). Throws `403 attested_key_revoked` for a revoked key and `404
    /// unknown_attested_key` for one never stored.
    ///
    /// Cadence: the counter is raised in memory here (one lock, no I/O on the serving thread once
    /// the app's journal was read) and written by the report writer's next pass
    /// (``writeCounters()``, within a second), before that pass writes the counts of the reports
    /// it takes: a report's counts are never durable while its counter is not. A crash loses the
    /// last second's counters with the last second's counts, so an assertion replayed after it
    /// counts once, never twice. Each pass appends one line per raised key to the app's journal
    /// with one fsync, so a million devices reporting costs the writer a few bytes each, not an
    /// fsync each.
    public func advance(app: String, keyID: [UInt8], to counter: UInt32) throws -> Bool {
        guard let stored = try key(app: app, keyID: keyID) else { throw Self.unknown(app: app, keyID: keyID) }
        return try advance(app: app, stored: stored, to: counter)
    }

    /// ``advance(app:keyID:to:)`` for a key the caller looked up already (a report's: its key
    /// was read, one `stat`, before its assertion was checked; not looked up twice).
    func advance(app: String, stored: StoredKey, to counter: UInt32) throws -> Bool {
        guard let digest = CounterJournal.Digest(stored.key.keyID) else { throw Self.unknown(app: app, keyID: stored.key.keyID) }
        guard !stored.isRevoked else { throw Self.revoked(stored) }
        try loadJournal(app)
        return journals.withLock { journals in
            // Changed in place (a copy of the journal would copy every key's counter per report).
            guard let last = journals[app].map({ $0.counters[digest] ?? 0 }), counter > max(stored.counter, last) else { return false }
            journals[app]?.counters[digest] = counter
            journals[app]?.pending[digest] = counter
            return true
        }
    }

    /// Reads the app's journal once (outside the lock; the first reader's copy is kept).
    private func loadJournal(_ app: String) throws {
        guard journals.withLock({ $0[app] == nil }) else { return }
        let read = try CounterJournal.read(CounterJournal.path(folder, app))
        journals.withLock { journals in
            if journals[app] == nil { journals[app] = read }
        }
    }

    /// Writes the counters raised since the last pass: per app, one append and one fsync (and,
    /// when the journal has doubled since its last compaction, a compaction). Returns the apps
    /// whose counters could not be written (their counts wait for the next pass; the others go on).
    public func writeCounters() -> Set<String> {
        let due = journals.withLock { journals -> [(String, [CounterJournal.Digest: UInt32], Int64, Int64)] in
            var due: [(String, [CounterJournal.Digest: UInt32], Int64, Int64)] = []
            for (app, journal) in journals where !journal.pending.isEmpty {
                due.append((app, journal.pending, journal.length, journal.compacted))
                journals[app]?.pending = [:]
            }
            return due
        }
        var failed = Set<String>()
        for (app, pending, length, compacted) in due {
            let path = CounterJournal.path(folder, app)
            var out: [UInt8] = []
            for (key, counter) in pending { out += CounterJournal.line(key, counter) }
            do {
                let fresh = !FileSystem.exists(path)
                let file = try FileDescriptor(path: path, flags: O_WRONLY | O_CREAT | O_CLOEXEC, mode: 0o644)
                defer { try? file.close() }
                if !fresh, try file.size() != length { try file.truncate(to: length) }
                try file.seek(to: length)
                try file.write(out)
                try file.sync()
                if fresh { try FileSystem.syncDirectory(folder.attestedKeys(app)) }
                var written = length + Int64(out.count)
                var base = compacted
                if written > max(compactAbove, 2 * compacted) {
                    let all = journals.withLock { $0[app]?.counters ?? [:] }
                    let snapshot = all.sorted { ($0.key.a, $0.key.b, $0.key.c, $0.key.d) < ($1.key.a, $1.key.b, $1.key.c, $1.key.d) }.flatMap { CounterJournal.line($0.key, $0.value) }
                    try FileSystem.writeAtomically(snapshot, to: path)
                    (written, base) = (Int64(snapshot.count), Int64(snapshot.count))
                }
                journals.withLock { journals in
                    journals[app]?.length = written
                    journals[app]?.compacted = base
                }
            } catch {
                failed.insert(app)
                // Tried again at the next pass (the higher of what waits, per key).
                journals.withLock { journals in
                    for (key, counter) in pending where counter > (journals[app]?.pending[key] ?? 0) { journals[app]?.pending[key] = counter }
                }
            }
        }
        return failed
    }

    /// Whether this is the key's first attested report about `release` of `channel` (since the
    /// origin started): the guard's attested figures count devices, not signatures. Remembered in
    /// memory, at most ``reportMarks`` pairs (then it starts over, as after a restart: a device may
    /// then count twice for one release).
    func firstReport(app: String, keyID: [UInt8], channel: String, release: Int) -> Bool {
        let digest = SHA256Hasher.hash(Array("\(app)\u{0}\(channel)\u{0}\(release)\u{0}".utf8) + keyID)
        guard let mark = CounterJournal.Digest(digest) else { return true }
        return reported.withLock { marks in
            if marks.count >= Self.reportMarks { marks.removeAll(keepingCapacity: true) }
            return marks.insert(mark).inserted
        }
    }

    static let reportMarks = 1_000_000
}
