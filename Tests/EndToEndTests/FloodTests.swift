import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// No one without a token slows another tenant: every route an anonymous client can reach is
/// flooded from 8 loopback addresses (curl, 4 connections each) while wrk (2 threads, 64
/// connections: the victim app's devices) measures another app's 1 KiB blob on the real
/// `depot serve` process. The control is a flood of `/healthz` by the
/// same clients (what their own CPU costs the machine); each route's flood must leave the blob
/// at least 0.8× the control's rate, and the origin's resident memory under its bound (96 MiB,
/// plus the live envelopes it serves, plus its caches' caps). The origin has lived for years:
/// ``HistoryFixture``'s apps, beside the victim.
@Suite("Flood", .serialized, .enabled(if: HeavyTests.enabled, "run alone by Deploy/setup.sh test, with DEPOT_HEAVY_TESTS=1"))
struct FloodTests {
    /// Each measure's length in seconds (the note's figures: `DEPOT_FLOOD_SECONDS=3`).
    static let seconds = Int(ProcessInfo.processInfo.environment["DEPOT_FLOOD_SECONDS"] ?? "") ?? 2
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// One flooded route: what 8 curl processes send.
    struct Flood {
        var name: String
        var method = "GET"
        /// The path; `QUERY` is replaced by curl's counter (a new query string each request).
        var path: String
        var headers: [String] = []
        /// A body file per client (the same one when a single path is given).
        var bodies: [String] = []
        var expected: Set<Int>
        /// What must still work while it runs (checked once the flood is on, before wrk).
        var alongside: (() throws -> Void)? = nil
    }

    struct Measure {
        var rate: Double
        var p99: String
        var rssKiB: Int
    }

    @Test("Every unauthenticated route flooded from 8 addresses: another app's 1 KiB blob keeps at least 0.8× its rate under a /healthz flood, and the origin stays under 96 MiB plus its live manifests and caches' caps")
    func floods() async throws {
        for tool in ["/usr/bin/wrk", "/usr/bin/curl"] where !FileManager.default.isExecutableFile(atPath: tool) {
            Issue.record("\(tool) is not installed (Deploy/setup.sh installs it)")
            return
        }
        // In memory: the history fixture is thousands of files, each made durable as it is written.
        let work = TemporaryDirectory.inMemory("depot-flood")
        defer { work.remove() }
        // The origin has lived for years: apps with 3,000 releases, 300 channels, a window of 64
        // releases of 3,500 packs, a 10,000-pack manifest (HistoryFixture), beside the victim.
        let shape = HistoryFixture.Shape.large
        let built = ContinuousClock.now
        try HistoryFixture.build(data: work.path + "/data", shape: shape)
        print("flood: history fixture (\(shape)) written in \(ContinuousClock.now - built)")
        // What the origin may hold: 96 MiB (a small origin's bound: the process, its blob answers,
        // its buffers), plus every channel's live envelope (kept in memory to be served), plus
        // what the caches keep at most besides, whatever the history: release files' bytes
        // (8 MiB), report listings (16 MiB of entries), two decoded manifests (16 MiB).
        let liveBytes = HistoryFixture.liveEnvelopeBytes(data: work.path + "/data")
        let rssBoundKiB = Int(96 * 1024 + liveBytes / 1024 + 40 * 1024)
        print("flood: live envelopes \(liveBytes / 1024) KiB in all; RSS bound \(rssBoundKiB / 1024) MiB")
        // App Attest's routes too: the origin trusts a test CA's root (a debug build only).
        let device = try TestAppAttest(appID: Self.attestAppID)
        try FileSystem.writeAtomically(device.root, to: work.path + "/anchor.der")
        let server = try ServeProcess(data: work.path + "/data", environment: [
            "DEPOT_LOG_LEVEL": "warning", "DEPOT_PUBLIC_DIR": Self.repository + "/Public", "DEPOT_PATCH_DEPTH": "0", "DEPOT_PUBLIC_URL": HistoryFixture.publicURL,
            "DEPOT_APP_ATTEST_TEST_ANCHOR": work.path + "/anchor.der",
        ], bootstrap: false)
        defer { server.process.terminate(); server.process.waitUntilExit() }
        let port = UInt16(server.port)!
        let pid = server.process.processIdentifier
        func call(_ method: String, _ path: String, body: [UInt8] = [], token: String? = nil) throws -> RawHTTP.Response {
            let auth = token.map { "Authorization: Bearer \($0)\r\n" } ?? ""
            return try #require(try RawHTTP.send(port: port, "\(method) \(path) HTTP/1.1\r\nHost: x\r\n\(auth)Content-Length: \(body.count)\r\nConnection: close\r\n\r\n", body: body).first)
        }
        // The victim: one 1 KiB pack. The attacker's app: 100 packs in three releases.
        let (victim, app) = ("com.example.victim", "com.example.dev")
        func token(_ app: String) throws -> String {
            let created = try Processes.run(Processes.depotBinary, ["apps", "create", "--data", work.path + "/data", app])
            #expect(created.status == 0, "\(created.stderr)")
            let made = try Processes.run(Processes.depotBinary, ["tokens", "create", "--data", work.path + "/data", "--app", app, "--role", "admin"])
            return try #require(made.stdout.split(separator: "\n").last.map(String.init))
        }
        let (victimToken, adminToken) = (try token(victim), try token(app))
        let configured = try Processes.run(Processes.depotBinary, ["attest", "configure", "--data", work.path + "/data", "--app", app, "--app-id", Self.attestAppID])
        #expect(configured.status == 0, "\(configured.stderr)")
        #expect(try call("PUT", "/v1/apps/\(victim)/packs/small?release=true", body: [UInt8](repeating: 7, count: 1024), token: victimToken).status == 201)
        for release in 1...3 {
            for pack in 0..<100 {
                let body = [UInt8]("release \(release) pack \(pack) ".utf8) + [UInt8](repeating: UInt8(pack & 0xff), count: 1024)
                #expect(try call("PUT", "/v1/apps/\(app)/packs/p\(pack)", body: body, token: adminToken).status == 202, "staged")
            }
            #expect(try call("POST", "/v1/apps/\(app)/releases", token: adminToken).status == 201)
        }
        func blobPath(_ app: String, _ pack: String) throws -> String {
            let envelope = try Envelope.decode(try call("GET", "/v1/apps/\(app)/manifest").body)
            let manifest = try Manifest.decode(Array(try #require(Data(base64Encoded: envelope.payload))))
            let entry = try #require(manifest[pack: pack])
            return try #require(URL(string: entry.url)).path
        }
        let target = try blobPath(victim, "small")
        let targetSHA256 = String(target.split(separator: "/").last ?? "")
        let theirs = try blobPath(app, "p1")
        // The measured request is checked first: 200 and the right bytes.
        let answer = try call("GET", target)
        #expect(answer.status == 200 && Hex.encode(SHA256Hasher.hash(answer.body)) == targetSHA256)
        let liveOfDev = 3
        // Valid reports: every pack of the live release, each client another error kind.
        let started = ContinuousClock.now
        let kinds = ["http", "transport", "manifest", "integrity", "install", "tooLarge", "tls", "other"]
        var reportFiles: [String] = []
        for (index, kind) in kinds.enumerated() {
            let report = DeviceReport(channel: "production", release: liveOfDev, packs: (0..<100).map {
                .init(id: "p\($0)", revision: liveOfDev, outcome: .failed, error: kind, bytes: 100)
            })
            let file = work.path + "/report-\(index).json"
            try FileSystem.writeAtomically(report.encoded(), to: file)
            reportFiles.append(file)
            if index == 0 { #expect(try call("POST", "/v1/apps/\(app)/reports", body: report.encoded()).status == 202) }
        }
        // Trusted publishing: a rule naming a loopback issuer, its keys fetched by one good exchange;
        // then tokens that reach the signature check (a forged signature) or name made-up keys.
        let issuer = try OIDCIssuer()
        defer { issuer.stop() }
        let trusted = try Processes.run(Processes.depotBinary, [
            "apps", "trust", app, "--data", work.path + "/data", "--issuer", issuer.url, "--allow-http", "--audience", "flood", "--claim", "repository=studio/levels",
        ])
        #expect(trusted.status == 0, "\(trusted.stderr)")
        let good = try issuer.mint(["aud": "flood", "repository": "studio/levels"])
        try Eventually.wait(every: .milliseconds(100)) { try call("POST", "/v1/apps/\(app)/oidc-token", token: good).status == 201 }
        let goodParts = good.split(separator: ".")
        let forged = goodParts[0] + "." + goodParts[1] + "." + String(goodParts[2].reversed())
        let madeUpKid = try issuer.mint(["aud": "flood", "repository": "studio/levels"], kid: "made-up")
        let junk = work.path + "/junk.json"
        try FileSystem.writeAtomically(Array("{\"channel\":\"production\",\"release\":".utf8), to: junk)
        let upload = try call("POST", "/v1/apps/\(app)/uploads", token: adminToken)
        let uploadPath = upload.header("Location").flatMap { URL(string: $0)?.path } ?? "/v1/apps/\(app)/uploads/0123456789abcdef0123456789abcdef"
        let pastWindow = work.path + "/past-window.json"
        try FileSystem.writeAtomically(DeviceReport(channel: "production", release: shape.releases - 100, packs: [.init(id: "p1", revision: 1, outcome: .installed, error: nil, bytes: 10)]).encoded(), to: pastWindow)
        var floods: [Flood] = [
            Flood(name: "manifest", path: "/v1/apps/\(app)/manifest", expected: [200]),
            Flood(name: "manifest?query", path: "/v1/apps/\(app)/manifest?v=QUERY", expected: [200]),
            Flood(name: "channel manifest", path: "/v1/apps/\(app)/channels/production/manifest", expected: [200]),
            Flood(name: "download-manifest (an unmanaged app: 404)", path: "/v1/apps/\(app)/download-manifest", expected: [404]),
            Flood(name: "releases", path: "/v1/apps/\(app)/releases", expected: [200]),
            Flood(name: "release", path: "/v1/apps/\(app)/releases/2", expected: [200]),
            Flood(name: "info-plist", path: "/v1/apps/\(app)/info-plist", expected: [200]),
            Flood(name: "channels", path: "/v1/apps/\(app)/channels", expected: [200]),
            Flood(name: "blob (another 1 KiB)", path: theirs, expected: [200]),
            Flood(name: "blob range", path: theirs, headers: ["Range: bytes=10-99"], expected: [206]),
            Flood(name: "blob 404", path: "/v1/apps/\(app)/blobs/" + String(repeating: "ab", count: 32), expected: [404]),
            Flood(name: "unknown app", path: "/v1/apps/com.example.nope/manifest", expected: [404]),
            Flood(name: "unknown path", path: "/nothing/here/QUERY", expected: [404]),
            Flood(name: "metrics without a token", path: "/metrics", expected: [404]),
            Flood(name: "reports (valid)", method: "POST", path: "/v1/apps/\(app)/reports", headers: ["Content-Type: application/json"], bodies: reportFiles, expected: [202, 429, 503]),
            Flood(name: "reports (malformed)", method: "POST", path: "/v1/apps/\(app)/reports", headers: ["Content-Type: application/json"], bodies: [junk], expected: [400, 429]),
            Flood(name: "tus OPTIONS", method: "OPTIONS", path: "/v1/apps/\(app)/uploads", expected: [204]),
            Flood(name: "tus HEAD without a token", method: "HEAD", path: uploadPath, headers: ["Tus-Resumable: 1.0.0"], expected: [401]),
            Flood(name: "tus HEAD with a wrong token", method: "HEAD", path: uploadPath, headers: ["Tus-Resumable: 1.0.0", "Authorization: Bearer dpt_" + String(repeating: "x", count: 40)], expected: [401]),
            Flood(name: "publish with a wrong token", method: "PUT", path: "/v1/apps/\(app)/packs/p1", headers: ["Authorization: Bearer dpt_" + String(repeating: "y", count: 40)], expected: [401]),
            Flood(name: "session without a token", path: "/v1/session", expected: [401]),
            Flood(name: "oidc-token (not a JWT)", method: "POST", path: "/v1/apps/\(app)/oidc-token", headers: ["Authorization: Bearer x.y.z"], expected: [401, 429]),
            Flood(name: "oidc-token (a forged signature)", method: "POST", path: "/v1/apps/\(app)/oidc-token", headers: ["Authorization: Bearer \(forged)"], expected: [401, 429]),
            Flood(name: "oidc-token (a made-up kid)", method: "POST", path: "/v1/apps/\(app)/oidc-token", headers: ["Authorization: Bearer \(madeUpKid)"], expected: [401, 429, 503]),
            Flood(name: "dashboard page", path: "/", expected: [200]),
            Flood(name: "dashboard script", path: "/js/main.js", expected: [200]),
        ]
        // The same routes of the apps with years of history, cycling where a client can.
        let (old1, old2, big) = (HistoryFixture.historyApps[0], HistoryFixture.historyApps[1], HistoryFixture.bigApp)
        let live = shape.releases
        // Reports about every release of the window of both apps, each client starting at
        // another one (curl runs the list in order, `#[1-1000]` times each).
        let steady = "w\(shape.windowPacks - 1)"
        var windowReports: [String] = []
        for (app, release) in [old1, old2].flatMap({ app in (live - shape.window + 1...live).map { (app, $0) } }) {
            let file = work.path + "/window-\(app)-\(release).json"
            let report = DeviceReport(channel: "production", release: release, packs: [.init(id: steady, revision: 1, outcome: .installed, error: nil, bytes: 10)])
            try FileSystem.writeAtomically(report.encoded(), to: file)
            windowReports.append("/v1/apps/\(app)/reports|" + file)
        }
        floods += [
            Flood(name: "history: manifest (3,500 packs)", path: "/v1/apps/\(old1)/manifest", expected: [200]),
            Flood(name: "history: 10,000-pack manifest", path: "/v1/apps/\(big)/manifest", expected: [200]),
            Flood(name: "history: 10,000-pack info-plist", path: "/v1/apps/\(big)/info-plist", expected: [200]),
            Flood(name: "history: channel manifests (300, cycling)", path: "/v1/apps/\(old1)/channels/c[1-300]/manifest", expected: [200]),
            Flood(name: "history: releases (3,000)", path: "/v1/apps/\(old1)/releases", expected: [200]),
            Flood(name: "history: release pages (cycling)", path: "/v1/apps/\(old1)/releases?limit=500&before=[1-3000]", expected: [200]),
            Flood(name: "history: releases by number (3,000, cycling)", path: "/v1/apps/\(old1)/releases/[1-3000]", expected: [200]),
            Flood(name: "history: channels (300)", path: "/v1/apps/\(old1)/channels", expected: [200]),
            Flood(name: "history: info-plist of channels (cycling)", path: "/v1/apps/\(old1)/info-plist?channel=c[1-300]", expected: [200]),
            Flood(name: "history: reports across the window of two apps", method: "POST", path: "", headers: ["Content-Type: application/json"], bodies: windowReports, expected: [202, 429, 503]),
            Flood(name: "history: reports about a release past the window", method: "POST", path: "/v1/apps/\(old1)/reports", headers: ["Content-Type: application/json"], bodies: [pastWindow], expected: [422, 429]),
        ]
        var keys: [String] = []
        for _ in 0..<12 { keys.append(try await device.generateKey()) }
        let attestVictim = AttestVictim(
            device: device, port: port, app: app,
            report: DeviceReport(channel: "production", release: liveOfDev, packs: [.init(id: "p2", revision: liveOfDev, outcome: .installed, bytes: 10)]).encoded(), keys: keys
        )
        floods += try Self.attestFloods(work: work.path, port: port, app: app, release: liveOfDev, victim: attestVictim)
        let control = Flood(name: "healthz (control)", path: "/healthz", expected: [200])

        /// Starts the 8 flooding curl processes; each checked first to get an expected status.
        func start(_ flood: Flood) throws -> [Process] {
            var processes: [Process] = []
            for client in 0..<8 {
                let source = "127.0.0.\(2 + client)"
                if flood.path.isEmpty {
                    // A list of (path|body) pairs: a curl config naming each in turn, from this client's place in it.
                    let config = work.path + "/flood-\(client).curl"
                    var text = ""
                    for index in 0..<flood.bodies.count {
                        let parts = flood.bodies[(index + client * flood.bodies.count / 8) % flood.bodies.count].split(separator: "|").map(String.init)
                        text += "url = \"http://127.0.0.1:\(port)\(parts[0])#[1-1000]\"\ndata-binary = \"@\(parts[1])\"\n"
                        // Headers of the flood, then the entry's own (path|body|header|…).
                        for header in flood.headers + parts.dropFirst(2) { text += "header = \"\(header)\"\n" }
                        text += "output = \"/dev/null\"\nrequest = \"\(flood.method)\"\nnext\n"
                    }
                    try FileSystem.writeAtomically(Array(text.utf8), to: config)
                    let first = flood.bodies[(client * flood.bodies.count / 8) % flood.bodies.count].split(separator: "|").map(String.init)
                    let probe = try Processes.run("/usr/bin/curl", ["-s", "-o", "/dev/null", "--interface", source, "-X", flood.method, "-w", "%{http_code}", "--data-binary", "@" + first[1]]
                        + (flood.headers + first.dropFirst(2)).flatMap { ["-H", $0] } + ["http://127.0.0.1:\(port)" + first[0]])
                    #expect(flood.expected.contains(Int(probe.stdout) ?? 0), "\(flood.name): \(probe.stdout) \(probe.stderr)")
                    let process = Process()
                    process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
                    process.arguments = ["-s", "--interface", source, "--parallel", "--parallel-max", "4", "--parallel-immediate", "-K", config]
                    process.standardOutput = FileHandle.nullDevice
                    process.standardError = FileHandle.nullDevice
                    try process.run()
                    processes.append(process)
                    continue
                }
                // curl's glob makes the one command a flood: in the query string where the route asks
                // for one, else in the fragment (never sent: the same request again and again).
                let url = "http://127.0.0.1:\(port)" + (flood.path.contains("QUERY") ? flood.path.replacingOccurrences(of: "QUERY", with: "[1-100000000]") : flood.path + "#[1-100000000]")
                var arguments = ["-s", "-o", "/dev/null", "--interface", source, "-X", flood.method]
                if flood.method == "HEAD" { arguments = ["-s", "-o", "/dev/null", "--interface", source, "-I"] }
                for header in flood.headers { arguments += ["-H", header] }
                if !flood.bodies.isEmpty { arguments += ["--data-binary", "@" + flood.bodies[client % flood.bodies.count]] }
                // The route answers as the docs say before it is timed.
                let probed = url.replacingOccurrences(of: "#[1-100000000]", with: "").replacingOccurrences(of: "[1-100000000]", with: "0")
                    .replacingOccurrences(of: #"\[(\d+)-\d+\]"#, with: "$1", options: .regularExpression)
                let probe = try Processes.run("/usr/bin/curl", arguments + ["-w", "%{http_code}", probed])
                #expect(flood.expected.contains(Int(probe.stdout) ?? 0), "\(flood.name): \(probe.stdout) \(probe.stderr)")
                let process = Process()
                process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
                process.arguments = arguments + ["--parallel", "--parallel-max", "4", "--parallel-immediate", url]
                process.standardOutput = FileHandle.nullDevice
                process.standardError = FileHandle.nullDevice
                try process.run()
                processes.append(process)
            }
            return processes
        }
        /// wrk on the victim's blob while `flood` runs: requests per second, p99, the origin's RSS.
        func measure(_ flood: Flood, seconds: Int = Self.seconds) throws -> Measure {
            let processes = try start(flood)
            defer {
                // SIGKILL: a process started from a test's thread inherits its blocked signals (SIGTERM too).
                for process in processes {
                    #expect(process.isRunning, "\(flood.name): a flooding client stopped before the measure ended")
                    kill(process.processIdentifier, SIGKILL)
                    process.waitUntilExit()
                }
            }
            // The flood is on before the measure begins (its first answers arrived).
            Thread.sleep(forTimeInterval: 0.2)
            try flood.alongside?()
            let result = try Processes.run("/usr/bin/wrk", ["-t2", "-c64", "-d\(seconds)s", "--latency", "http://127.0.0.1:\(port)\(target)"])
            let lines = result.stdout.split(separator: "\n")
            let rate = lines.first { $0.hasPrefix("Requests/sec:") }.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
            let p99 = lines.first { $0.trimmingCharacters(in: .whitespaces).hasPrefix("99%") }.map { String($0.split(separator: " ").last ?? "") } ?? "?"
            #expect(!result.stdout.contains("Non-2xx"), "\(flood.name): \(result.stdout)")
            return Measure(rate: rate, p99: p99, rssKiB: ProcessProbe.residentKiB(pid))
        }
        var rows: [String] = []
        // Three controls to begin the window of recent ones.
        var controls = try (0..<3).map { _ in try measure(control).rate }
        var peak = 0
        // DEPOT_FLOOD_ROUTES=a,b: only the routes whose names contain one of them (to look at one).
        let only = ProcessInfo.processInfo.environment["DEPOT_FLOOD_ROUTES"].map { $0.split(separator: ",").map(String.init) }
        /// The best of up to `tries` pairs (a control right before the route, so that both see the
        /// same machine; the ratio is to the median of the last five controls: one slow control is
        /// not the machine); stops at the first at 0.8 or more.
        func judge(_ flood: Flood, tries: Int, seconds: Int) throws -> (ratio: Double, control: Measure, flooded: Measure) {
            var best: (ratio: Double, control: Measure, flooded: Measure)?
            for _ in 0..<tries {
                let before = try measure(control, seconds: seconds)
                controls.append(before.rate)
                let recent = controls.suffix(5).sorted()
                let base = Measure(rate: recent[recent.count / 2], p99: before.p99, rssKiB: before.rssKiB)
                let flooded = try measure(flood, seconds: seconds)
                let ratio = base.rate > 0 ? flooded.rate / base.rate : 0
                peak = max(peak, base.rssKiB, flooded.rssKiB)
                if best == nil || ratio > best!.ratio { best = (ratio, base, flooded) }
                if ratio >= 0.8 { break }
            }
            return try #require(best)
        }
        // This VM's rates drift by ±25% from one measure to the next, and for minutes at a time:
        // a route under 0.8 five times in a row is measured again once every other route was,
        // with measures twice as long, each between two controls. Noise passes; a real slowdown (0.02× and 0.19× before
        // issue 41's fixes, 0.78× for a release by number before it was kept in memory) stays
        // under at every try.
        var results: [(flood: Flood, ratio: Double, control: Measure, flooded: Measure)] = []
        for flood in floods where only.map({ $0.contains { flood.name.contains($0) } }) ?? true {
            let result = try judge(flood, tries: 5, seconds: Self.seconds)
            results.append((flood, result.ratio, result.control, result.flooded))
        }
        /// A route's flood between two controls (before and after, measures twice as long): the
        /// ratio to their mean cancels the drift of minutes that the window of recent controls
        /// follows late (CI at ec20aab: controls rose from 10,400 to 13,500 req/s while the
        /// flooded rates held at 11,000, and a route read 0.798 eight times against the window).
        func bracketed(_ flood: Flood, tries: Int) throws -> (ratio: Double, control: Measure, flooded: Measure) {
            var best: (ratio: Double, control: Measure, flooded: Measure)?
            var before = try measure(control, seconds: 2 * Self.seconds)
            for _ in 0..<tries {
                let flooded = try measure(flood, seconds: 2 * Self.seconds)
                let after = try measure(control, seconds: 2 * Self.seconds)
                let base = Measure(rate: (before.rate + after.rate) / 2, p99: before.p99, rssKiB: max(before.rssKiB, after.rssKiB))
                let ratio = base.rate > 0 ? flooded.rate / base.rate : 0
                peak = max(peak, base.rssKiB, flooded.rssKiB)
                if best == nil || ratio > best!.ratio { best = (ratio, base, flooded) }
                if ratio >= 0.8 { break }
                before = after
            }
            return try #require(best)
        }
        for (index, result) in results.enumerated() where result.ratio < 0.8 {
            let again = try bracketed(result.flood, tries: 5)
            if again.ratio > result.ratio { results[index] = (result.flood, again.ratio, again.control, again.flooded) }
        }
        for result in results {
            let row = String(
                format: "| %@ | %.0f (p99 %@) | %.0f (p99 %@) | %.2f | %d MiB |", result.flood.name, result.control.rate, result.control.p99, result.flooded.rate,
                result.flooded.p99, result.ratio, result.flooded.rssKiB / 1024
            )
            rows.append(row)
            #expect(result.ratio >= 0.8, "\(row)")
            #expect(result.flooded.rssKiB < rssBoundKiB, "\(row)")
        }
        #expect(peak < rssBoundKiB, "peak RSS \(peak) KiB, bound \(rssBoundKiB) KiB")
        // The origin still counts reports and answers: nothing was left behind by the floods.
        #expect(try call("GET", target).status == 200)
        print("flood: \(ContinuousClock.now - started) for the floods; route | control req/s | flooded req/s | ratio | RSS\n" + rows.joined(separator: "\n") + "\npeak RSS \(peak / 1024) MiB")
    }
}
