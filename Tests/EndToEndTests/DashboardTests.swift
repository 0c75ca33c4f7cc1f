import DepotTestSupport
import Foundation
import Testing

/// The dashboard (Public/) in real Chromium, driven with Selenium against the real `depot serve`,
/// which the script starts, kills and restarts itself: `Tests/Browser/dashboard_test.py` says
/// each step. Screenshots of the main screens at 1280×800 and 390×844 go to
/// `.build/artifacts/dashboard` (or `DEPOT_ARTIFACTS`/dashboard).
@Suite("Dashboard in Chromium", .enabled(if: HeavyTests.browser, "run alone by Deploy/setup.sh test, with DEPOT_BROWSER_TESTS=1"))
struct DashboardTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    @Test("sign in, upload, interrupt and resume, publish, compare, roll back, refusals, both layouts, no console error")
    func dashboard() throws {
        let work = TemporaryDirectory("depot-dashboard-test")
        defer { work.remove() }
        let archive = work.path + "/world.aar"
        let map = (0..<65_536).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try Data(ArchiveFixture.uncompressed([(path: "world/map.bin", bytes: map)])).write(to: URL(fileURLWithPath: archive))
        let artifacts = (ProcessInfo.processInfo.environment["DEPOT_ARTIFACTS"] ?? Self.root + "/.build/artifacts") + "/dashboard"
        let result = try Processes.run("/usr/bin/env", [
            "python3", Self.root + "/Tests/Browser/dashboard_test.py", "--depot", Processes.depotBinary, "--public", Self.root + "/Public",
            "--artifacts", artifacts, "--archive", archive,
        ])
        print(result.stdout)
        #expect(result.status == 0, "the browser test failed:\n\(result.stdout)\n\(result.stderr)")
        #expect(result.stdout.contains("dashboard: passed"))
        for screen in ["sign-in", "upload-paused", "live-release", "upload-interrupted", "comparison", "allowance-refusal", "info-plist-and-configuration", "managed-app"] {
            for size in ["desktop", "phone"] {
                #expect(FileManager.default.fileExists(atPath: "\(artifacts)/\(screen)-\(size).png"), "no screenshot \(screen)-\(size)")
            }
        }
    }

    @Test("a rollout from the dashboard: start it (confirmed), devices' reports in the chart, a refusal verbatim, halt it; both layouts")
    func rollout() throws {
        let artifacts = (ProcessInfo.processInfo.environment["DEPOT_ARTIFACTS"] ?? Self.root + "/.build/artifacts") + "/dashboard"
        let result = try Processes.run("/usr/bin/env", [
            "python3", Self.root + "/Tests/Browser/rollout_test.py", "--depot", Processes.depotBinary, "--public", Self.root + "/Public", "--artifacts", artifacts,
        ])
        print(result.stdout)
        #expect(result.status == 0, "the browser test failed:\n\(result.stdout)\n\(result.stderr)")
        #expect(result.stdout.contains("rollout: passed"))
        for screen in ["rollout-reports", "rollout-halted"] {
            for size in ["desktop", "phone"] {
                #expect(FileManager.default.fileExists(atPath: "\(artifacts)/\(screen)-\(size).png"), "no screenshot \(screen)-\(size)")
            }
        }
    }

    @Test("issue 50: a masked token field that is no password field; a rollout halted under an open dialog refused (409) and the halt shown, kept after a resumption; Complete names the release; a draft changed underneath refused (409); tags and claims isolated, bidi controls refused; a publisher's JavaScript bytes never run; a failed app switch keeps page and actions on one app")
    func review() throws {
        let artifacts = (ProcessInfo.processInfo.environment["DEPOT_ARTIFACTS"] ?? Self.root + "/.build/artifacts") + "/dashboard"
        let result = try Processes.run("/usr/bin/env", [
            "python3", Self.root + "/Tests/Browser/review_test.py", "--depot", Processes.depotBinary, "--public", Self.root + "/Public", "--artifacts", artifacts,
        ])
        print(result.stdout)
        #expect(result.status == 0, "the browser test failed:\n\(result.stdout)\n\(result.stderr)")
        #expect(result.stdout.contains("review: passed"))
        for size in ["desktop", "phone"] {
            #expect(FileManager.default.fileExists(atPath: "\(artifacts)/review-rollout-refused-\(size).png"), "no screenshot review-rollout-refused-\(size)")
        }
    }

    @Test("an app that has lived for years: 800 releases and 100 channels made over HTTP; windows of rows, newest first, natural channel order, search, paging, compare")
    func longHistory() throws {
        let artifacts = (ProcessInfo.processInfo.environment["DEPOT_ARTIFACTS"] ?? Self.root + "/.build/artifacts") + "/dashboard"
        let result = try Processes.run("/usr/bin/env", [
            "python3", Self.root + "/Tests/Browser/history_test.py", "--depot", Processes.depotBinary, "--public", Self.root + "/Public", "--artifacts", artifacts,
        ])
        print(result.stdout)
        #expect(result.status == 0, "the browser test failed:\n\(result.stdout)\n\(result.stderr)")
        #expect(result.stdout.contains("history: passed"))
        for screen in ["history-channels", "history-long"] {
            for size in ["desktop", "phone"] {
                #expect(FileManager.default.fileExists(atPath: "\(artifacts)/\(screen)-\(size).png"), "no screenshot \(screen)-\(size)")
            }
        }
    }
}
