import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// The alert rules an operator loads (`Deploy/prometheus/alerts.yml`): Prometheus's own checker
/// takes them, and every metric they name is one the origin serves at `/metrics` once the event
/// it counts has happened (a patch skipped, a rollout halted, a report, a live manifest).
@Suite("Operations: the Prometheus alert rules load and name metrics the origin serves")
struct AlertRulesTests {
    static let rules = ReadmeTests.root + "/Deploy/prometheus/alerts.yml"

    /// The metric names the rules' expressions use (`depot_…`, and Prometheus's own `up`).
    static func metricNames() throws -> Set<String> {
        let text = try String(contentsOfFile: rules, encoding: .utf8)
        var names: Set<String> = []
        for line in text.split(separator: "\n") where !line.trimmingCharacters(in: .whitespaces).hasPrefix("#") {
            var rest = line[...]
            while let start = rest.range(of: "depot_") {
                let name = rest[start.lowerBound...].prefix { $0.isLetter || $0.isNumber || $0 == "_" }
                names.insert(String(name))
                rest = rest[name.endIndex...]
            }
        }
        return names
    }

    @Test("promtool check rules passes on Deploy/prometheus/alerts.yml, and promtool test rules shows each alert firing when it should")
    func promtool() throws {
        let tool = "/usr/bin/promtool"
        guard FileManager.default.isExecutableFile(atPath: tool) else {
            Issue.record("\(tool) is not installed (Deploy/setup.sh test installs Debian's prometheus)")
            return
        }
        let checked = try Processes.run(tool, ["check", "rules", Self.rules])
        #expect(checked.status == 0, "\(checked.stdout)\n\(checked.stderr)")
        #expect(checked.stdout.contains("SUCCESS: 9 rules found"), "\(checked.stdout)")
        // Each alert fires on the series it is for (a counter's first event too) and not on healthy ones.
        let tested = try Processes.run(tool, ["test", "rules", "alerts_test.yml"], cwd: ReadmeTests.root + "/Deploy/prometheus")
        #expect(tested.status == 0 && tested.stdout.contains("SUCCESS"), "\(tested.stdout)\n\(tested.stderr)")
        let cases = try String(contentsOfFile: ReadmeTests.root + "/Deploy/prometheus/alerts_test.yml", encoding: .utf8)
        for alert in ["OriginDown", "ServerErrors", "DiskReserveReached", "PatchesSkipped", "ReportsShed", "RolloutHalted", "ManifestNearExpiry", "RootExpiring"] {
            #expect(cases.contains("alertname: AssetDepot\(alert)\n        exp_alerts:"), "alerts_test.yml has a firing case for AssetDepot\(alert)")
        }
    }

    @Test("Every metric the rules name is in /metrics once its event happened: the volume, the reserve, each live channel's expiry, a skipped patch, a halted rollout, a report")
    func metricsExist() async throws {
        let names = try Self.metricNames()
        #expect(names.isSuperset(of: [
            "depot_http_requests_total", "depot_data_volume_free_bytes", "depot_data_volume_size_bytes", "depot_patch_disk_reserve_ratio",
            "depot_patches_skipped_total", "depot_reports_total", "depot_rollouts_halted_total", "depot_manifest_expiry_timestamp_seconds",
            "depot_manifest_lifetime_seconds", "depot_root_expiry_timestamp_seconds",
        ]), "\(names.sorted())")
        let metricsToken = "metrics-" + String(repeating: "m", count: 24)
        try await withServer(configure: {
            $0.metricsToken = metricsToken
            // One byte of scratch space: every patch is skipped (`scratch_limit`).
            $0.patchDepth = 1
            $0.patchLimits = PatchLimits(scratchBytes: 1, reserve: 0.1)
        }) { origin in
            try put(origin, "level", bytes(5_000, seed: 1))
            try put(origin, "level", bytes(5_000, seed: 2))
            try put(origin, "level", bytes(5_000, seed: 3), query: "&channel=beta")
            #expect(try call(origin, "POST", "/v1/apps/\(origin.app)/rollouts/production/start?release=3&fraction=0.5").status == 201)
            #expect(try call(origin, "POST", "/v1/apps/\(origin.app)/rollouts/production/halt").status == 201)
            // A root of trust (nothing protected), whose expiry the rules watch.
            let root = try TrustFixture(app: origin.app).root(dataPath: origin.data.path, protect: [])
            _ = try RootAdmin(dataPath: origin.data.path).add(root.encoded(), app: origin.app)
            let report = DeviceReport(channel: "production", release: 2, packs: [.init(id: "level", revision: 2, outcome: .installed, bytes: 5_000)])
            #expect(try call(origin, "POST", "/v1/apps/\(origin.app)/reports", token: "", body: report.encoded()).status == 202)
            func scrape() throws -> String {
                try call(origin, "GET", "/metrics", token: metricsToken).bodyText
            }
            // The patch maker works in the background: wait for its skip to be counted.
            let skipped = try Eventually.wait(every: .milliseconds(50)) {
                try scrape().split(separator: "\n").contains { $0.hasPrefix("depot_patches_skipped_total{") && $0.contains("reason=\"scratch_limit\"") && !$0.hasSuffix(" 0") }
            }
            #expect(skipped, "a patch skipped for want of scratch space is counted")
            let text = try scrape()
            let served = Set(text.split(separator: "\n").compactMap { line -> String? in
                guard !line.hasPrefix("#") else { return nil }
                return String(line.prefix { $0 != "{" && $0 != " " })
            })
            let missing = names.subtracting(served)
            #expect(missing.isEmpty, "the rules name metrics /metrics does not serve: \(missing.sorted())\n\(text)")
            // The values the rules compare: both channels' expiries, 90 days out; the volume's sizes; the reserve.
            let now = Date().timeIntervalSince1970
            for channel in ["production", "beta"] {
                let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("depot_manifest_expiry_timestamp_seconds") && $0.contains("channel=\"\(channel)\"") })
                let expiry = try #require(Double(line.split(separator: " ").last ?? ""))
                #expect(abs(expiry - (now + 90 * 86_400)) < 3_600, "\(line)")
            }
            #expect(text.contains("depot_patch_disk_reserve_ratio 0.1"))
            let rootLine = try #require(text.split(separator: "\n").first { $0.hasPrefix("depot_root_expiry_timestamp_seconds{app=\"\(origin.app)\"}") })
            #expect(abs((Double(rootLine.split(separator: " ").last ?? "") ?? 0) - (now + 365 * 86_400)) < 3_600, "\(rootLine)")
            #expect(text.contains("depot_manifest_lifetime_seconds 7776000"))
            #expect(text.contains("depot_rollouts_halted_total{app=\"\(origin.app)\",channel=\"production\",by=\"hand\"} 1"))
            // The event counters the rules watch are served at 0 before their first event, so the
            // first one is an increase Prometheus sees.
            for zero in [
                "depot_reports_total{app=\"\(origin.app)\",result=\"shed\"} 0", "depot_patches_skipped_total{app=\"\(origin.app)\",reason=\"allowance\"} 0",
                "depot_rollouts_halted_total{app=\"\(origin.app)\",channel=\"production\",by=\"automatic\"} 0",
                "depot_rollouts_halted_total{app=\"\(origin.app)\",channel=\"beta\",by=\"hand\"} 0",
            ] {
                #expect(text.split(separator: "\n").contains { $0 == zero }, "\(zero)")
            }
            // A removed channel's expiry goes with it.
            let admin = try TokenStore(folder: DataFolder(origin.data.path)).create(app: origin.app, role: .admin).token
            #expect(try call(origin, "DELETE", "/v1/apps/\(origin.app)/channels/beta", token: admin).status == 204)
            let afterRemoval = try scrape().split(separator: "\n")
            #expect(!afterRemoval.contains { $0.hasPrefix("depot_manifest_expiry_timestamp_seconds") && $0.contains("channel=\"beta\"") })
            #expect(!afterRemoval.contains { $0.hasPrefix("depot_rollouts_halted_total") && $0.contains("channel=\"beta\"") })
            #expect(afterRemoval.contains { $0.hasPrefix("depot_rollouts_halted_total") && $0.contains("channel=\"production\"") })
        }
    }
}
