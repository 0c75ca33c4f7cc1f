import DepotCore
import Foundation

/// A day's counts on disk, in `apps/<app>/reports/`: a snapshot `<day>.json` (the day's
/// figures, plus `"log": g`, the last log generation it includes) and append-only logs
/// `<day>.<g>.log`, one JSON line per changed count (a delta). Each second the writer appends
/// the deltas of what changed and fsyncs: the cost follows what changed, not what the day
/// holds. When a log grows past the snapshot's size (or the day ends, or the origin stops), the
/// day is compacted: a new snapshot naming the log's generation is written atomically, then the
/// logs it includes are removed. A crash anywhere leaves either the old snapshot and its logs or
/// the new snapshot (logs it includes are ignored); a line cut short by a crash is skipped and
/// cut off before the next append.
enum ReportDayFile {
    /// Where the next append goes.
    struct Cursor: Sendable {
        /// The generation of the log appended to (one past the snapshot's when none was begun).
        var generation: Int
        /// The bytes of that log that hold whole lines (0 when it does not exist yet).
        var length: Int64
        /// The bytes of the snapshot, to decide when to compact.
        var snapshotBytes: Int64

        /// Where appends go after a compaction that threw: a generation no snapshot includes.
        var afterFailedCompaction: Cursor { Cursor(generation: generation + 1, length: 0, snapshotBytes: snapshotBytes) }
    }

    /// One line of a log: a count's delta (`pack` set) or a channel's reports' delta (with
    /// `attested`: its attested reports' delta). `attested` is absent from unattested counts,
    /// so their lines keep the bytes they had before reports could be attested.
    struct Line: Codable {
        var channel: String
        var reports: Int64?
        var release: Int?
        var pack: String?
        var revision: Int?
        var outcome: DeviceReport.Outcome?
        var error: String?
        var count: Int64?
        var bytes: Int64?
        /// A pack key ring's delta (``KeyRingCounts``): the ring, with `count`.
        var packKeys: String?
        /// A manifest key ring's delta.
        var manifestKeys: String?
        /// True on an attested count's delta, or on a channel's attested reports' delta.
        var attested: Bool?
    }

    private struct SnapshotMark: Decodable { var log: Int? }

    static func snapshotPath(_ folder: String, _ day: String) -> String { folder + "/" + day + ".json" }
    static func logPath(_ folder: String, _ day: String, _ generation: Int) -> String { folder + "/" + day + ".\(generation).log" }

    /// The generations of a day's logs in `names`.
    static func logGenerations(_ names: [String], day: String) -> [Int] {
        names.compactMap { name -> Int? in
            guard name.hasPrefix(day + "."), name.hasSuffix(".log") else { return nil }
            return Int(name.dropFirst(day.count + 1).dropLast(4))
        }.sorted()
    }

    /// Reads a file, or nil when there is none; any other failure (an I/O error, too many open
    /// files) is thrown: a day must never be taken as empty because it could not be read now.
    private static func readIfPresent(_ path: String, limit: Int) throws(SystemError) -> [UInt8]? {
        do {
            return try FileSystem.readFile(path, limit: limit)
        } catch {
            if error.errno == ENOENT { return nil }
            throw error
        }
    }

    /// Reads a day back: the snapshot, then every log past it. A snapshot that is not the
    /// day's JSON is moved aside (`<day>.json.unreadable`, or `.unreadable.N` beside an earlier
    /// one: never overwritten) and reported through `unreadable`; counting goes on from the
    /// logs. A file that cannot be read now (not a missing one) throws.
    static func load(folder: String, day: String, unreadable: (String) -> Void) throws(SystemError) -> ReportDay {
        try load(folder: folder, day: day, moveAside: true, unreadable: unreadable)
    }

    /// Reads a day back and changes nothing (an unreadable snapshot counts as empty).
    static func read(folder: String, day: String) throws(SystemError) -> ReportDay {
        try load(folder: folder, day: day, moveAside: false) { _ in }
    }

    private static func load(folder: String, day: String, moveAside: Bool, unreadable: (String) -> Void) throws(SystemError) -> ReportDay {
        let snapshot = snapshotPath(folder, day)
        var figures = DayFigures(day: day)
        var through = 0
        var snapshotBytes: Int64 = 0
        if let bytes = try readIfPresent(snapshot, limit: 256 << 20) {
            if let read = try? StoredJSON.decoder.decode(DayFigures.self, from: Data(bytes)),
               let mark = try? StoredJSON.decoder.decode(SnapshotMark.self, from: Data(bytes)) {
                figures = read
                through = mark.log ?? 0
                snapshotBytes = Int64(bytes.count)
            } else if moveAside {
                var aside = snapshot + ".unreadable"
                var number = 1
                while FileSystem.exists(aside) {
                    number += 1
                    aside = snapshot + ".unreadable.\(number)"
                }
                try? FileSystem.durableRename(snapshot, to: aside)
                unreadable(aside)
            }
        }
        var day = ReportDay(day: day, file: Cursor(generation: through + 1, length: 0, snapshotBytes: snapshotBytes))
        day.load(figures)
        for generation in logGenerations(FileSystem.contents(of: folder), day: day.day) where generation > through {
            guard let bytes = try readIfPresent(logPath(folder, day.day, generation), limit: 1 << 30) else { continue }
            var whole = 0
            var start = 0
            for (index, byte) in bytes.enumerated() where byte == 10 {
                defer { start = index + 1 }
                guard let line = try? StoredJSON.decoder.decode(Line.self, from: Data(bytes[start..<index])) else { continue }
                apply(line, to: &day)
                whole = index + 1
            }
            if whole < start { whole = start }
            day.file = Cursor(generation: generation, length: Int64(whole), snapshotBytes: snapshotBytes)
        }
        return day
    }

    private static func apply(_ line: Line, to day: inout ReportDay) {
        if let reports = line.reports, reports >= 0 {
            guard Identifier.isValidChannel(line.channel) else { return }
            if line.attested == true { day.loadAttestedReports(line.channel, reports) } else { day.loadReports(line.channel, reports) }
            return
        }
        if let ring = line.packKeys ?? line.manifestKeys {
            guard Identifier.isValidChannel(line.channel), ring.utf8.count <= KeyRingCounts.longestRing, let count = line.count, count >= 0 else { return }
            day.loadRing(KeyRingCounts.Key(kind: line.packKeys != nil ? .pack : .manifest, channel: line.channel, ring: ring), count)
            return
        }
        guard let release = line.release, let pack = line.pack, let revision = line.revision, let outcome = line.outcome,
              let count = line.count, let bytes = line.bytes, count >= 0, bytes >= 0 else { return }
        let key = DayFigures.Key(channel: line.channel, release: release, pack: pack, revision: revision, outcome: outcome, error: line.error, attested: line.attested)
        day.load(key, ReportCounts(count: count, bytes: bytes))
    }

    /// Appends what changed since the last append to the day's log and fsyncs it; the pending
    /// deltas are cleared only once that succeeded.
    static func append(_ day: inout ReportDay, folder: String) throws {
        day.file = try append(
            reports: day.pendingReports, attestedReports: day.pendingAttestedReports, counts: day.pendingCounts, rings: day.pendingRings, day: day.day,
            cursor: day.file, folder: folder
        )
        day.pendingReports = [:]
        day.pendingAttestedReports = [:]
        day.pendingCounts = [:]
        day.pendingRings = [:]
    }

    /// Appends deltas to a day's log at `cursor` (cutting off first whatever a crash left past
    /// its last whole line) and fsyncs it; returns where the next append goes.
    static func append(
        reports: [String: Int64], attestedReports: [String: Int64] = [:], counts: [DayFigures.Key: ReportCounts], rings: [KeyRingCounts.Key: Int64] = [:],
        day: String, cursor: Cursor, folder: String
    ) throws -> Cursor {
        guard !reports.isEmpty || !attestedReports.isEmpty || !counts.isEmpty || !rings.isEmpty else { return cursor }
        var out: [UInt8] = []
        for (channel, count) in reports.sorted(by: { $0.key < $1.key }) {
            out += try StoredJSON.compact.encode(Line(channel: channel, reports: count)) + [10]
        }
        for (channel, count) in attestedReports.sorted(by: { $0.key < $1.key }) {
            out += try StoredJSON.compact.encode(Line(channel: channel, reports: count, attested: true)) + [10]
        }
        for (key, value) in counts {
            out += try StoredJSON.compact.encode(Line(
                channel: key.channel, release: key.release, pack: key.pack, revision: key.revision, outcome: key.outcome, error: key.error,
                count: value.count, bytes: value.bytes, attested: key.attested == true ? true : nil
            )) + [10]
        }
        for (key, count) in rings {
            out += try StoredJSON.compact.encode(Line(
                channel: key.channel, count: count, packKeys: key.kind == .pack ? key.ring : nil, manifestKeys: key.kind == .manifest ? key.ring : nil
            )) + [10]
        }
        let path = logPath(folder, day, cursor.generation)
        let fresh = !FileSystem.exists(path)
        if fresh { try FileSystem.createDirectory(folder) }
        let file = try FileDescriptor(path: path, flags: O_WRONLY | O_CREAT | O_CLOEXEC, mode: 0o644)
        defer { try? file.close() }
        if !fresh, try file.size() != cursor.length { try file.truncate(to: cursor.length) }
        try file.seek(to: cursor.length)
        try file.write(out)
        try file.sync()
        if fresh { try FileSystem.syncDirectory(folder) }
        var next = cursor
        next.length += Int64(out.count)
        return next
    }

    /// Whether the log has grown enough that a compaction pays.
    static func wantsCompaction(_ day: ReportDay) -> Bool {
        day.file.length > max(1 << 20, 2 * day.file.snapshotBytes)
    }

    /// Writes the day's whole figures as the snapshot that includes every log up to the one
    /// appended to, then removes those logs; the next append begins a new generation. Call
    /// right after ``append(_:folder:)`` (nothing pending).
    static func compact(_ day: inout ReportDay, folder: String) throws {
        guard !day.hasPending else { return }
        day.file = try compact(day.figures, cursor: day.file, folder: folder)
    }

    /// Writes `figures` — everything the logs up to `cursor` hold, and nothing after — as the
    /// day's snapshot naming that generation, then removes those logs; returns the cursor of a
    /// new generation. When it throws, the snapshot may still have been renamed into place (its
    /// folder's fsync failed): the caller then appends to a new generation all the same
    /// (``Cursor/afterFailedCompaction``), since the snapshot may include the current one.
    static func compact(_ figures: DayFigures, cursor: Cursor, folder: String) throws -> Cursor {
        let day = figures.day
        let generation = cursor.length > 0 || FileSystem.exists(logPath(folder, day, cursor.generation)) ? cursor.generation : cursor.generation - 1
        struct Snapshot: Encodable {
            var figures: DayFigures
            var log: Int
            func encode(to encoder: any Encoder) throws {
                try figures.encode(to: encoder)
                enum Keys: String, CodingKey { case log }
                var container = encoder.container(keyedBy: Keys.self)
                try container.encode(log, forKey: .log)
            }
        }
        let bytes = Array(try StoredJSON.compact.encode(Snapshot(figures: figures, log: generation))) + [10]
        try FileSystem.createDirectory(folder)
        try FileSystem.writeAtomically(bytes, to: snapshotPath(folder, day))
        for old in logGenerations(FileSystem.contents(of: folder), day: day) where old <= generation {
            FileSystem.remove(logPath(folder, day, old))
        }
        return Cursor(generation: generation + 1, length: 0, snapshotBytes: Int64(bytes.count))
    }

    /// Removes every file of days before `oldest`; returns those days.
    static func removeDays(before oldest: String, folder: String) -> Set<String> {
        var days = Set<String>()
        for name in FileSystem.contents(of: folder) {
            let day = String(name.prefix(10))
            guard DayFigures.isDay(day), day < oldest, name.count > 10, name.utf8[name.utf8.index(name.utf8.startIndex, offsetBy: 10)] == UInt8(ascii: ".") else { continue }
            FileSystem.remove(folder + "/" + name)
            days.insert(day)
        }
        return days
    }
}
