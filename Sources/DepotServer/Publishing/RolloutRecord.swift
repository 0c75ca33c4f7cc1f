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
    /// True when the guard counts only attested reports (the app required attestation when the
    /// rollout started, or the publisher asked); nil otherwise (and in records made before).
    var attestedOnly: Bool? = nil
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
    var startedAt: Date { steps.first?.at ?? WallClock.now() }

    static func percent(_ fraction: Double) -> String {
        let value = fraction * 100
        return value == value.rounded() ? "\(Int(value)) %" : String(format: "%.2f %%", value)
    }

    /// The candidate's reports among `days`: from ``countingFrom`` on, on its channel, about
    /// its pack revisions (deferred ones aside): how many, how many failed, and by kind — of
    /// all, and of the attested ones. A sum over every row (the model the guard's index is
    /// checked against).
    func candidateFigures(_ days: [DayFigures]) -> CandidateTally {
        let wanted = Set(candidates.map { "\($0.pack)@\($0.revision)" })
        var tally = CandidateTally()
        for day in days {
            for row in day.rows {
                let key = row.key
                guard key.channel == channel, key.release >= countingFrom, wanted.contains("\(key.pack)@\(key.revision)") else { continue }
                tally.add(key, count: row.count)
            }
        }
        return tally
    }

    /// Whether the guard counts only attested reports.
    var countsAttestedOnly: Bool { attestedOnly == true }
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
    /// Reports about the candidate since the rollout started, failures among them, by kind
    /// (attested or not).
    var reports: Int64
    var failures: Int64
    var failureRate: Double?
    var failuresByKind: [String: Int64]
    /// True when the guard counts only attested reports.
    var attestedOnly: Bool
    /// The attested reports among them, failures among those, by kind.
    var attestedReports: Int64
    var attestedFailures: Int64
    var attestedFailureRate: Double?
    var attestedFailuresByKind: [String: Int64]
    var manifestURL: String
}

extension Int64 {
    /// Adds, stopping at `Int64.max` instead of trapping (counts that strangers' reports feed).
    mutating func saturatingAdd(_ other: Int64) { self = ReportBook.adding(self, other) }
}
