import DepotCore
import Foundation

/// One count's totals.
struct ReportCounts: Hashable, Sendable {
    var count: Int64 = 0
    var bytes: Int64 = 0

    mutating func add(count: Int64, bytes: Int64) {
        self.count = ReportBook.adding(self.count, count)
        self.bytes = ReportBook.adding(self.bytes, bytes)
    }
}

/// What the rollout guard sums about a candidate: reports that are not deferrals, the failures
/// among them, and the failures by kind — of every report, and apart, of the attested ones.
struct CandidateTally: Hashable, Sendable {
    /// One kind's figures.
    struct Figures: Hashable, Sendable {
        var reports: Int64 = 0
        var failures: Int64 = 0
        var byKind: [String: Int64] = [:]

        mutating func add(_ key: DayFigures.Key, count: Int64) {
            reports = ReportBook.adding(reports, count)
            if key.outcome == .failed {
                failures = ReportBook.adding(failures, count)
                byKind[key.error ?? "other", default: 0] = ReportBook.adding(byKind[key.error ?? "other", default: 0], count)
            }
        }

        mutating func add(_ other: Figures) {
            reports = ReportBook.adding(reports, other.reports)
            failures = ReportBook.adding(failures, other.failures)
            byKind.merge(other.byKind, uniquingKeysWith: ReportBook.adding)
        }
    }

    /// Every report's (attested ones included).
    var all = Figures()
    /// The attested reports' only.
    var attested = Figures()

    var reports: Int64 { all.reports }
    var failures: Int64 { all.failures }
    var byKind: [String: Int64] { all.byKind }

    /// What a guard counts: only the attested reports' figures when its rollout requires them.
    func counted(attestedOnly: Bool) -> Figures { attestedOnly ? attested : all }

    mutating func add(_ key: DayFigures.Key, count: Int64) {
        guard key.outcome != .deferred else { return }
        all.add(key, count: count)
        if key.attested == true { attested.add(key, count: count) }
    }

    mutating func add(_ other: CandidateTally) {
        all.add(other.all)
        attested.add(other.attested)
    }
}

/// One app's counts of one day in memory, as the writer thread keeps them: the totals, what
/// changed since the last append to the day's log, and an index by channel and pack revision
/// that the rollout guard reads without walking the rows. Adding a report costs the same
/// whatever the day already holds (hash lookups, no copy).
struct ReportDay: Sendable {
    let day: String
    var reports: [String: Int64] = [:]
    /// Attested reports per channel (among ``reports``).
    var attestedReports: [String: Int64] = [:]
    var counts: [DayFigures.Key: ReportCounts] = [:]
    /// Per `channel \0 pack@revision`, per release: what the guard sums.
    var byCandidate: [String: [Int: CandidateTally]] = [:]
    /// Reports per key ring, and how many rings are kept per kind and channel (and, under "", in all: ``KeyRingCounts``).
    var rings: [KeyRingCounts.Key: Int64] = [:]
    var ringsKept: [String: Int] = [:]
    /// What changed since the last append (deltas).
    var pendingReports: [String: Int64] = [:]
    var pendingAttestedReports: [String: Int64] = [:]
    var pendingCounts: [DayFigures.Key: ReportCounts] = [:]
    var pendingRings: [KeyRingCounts.Key: Int64] = [:]
    /// Whether the bucket's copy is behind.
    var bucketBehind = false
    var file: ReportDayFile.Cursor

    init(day: String, file: ReportDayFile.Cursor) {
        (self.day, self.file) = (day, file)
    }

    static func candidateKey(channel: String, pack: String, revision: Int) -> String { channel + "\u{0}" + pack + "@\(revision)" }

    /// Adds a total read back from disk (not pending).
    mutating func load(_ key: DayFigures.Key, _ value: ReportCounts) {
        let key = key.normalized
        counts[key, default: ReportCounts()].add(count: value.count, bytes: value.bytes)
        byCandidate[Self.candidateKey(channel: key.channel, pack: key.pack, revision: key.revision), default: [:]][key.release, default: CandidateTally()].add(key, count: value.count)
    }

    mutating func loadReports(_ channel: String, _ count: Int64) {
        reports[channel] = ReportBook.adding(reports[channel] ?? 0, count)
    }

    mutating func loadAttestedReports(_ channel: String, _ count: Int64) {
        attestedReports[channel] = ReportBook.adding(attestedReports[channel] ?? 0, count)
    }

    /// Adds a key ring's total read back from disk (not pending).
    mutating func loadRing(_ key: KeyRingCounts.Key, _ count: Int64) {
        if rings[key] == nil && key.ring != KeyRingCounts.other {
            ringsKept[key.kind.rawValue + "\u{0}" + key.channel, default: 0] += 1
            ringsKept["", default: 0] += 1
        }
        rings[key] = ReportBook.adding(rings[key] ?? 0, count)
    }

    /// Loads a day's whole figures (its files read back, or another origin's day).
    mutating func load(_ figures: DayFigures) {
        for (channel, count) in figures.reports { loadReports(channel, count) }
        for (channel, count) in figures.attestedReports ?? [:] { loadAttestedReports(channel, count) }
        for row in figures.rows { load(row.key, ReportCounts(count: row.count, bytes: row.bytes)) }
        for (key, count) in figures.keyRings { loadRing(key, count) }
    }

    /// Adds one report's key ring of `kind`: a ring the day does not keep yet counts as
    /// ``KeyRingCounts/other`` once the channel's rings of that kind, or the day's in all, reach
    /// their bound.
    mutating func addRing(_ kind: KeyRingCounts.Kind, channel: String, ids: [String]) {
        var key = KeyRingCounts.Key(kind: kind, channel: channel, ring: KeyRingCounts.ring(ids))
        if rings[key] == nil && ((ringsKept[kind.rawValue + "\u{0}" + channel] ?? 0) >= KeyRingCounts.ringsPerDay || (ringsKept[""] ?? 0) >= KeyRingCounts.ringsPerDayInAll) {
            key.ring = KeyRingCounts.other
        }
        loadRing(key, 1)
        pendingRings[key] = ReportBook.adding(pendingRings[key] ?? 0, 1)
        bucketBehind = true
    }

    /// Adds one report's counts.
    mutating func add(_ key: DayFigures.Key, bytes: Int64) {
        load(key, ReportCounts(count: 1, bytes: bytes))
        pendingCounts[key, default: ReportCounts()].add(count: 1, bytes: bytes)
        bucketBehind = true
    }

    /// Adds one report (`attested`: its assertion was checked; it counts among ``attestedReports`` too).
    mutating func addReport(channel: String, attested: Bool = false) {
        loadReports(channel, 1)
        pendingReports[channel] = ReportBook.adding(pendingReports[channel] ?? 0, 1)
        if attested {
            loadAttestedReports(channel, 1)
            pendingAttestedReports[channel] = ReportBook.adding(pendingAttestedReports[channel] ?? 0, 1)
        }
        bucketBehind = true
    }

    var hasPending: Bool { !pendingCounts.isEmpty || !pendingReports.isEmpty || !pendingAttestedReports.isEmpty || !pendingRings.isEmpty }

    /// The day as the API and the files show it (sorted rows).
    var figures: DayFigures {
        DayFigures(day: day, reports: reports, attestedReports: attestedReports, counts: counts.mapValues { ($0.count, $0.bytes) }, rings: rings)
    }

    /// The guard's sum over this day.
    func tally(channel: String, countingFrom: Int, candidates: [RolloutRecord.Candidate]) -> CandidateTally {
        var out = CandidateTally()
        for candidate in candidates {
            for (release, tally) in byCandidate[Self.candidateKey(channel: channel, pack: candidate.pack, revision: candidate.revision)] ?? [:] where release >= countingFrom {
                out.add(tally)
            }
        }
        return out
    }
}
