import DepotCore
import Foundation

/// What `GET …/fleet` answers: per pack revision, what devices on a channel reported each day —
/// every report, and apart the attested ones (an App Attest assertion checked) among them.
struct FleetFigures: Encodable, Sendable {
    /// A revision's attested reports, by outcome.
    struct Attested: Encodable, Sendable {
        var installed: Int64 = 0
        var patched: Int64 = 0
        var failed: Int64 = 0
        var deferred: Int64 = 0
    }

    struct Revision: Encodable, Sendable {
        var pack: String
        var revision: Int
        var installed: Int64
        var patched: Int64
        var failed: Int64
        var deferred: Int64
        var bytes: Int64
        var failuresByKind: [String: Int64]
        /// The attested reports among these (every count above includes them).
        var attested: Attested
        /// Installs (whole or patched) per day, oldest first, one per day of ``FleetFigures/days``.
        var daily: [Int64]
    }

    var app: String
    var channel: String
    var days: [String]
    /// Reports per day (attested ones included).
    var reports: [Int64]
    /// Attested reports per day.
    var attestedReports: [Int64]
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
        attestedReports = figures.map { $0.attestedReports?[channel] ?? 0 }
        var byRevision: [String: Revision] = [:]
        var kinds: [String: Int64] = [:]
        for (index, day) in figures.enumerated() {
            for row in day.rows where row.key.channel == channel {
                let (pack, number) = (row.key.pack, row.key.revision)
                let key = "\(pack)@\(number)"
                var revision = byRevision[key] ?? Revision(
                    pack: pack, revision: number, installed: 0, patched: 0, failed: 0, deferred: 0, bytes: 0, failuresByKind: [:], attested: Attested(),
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
                if row.key.attested == true {
                    switch row.key.outcome {
                    case .installed: revision.attested.installed.saturatingAdd(row.count)
                    case .patched: revision.attested.patched.saturatingAdd(row.count)
                    case .deferred: revision.attested.deferred.saturatingAdd(row.count)
                    case .failed: revision.attested.failed.saturatingAdd(row.count)
                    }
                }
                if row.key.outcome == .installed || row.key.outcome == .patched { revision.daily[index].saturatingAdd(row.count) }
                byRevision[key] = revision
            }
        }
        revisions = byRevision.values.sorted { ($0.pack, $0.revision) < ($1.pack, $1.revision) }
        failuresByKind = kinds
    }
}
