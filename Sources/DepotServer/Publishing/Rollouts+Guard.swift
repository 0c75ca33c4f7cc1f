import DepotCore
import Foundation
import Logging

extension Rollouts {
    /// The guard: halts each running guarded rollout of `apps` whose candidate has at least
    /// `minReports` reports with a failure share above `haltOnFailureRate` — counting only
    /// attested reports when the rollout requires them (``RolloutRecord/attestedOnly``): then no
    /// number of forged, unattested reports moves it.
    func evaluate(_ apps: [String]) {
        for app in apps {
            for name in FileSystem.contents(of: folder.app(app) + "/rollouts") where name.hasSuffix(".json") {
                let channel = String(name.dropLast(5))
                guard Identifier.isValidChannel(channel) else { continue }
                let found: RolloutRecord?
                do {
                    found = try steps.withLock { _ in try reconciled(app, channel: channel) }
                } catch {
                    publisher.logger.error("could not read a rollout's record", metadata: ["app": .string(app), "channel": .string(channel), "error": .string("\(error)")])
                    continue
                }
                guard let record = found, record.state == .running,
                      let rate = record.haltOnFailureRate, let minimum = record.minReports else { continue }
                let tally = self.reports.candidateFigures(record).counted(attestedOnly: record.countsAttestedOnly)
                let (reports, failures) = (tally.reports, tally.failures)
                guard reports >= Int64(minimum), Double(failures) > rate * Double(reports) else { continue }
                let trigger = RolloutRecord.Trigger(reports: reports, failures: failures, failureRate: Double(failures) / Double(reports), at: WallClock.now())
                do {
                    _ = try halt(app, channel: channel, by: "automatic", trigger: trigger, measured: (record.salt, record.countingFrom))
                    publisher.metrics.rolloutHalted(app: app, channel: channel, by: "automatic")
                    publisher.logger.warning("rollout halted automatically: the candidate's failure rate crossed the threshold", metadata: [
                        "app": .string(app), "channel": .string(channel), "release": .stringConvertible(record.release),
                        "reports": .stringConvertible(reports), "failures": .stringConvertible(failures), "threshold": .stringConvertible(rate),
                    ])
                } catch {
                    publisher.logger.error("could not halt a failing rollout", metadata: ["app": .string(app), "channel": .string(channel), "error": .string("\(error)")])
                }
            }
        }
    }
}
