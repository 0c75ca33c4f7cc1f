import DepotCore
import Foundation

/// A channel's rollout as the origin keeps it (`apps/<app>/rollouts/<channel>.json`): what the
/// signed manifest carries (release, fraction, salt) plus what only the origin needs — its
/// state, its guard, who halted it and why, each step.
struct RolloutRecord: Codable, Hashable, Sendable {
    enum State: String, Codable, Sendable {
        case running, halted, completed
    }

    /// One step: `start`, `advance`, `halt`, `complete`; `manifest` is the release it published.
    struct Step: Codable, Hashable, Sendable {
        var at: Date
        var action: String
        var fraction: Double
        var manifest: Int
        /// `automatic` or the token id that asked.
        var by: String
        /// A halt's figures, when the guard made it (kept after a resumption: the halt stays seen).
        var trigger: Trigger? = nil
    }

    /// The figures that made the origin halt a rollout itself.
    struct Trigger: Codable, Hashable, Sendable {
        var reports: Int64
        var failures: Int64
        var failureRate: Double
        var at: Date
    }

    /// A pack revision the candidate brings.
    struct Candidate: Codable, Hashable, Sendable {
        var pack: String
        var revision: Int
    }

    var app: String
    var channel: String
    /// The candidate release.
    var release: Int
    /// The release the channel served when the rollout started.
    var baseRelease: Int
    var state: State
    var fraction: Double
    var salt: String
    var candidates: [Candidate]
    var removed: [String]
    /// The guard: halt when, with at least `minReports` reports about the candidate, more than
    /// `haltOnFailureRate` of them are failures.
    var haltOnFailureRate: Double?
    var minReports: Int?
    /// `automatic` (the guard) or the id of the token that halted it.
    var haltedBy: String?
    var trigger: Trigger?
    var steps: [Step]

    /// Where the guard's count starts: the manifest of the rollout's start, or of its last
    /// resumption after a halt (a person who resumes a halted rollout has dealt with what
    /// halted it; the failures before do not halt it again).
    var countingFrom: Int {
        var from = steps.first?.manifest ?? 0
        var halted = false
        for step in steps {
            if step.action == "start" || halted && step.fraction > 0 { from = step.manifest }
            halted = step.fraction == 0
        }
        return from
    }
    var startedAt: Date { steps.first?.at ?? Date() }

    static func percent(_ fraction: Double) -> String {
        let value = fraction * 100
        return value == value.rounded() ? "\(Int(value)) %" : String(format: "%.2f %%", value)
    }

    /// The candidate's reports among `days`: from ``countingFrom`` on, on its channel, about
    /// its pack revisions (deferred ones aside): how many, how many failed, and by kind.
    func candidateFigures(_ days: [DayFigures]) -> (reports: Int64, failures: Int64, byKind: [String: Int64]) {
        let wanted = Set(candidates.map { "\($0.pack)@\($0.revision)" })
        var (reports, failures) = (Int64(0), Int64(0))
        var byKind: [String: Int64] = [:]
        for day in days {
            for row in day.rows {
                let key = row.key
                guard key.channel == channel, key.release >= countingFrom, key.outcome != .deferred, wanted.contains("\(key.pack)@\(key.revision)") else { continue }
                reports.saturatingAdd(row.count)
                if key.outcome == .failed {
                    failures.saturatingAdd(row.count)
                    byKind[key.error ?? "other", default: 0].saturatingAdd(row.count)
                }
            }
        }
        return (reports, failures, byKind)
    }
}

/// What a person acting on a rollout saw (`release`, `state`, `steps` of a step's query): a step
/// is refused with 409 `rollout_changed` when the rollout is no longer that one — the guard
/// halted it, someone resumed it, a publisher restarted it with another release — so that no
/// one advances, halts or completes a rollout they never saw. Each part is optional (nil: not checked).
struct RolloutExpectation: Sendable {
    var release: Int?
    var state: RolloutRecord.State?
    /// How many steps the record had (any step since, a halt and a resumption too, changes it).
    var steps: Int?

    init(release: Int? = nil, state: RolloutRecord.State? = nil, steps: Int? = nil) {
        (self.release, self.state, self.steps) = (release, state, steps)
    }

    func check(_ record: RolloutRecord) throws {
        let releaseMoved = release.map { $0 != record.release } ?? false
        let stateMoved = state.map { $0 != record.state } ?? false
        let stepsMoved = steps.map { $0 != record.steps.count } ?? false
        guard releaseMoved || stateMoved || stepsMoved else { return }
        var now = "release \(record.release), \(record.state.rawValue) at \(RolloutRecord.percent(record.fraction))"
        if let last = record.steps.last {
            now += ", last step \(last.action) by \(last.by)"
            if let trigger = last.trigger {
                now += " (\(trigger.failures) failures in \(trigger.reports) reports, \(RolloutRecord.percent(trigger.failureRate)))"
            }
        }
        var seen: [String] = []
        if let release { seen.append("release \(release)") }
        if let state { seen.append(state.rawValue) }
        if let steps { seen.append("\(steps) steps") }
        throw DepotError.conflict(
            "rollout_changed",
            "the rollout on channel \(record.channel) changed since you read it: it is now \(now), not \(seen.joined(separator: ", ")). Nothing changed; read it again and decide"
        )
    }
}

/// What `GET …/rollouts/{channel}` and each step answer.
struct RolloutStatus: Encodable, Sendable {
    var app: String
    var channel: String
    var state: RolloutRecord.State
    var release: Int
    var baseRelease: Int
    var fraction: Double
    /// The release the channel serves now (the manifest version devices see).
    var manifest: Int
    var candidates: [RolloutRecord.Candidate]
    var removed: [String]
    var haltOnFailureRate: Double?
    var minReports: Int?
    var haltedBy: String?
    var trigger: RolloutRecord.Trigger?
    var steps: [RolloutRecord.Step]
    /// Reports about the candidate since the rollout started, failures among them, by kind.
    var reports: Int64
    var failures: Int64
    var failureRate: Double?
    var failuresByKind: [String: Int64]
    var manifestURL: String
}

/// What `GET …/fleet` answers: per pack revision, what devices on a channel reported each day.
struct FleetFigures: Encodable, Sendable {
    struct Revision: Encodable, Sendable {
        var pack: String
        var revision: Int
        var installed: Int64
        var patched: Int64
        var failed: Int64
        var deferred: Int64
        var bytes: Int64
        var failuresByKind: [String: Int64]
        /// Installs (whole or patched) per day, oldest first, one per day of ``FleetFigures/days``.
        var daily: [Int64]
    }

    var app: String
    var channel: String
    var days: [String]
    /// Reports per day.
    var reports: [Int64]
    var revisions: [Revision]
    var failuresByKind: [String: Int64]
    var rollout: RolloutStatus?
    /// Per key devices need, reports from builds with and without it (``FleetKeys``).
    var keys: FleetKeys?

    init(app: String, channel: String, figures: [DayFigures], rollout: RolloutStatus?, keys: FleetKeys? = nil) {
        self.app = app
        self.channel = channel
        self.rollout = rollout
        self.keys = keys
        days = figures.map(\.day)
        reports = figures.map { $0.reports[channel] ?? 0 }
        var byRevision: [String: Revision] = [:]
        var kinds: [String: Int64] = [:]
        for (index, day) in figures.enumerated() {
            for row in day.rows where row.key.channel == channel {
                let (pack, number) = (row.key.pack, row.key.revision)
                let key = "\(pack)@\(number)"
                var revision = byRevision[key] ?? Revision(
                    pack: pack, revision: number, installed: 0, patched: 0, failed: 0, deferred: 0, bytes: 0, failuresByKind: [:],
                    daily: Array(repeating: 0, count: figures.count)
                )
                revision.bytes.saturatingAdd(row.bytes)
                switch row.key.outcome {
                case .installed: revision.installed.saturatingAdd(row.count)
                case .patched: revision.patched.saturatingAdd(row.count)
                case .deferred: revision.deferred.saturatingAdd(row.count)
                case .failed:
                    revision.failed.saturatingAdd(row.count)
                    revision.failuresByKind[row.key.error ?? "other", default: 0].saturatingAdd(row.count)
                    kinds[row.key.error ?? "other", default: 0].saturatingAdd(row.count)
                }
                if row.key.outcome == .installed || row.key.outcome == .patched { revision.daily[index].saturatingAdd(row.count) }
                byRevision[key] = revision
            }
        }
        revisions = byRevision.values.sorted { ($0.pack, $0.revision) < ($1.pack, $1.revision) }
        failuresByKind = kinds
    }
}

extension Int64 {
    /// Adds, stopping at `Int64.max` instead of trapping (counts that strangers' reports feed).
    mutating func saturatingAdd(_ other: Int64) { self = ReportBook.adding(self, other) }
}
