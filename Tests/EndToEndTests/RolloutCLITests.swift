import DepotCore
import DepotTestSupport
import Foundation
import Testing

@Suite("depot rollout and depot fleet")
struct RolloutCLITests {
    @Test("start, status, advance, halt, complete and fleet print what the origin says; a refusal is printed verbatim and exits non-zero; depot sync --report sends a report")
    func commands() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-rollout-cli")
            defer { work.remove() }
            try put(origin, "level", bytes(2_000, seed: 12))
            try put(origin, "level", bytes(2_200, seed: 13), query: "&channel=beta")
            let depot = Processes.depotBinary
            let common = ["--server", origin.baseURL.absoluteString, "--app", origin.app, "--token", origin.token]
            func run(_ arguments: [String]) throws -> Processes.Result { try Processes.run(depot, arguments + common) }

            let start = try run(["rollout", "start", "--release", "2", "--fraction", "0.25", "--halt-on-failure-rate", "0.1", "--min-reports", "50"])
            #expect(start.status == 0 && start.stdout.contains("rollout of release 2 on production: running, 25 % of devices"), "\(start.stdout)\(start.stderr)")
            #expect(start.stdout.contains("guard: halts itself above 10 % failures once 50 reports are in"))
            let refused = try run(["rollout", "advance", "--fraction", "0.1"])
            #expect(refused.status != 0 && refused.stderr.contains("HTTP 409") && refused.stderr.contains("advancing only raises it"), "\(refused.stderr)")
            #expect(try run(["rollout", "advance", "--fraction", "1"]).stdout.contains("running, 100 % of devices"))

            // A device syncs (it takes the candidate at 100 %) and reports.
            try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: work.path + "/client.json")
            let sync = try Processes.run(depot, ["sync", "--config", work.path + "/client.json", "--dest", work.path + "/device", "--quiet", "--report", "--server", origin.baseURL.absoluteString, "--app", origin.app])
            #expect(sync.status == 0 && sync.stderr.contains("reported 1 packs"), "\(sync.stdout)\(sync.stderr)")
            origin.server.flushReports()
            let status = try run(["rollout", "status"])
            #expect(status.stdout.contains("reports about the candidate: 1, failures 0 (0 %)"), "\(status.stdout)")
            let fleet = try run(["fleet", "--days", "3"])
            #expect(fleet.status == 0 && fleet.stdout.contains("1 reports in 3 days") && fleet.stdout.contains("level\t2\t1\t0\t0\t0\t"), "\(fleet.stdout)\(fleet.stderr)")
            #expect(status.stdout.contains("steps: 2 (start 25 % by token "), "\(status.stdout)")
            // With what the user saw (issue 50): refused when the rollout is no longer that one.
            let stale = try run(["rollout", "halt", "--release", "2", "--state", "running", "--steps", "1"])
            #expect(stale.status != 0 && stale.stderr.contains("HTTP 409") && stale.stderr.contains("changed since you read it"), "\(stale.stderr)")
            #expect(try run(["rollout", "halt", "--release", "2", "--state", "running", "--steps", "2"]).stdout.contains("halted, 0 % of devices"))
            let halted = try run(["rollout", "status"])
            #expect(halted.stdout.contains("halted by token "), "\(halted.stdout)")
            #expect(try run(["rollout", "complete", "--release", "2", "--state", "halted"]).stdout.contains("completed, 100 % of devices"))
            let gone = try run(["rollout", "halt"])
            #expect(gone.status != 0 && gone.stderr.contains("HTTP 404"), "\(gone.stderr)")
        }
    }
}
