import DepotTestSupport
import Foundation
import Testing

@Suite("Deploy/: the systemd unit")
struct DeploymentTests {
    static let deploy = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Deploy").path

    @Test("systemd-analyze verifies the unit without a word, and rates its exposure low")
    func systemdUnit() throws {
        let analyze = "/usr/bin/systemd-analyze"
        #expect(FileManager.default.isExecutableFile(atPath: analyze), "systemd-analyze is not installed: run Deploy/setup.sh deps")
        let work = TemporaryDirectory("depot-unit")
        defer { work.remove() }
        // The unit as shipped, with ExecStart pointing at the binary just built (verify checks it exists).
        let unit = try String(contentsOfFile: Self.deploy + "/systemd/assetdepot.service", encoding: .utf8)
        #expect(unit.contains("ExecStart=/usr/bin/depot serve"))
        let path = work.path + "/assetdepot.service"
        try unit.replacingOccurrences(of: "/usr/bin/depot", with: Processes.depotBinary).write(toFile: path, atomically: true, encoding: .utf8)
        let verify = try Processes.run(analyze, ["verify", path])
        #expect(verify.status == 0 && verify.stderr.isEmpty && verify.stdout.isEmpty, "\(verify.stdout)\(verify.stderr)")
        let security = try Processes.run(analyze, ["security", "--offline=true", path])
        let level = security.stdout.split(separator: "\n").last { $0.contains("Overall exposure level") }
            .flatMap { line in line.split(separator: " ").compactMap { Double($0) }.first }
        #expect(level.map { $0 <= 2.5 } == true, "exposure: \(security.stdout.suffix(300))")
        for directive in ["NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes", "StateDirectory=assetdepot", "LimitNOFILE=", "KillSignal=SIGTERM",
                          "Environment=DEPOT_BOOTSTRAP=none"] {
            #expect(unit.contains(directive), "\(directive)")
        }
    }
}

@Suite("docs/Operating.md: the options of depot serve")
struct ServeOptionsDocsTests {
    @Test("Every option `depot serve --help` lists has a row in Operating.md's table, and no help claims a default of 0 for a computed default (issue 51: four options were missing, --patch-scratch-limit said 0)")
    func everyOptionDocumented() throws {
        let help = try Processes.run(Processes.depotBinary, ["serve", "--help"])
        #expect(help.status == 0)
        let options = Set(help.stdout.split(separator: "\n").compactMap { line -> String? in
            let trimmed = line.drop { $0 == " " }
            guard trimmed.hasPrefix("--"), let name = trimmed.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "/" }).first else { return nil }
            return String(name)
        }).subtracting(["--help", "--version"])
        #expect(options.count >= 35, "\(options.count) options read from the help")
        let table = try String(contentsOfFile: ReadmeTests.root + "/docs/Operating.md", encoding: .utf8)
            .split(separator: "\n").filter { $0.hasPrefix("| `--") }.joined(separator: "\n")
        let missing = options.filter { !table.contains("`" + $0) }.sorted()
        #expect(missing.isEmpty, "options of depot serve with no row in docs/Operating.md: \(missing)")
        let scratch = help.stdout.components(separatedBy: "--patch-scratch-limit").dropFirst().first?.components(separatedBy: "\n  --").first ?? ""
        #expect(!scratch.isEmpty && !scratch.contains("(default: 0)"), "\(scratch)")
    }
}

@Suite("Deploy/bench: the smoke run")
struct BenchmarkSmokeTests {
    @Test("Deploy/bench/serve.sh runs end to end on small sizes: every peer checked, the table written")
    func serveBenchmark() throws {
        for tool in ["/usr/bin/wrk", "/usr/sbin/nginx", "/usr/bin/curl"] {
            #expect(FileManager.default.isExecutableFile(atPath: tool), "\(tool) is not installed: run Deploy/setup.sh deps")
        }
        let work = TemporaryDirectory("depot-bench-smoke")
        defer { work.remove() }
        let script = DeploymentTests.deploy + "/bench/serve.sh"
        let result = try Processes.run("/bin/bash", [script, "1", "1", "5", "4"], environment: ["DEPOT_BIN": Processes.depotBinary, "OUT": work.path + "/table.txt"])
        #expect(result.status == 0, "\(result.stderr)")
        let table = try String(contentsOfFile: work.path + "/table.txt", encoding: .utf8)
        for row in ["1 KiB blob             origin", "1 KiB blob             mhd-c", "64 KiB blob            nginx", "manifest (5 packs)", "curl x4"] {
            #expect(table.contains(row), "\(row)\n\(table)")
        }
    }

    @Test("Deploy/bench/client.sh runs end to end on a small pack: both pipelines checked, the table written")
    func clientBenchmark() throws {
        let work = TemporaryDirectory("depot-bench-client")
        defer { work.remove() }
        let script = DeploymentTests.deploy + "/bench/client.sh"
        let result = try Processes.run("/bin/bash", [script, "8", "1"], environment: ["DEPOT_BIN": Processes.depotBinary, "OUT": work.path + "/table.txt", "BENCH_DROP_CACHES": "0"])
        #expect(result.status == 0, "\(result.stderr)")
        let table = try String(contentsOfFile: work.path + "/table.txt", encoding: .utf8)
        #expect(table.contains("sync (download, verify, decrypt)") && table.contains("ingest (encrypt, hash, upload)") && table.contains("CPU s depot / peer"), "\(table)")
    }
}
