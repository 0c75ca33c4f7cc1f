import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// What an anonymous request costs the origin does not grow with what the origin holds.
///
/// Counted, not timed: the real `depot serve` on ``HistoryFixture``'s small and large shapes
/// (100× the releases, channels and window), each route asked the same thing 20 times on one
/// connection while `strace` follows the process; the system calls that touch the data folder,
/// made by the thread that served the connection (its `sendfile`s of the body aside), are
/// divided by the requests. Each route's
/// count must be the same at both sizes (a rate on this VM drifts ±25%; a count does not), and
/// bounded. `FloodTests` keeps the rates, for what counts cannot see (CPU, locks, memory).
@Suite("Cost", .serialized, .enabled(if: HeavyTests.enabled, "run with the heavy suites, DEPOT_HEAVY_TESTS=1"))
struct CostTests {
    /// A route and the requests sent to it.
    struct Probe {
        var name: String
        var method = "GET"
        var path: String
        var body: [UInt8] = []
        var expected: Int
        /// Paths and bodies sent in turn instead of `path` and `body` (reports cycling over releases).
        var cycle: [(path: String, body: [UInt8])] = []

        /// The path and body of request `index`.
        func request(_ index: Int) -> (path: String, body: [UInt8]) { cycle.isEmpty ? (path, body) : cycle[index % cycle.count] }
    }

    static let requests = 20

    /// The probes, against a fixture of `shape` (the same targets at both sizes).
    static func probes(_ shape: HistoryFixture.Shape) -> [Probe] {
        let (app, other, big) = (HistoryFixture.historyApps[0], HistoryFixture.historyApps[1], HistoryFixture.bigApp)
        let live = shape.releases
        func report(_ app: String, release: Int, packs: [String]) -> [UInt8] {
            // The window's packs: revision 1 unless changed at that step (HistoryFixture's rule).
            let report = DeviceReport(channel: "production", release: release, packs: packs.map { .init(id: $0, revision: 1, outcome: .installed, error: nil, bytes: 10) })
            return report.encoded()
        }
        // A pack the window never changes (its revision is 1 in every window release).
        let steady = "w\(shape.windowPacks - 1)"
        return [
            Probe(name: "manifest", path: "/v1/apps/\(app)/manifest", expected: 200),
            Probe(name: "manifest?query", path: "/v1/apps/\(app)/manifest?v=1", expected: 200),
            Probe(name: "channel manifest", path: "/v1/apps/\(app)/channels/c1/manifest", expected: 200),
            Probe(name: "download-manifest (unmanaged: 404)", path: "/v1/apps/\(app)/download-manifest", expected: 404),
            Probe(name: "releases", path: "/v1/apps/\(app)/releases", expected: 200),
            Probe(name: "releases, an older page", path: "/v1/apps/\(app)/releases?before=\(live / 2)&limit=20", expected: 200),
            Probe(name: "release (an old one)", path: "/v1/apps/\(app)/releases/2", expected: 200),
            Probe(name: "release 404", path: "/v1/apps/\(app)/releases/\(live + 5)", expected: 404),
            Probe(name: "info-plist", path: "/v1/apps/\(app)/info-plist", expected: 200),
            Probe(name: "info-plist of a channel", path: "/v1/apps/\(app)/info-plist?channel=c1", expected: 200),
            Probe(name: "channels", path: "/v1/apps/\(app)/channels", expected: 200),
            Probe(name: "blob 404", path: "/v1/apps/\(app)/blobs/" + String(repeating: "ab", count: 32), expected: 404),
            Probe(name: "big manifest", path: "/v1/apps/\(big)/manifest", expected: 200),
            Probe(name: "big info-plist", path: "/v1/apps/\(big)/info-plist", expected: 200),
            Probe(name: "unknown app", path: "/v1/apps/com.example.nope/manifest", expected: 404),
            Probe(name: "report (live release)", method: "POST", path: "/v1/apps/\(app)/reports", body: report(app, release: live, packs: [steady]), expected: 202),
            Probe(name: "report (release in the window)", method: "POST", path: "/v1/apps/\(other)/reports", body: report(other, release: live - 1, packs: [steady]), expected: 202),
            Probe(
                // Releases before the live one: each read from a kept listing (the live one's check is cheaper).
                name: "reports cycling over the window of two apps", method: "POST", path: "/v1/apps/\(app)/reports", expected: 202,
                cycle: [app, other].flatMap { app in (live - shape.window + 1..<live).map { ("/v1/apps/\(app)/reports", report(app, release: $0, packs: [steady])) } }
            ),
            Probe(name: "report (a release not made: 422)", method: "POST", path: "/v1/apps/\(app)/reports", body: report(app, release: live + 1, packs: ["p1"]), expected: 422),
            Probe(name: "report (a pack the release lacks: 422)", method: "POST", path: "/v1/apps/\(app)/reports", body: report(app, release: live - 1, packs: ["nope"]), expected: 422),
            Probe(name: "session without a token", path: "/v1/session", expected: 401),
            Probe(name: "tus OPTIONS", method: "OPTIONS", path: "/v1/apps/\(app)/uploads", expected: 204),
        ]
    }

    struct Count: Equatable {
        /// Data-folder system calls per request (the serving thread's).
        var data: Double
        /// Every system call per request (the serving thread's), for the note.
        var all: Double
    }

    @Test("Each anonymous route makes as many data-folder system calls per request at 100× the history as at 1×")
    func flatCost() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/strace") else {
            Issue.record("strace is not installed (Deploy/setup.sh installs it)")
            return
        }
        var counts: [String: [Count]] = [:]
        var names: [String] = []
        for shape in [HistoryFixture.Shape.small, .large] {
            // In memory: the fixture writes thousands of files, each made durable.
            let work = TemporaryDirectory.inMemory("depot-cost")
            defer { work.remove() }
            let built = ContinuousClock.now
            try HistoryFixture.build(data: work.path + "/data", shape: shape)
            print("cost: fixture \(shape) built in \(ContinuousClock.now - built)")
            let server = try ServeProcess(data: work.path + "/data", environment: ["DEPOT_LOG_LEVEL": "warning", "DEPOT_PUBLIC_URL": HistoryFixture.publicURL], bootstrap: false)
            defer { server.process.terminate(); server.process.waitUntilExit() }
            let port = UInt16(server.port)!
            for probe in Self.probes(shape) {
                if shape.releases == HistoryFixture.Shape.small.releases { names.append(probe.name) }
                // What a route keeps, it keeps from its first requests (a report's release is read
                // off the serving thread meanwhile: 503 until it is kept).
                for index in 0..<max(1, probe.cycle.count) {
                    let warm = try Eventually.wait(every: .milliseconds(100)) {
                        RawHTTP.parse(try RawHTTP.exchange(port: port, Self.requestBytes(probe, index: index, last: true, marker: ""))).first?.status == probe.expected
                    }
                    #expect(warm, "\(probe.name): never answered \(probe.expected)")
                }
                _ = try Self.exchange(probe, port: port, count: 1)
                let count = try Self.count(probe, port: port, pid: server.process.processIdentifier, data: work.path + "/data")
                counts[probe.name, default: []].append(count)
            }
            // The first request after a change: what a publish leaves the next reader to do.
            let made = try Processes.run(Processes.depotBinary, ["tokens", "create", "--data", work.path + "/data", "--app", HistoryFixture.historyApps[0], "--role", "admin"])
            let token = try #require(made.stdout.split(separator: "\n").last.map(String.init))
            var published = 0
            let publish = {
                published += 1
                let put = "PUT /v1/apps/\(HistoryFixture.historyApps[0])/packs/fresh?release=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nContent-Length: 16\r\nConnection: close\r\n\r\n"
                // The first publish reads the app's history once (its pack revisions): a debug build takes seconds.
                let answer = try RawHTTP.send(port: port, put, body: Array(String(format: "fresh %010d", published).utf8), timeout: 120)
                #expect(answer.first?.status == 201, "publish: \(answer.first?.bodyText ?? "no answer")")
            }
            // Once first, untraced: the first publish reads the app's pack revisions from its history.
            try publish()
            for probe in Self.probes(shape) where ["manifest", "releases", "channels", "report (live release)"].contains(probe.name) {
                var probe = probe
                probe.name += ", after a publish"
                if probe.method == "POST" {
                    // About the release just published (its live number, a pack it lists).
                    let live = shape.releases + published + 1
                    probe.body = DeviceReport(channel: "production", release: live, packs: [.init(id: "fresh", revision: published + 1, outcome: .installed, error: nil, bytes: 10)]).encoded()
                }
                if shape.releases == HistoryFixture.Shape.small.releases { names.append(probe.name) }
                let count = try Self.count(probe, port: port, pid: server.process.processIdentifier, data: work.path + "/data", requests: 1, before: publish)
                counts[probe.name, default: []].append(count)
            }
        }
        var rows: [String] = []
        for name in names {
            let pair = try #require(counts[name])
            try #require(pair.count == 2)
            rows.append(String(format: "| %@ | %.2f | %.2f | %.1f | %.1f |", name, pair[0].data, pair[1].data, pair[0].all, pair[1].all))
            #expect(pair[0].data == pair[1].data, "\(name): \(pair[0].data) data-folder system calls per request at 1×, \(pair[1].data) at 100×")
            // A few stats steady; the first request after a publish also makes the new manifest's
            // answer file (create, unlink, write, a descriptor per server thread).
            #expect(pair[1].data <= (name.hasSuffix("after a publish") ? 16 : 8), "\(name): \(pair[1].data) data-folder system calls per request")
        }
        print("cost: route | data-folder syscalls/request 1× | 100× | all syscalls/request 1× | 100×\n" + rows.joined(separator: "\n"))
    }

    /// `count` requests of `probe` on one connection (pipelined); checks every status.
    @discardableResult
    static func exchange(_ probe: Probe, port: UInt16, count: Int, marker: String = "") throws -> [RawHTTP.Response] {
        var bytes: [UInt8] = []
        for index in 0..<count {
            bytes += requestBytes(probe, index: index, last: index == count - 1, marker: index == 0 ? marker : "")
        }
        let responses = RawHTTP.parse(try RawHTTP.exchange(port: port, bytes, timeout: 30))
        #expect(responses.count == count, "\(probe.name): \(responses.count) answers to \(count) requests")
        for response in responses where response.status != probe.expected {
            Issue.record("\(probe.name): \(response.status) \(response.bodyText.prefix(300))")
            break
        }
        return responses
    }

    /// One request of `probe`, marked with `marker` (a header strace shows) unless it is empty.
    static func requestBytes(_ probe: Probe, index: Int = 0, last: Bool, marker: String) -> [UInt8] {
        let mark = marker.isEmpty ? "" : "X-Cost: \(marker)\r\n"
        let (path, body) = probe.request(index)
        return Array("\(probe.method) \(path) HTTP/1.1\r\n\(mark)Host: x\r\nContent-Length: \(body.count)\r\nConnection: \(last ? "close" : "keep-alive")\r\n\r\n".utf8) + body
    }

    /// The serving thread's system calls per request while `strace` follows the origin.
    static func count(_ probe: Probe, port: UInt16, pid: Int32, data: String, requests: Int = CostTests.requests, before: () throws -> Void = {}) throws -> Count {
        let trace = FileManager.default.temporaryDirectory.path + "/depot-cost-\(pid)-\(Hex.encode(SecureRandom.bytes(4))).trace"
        defer { try? FileManager.default.removeItem(atPath: trace) }
        let strace = Process()
        // Through python, which unblocks SIGINT: a process started from a test's thread inherits
        // its blocked signals, and strace stops cleanly (its trace whole) only on SIGINT.
        strace.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        strace.arguments = [
            "-c", "import os, signal, sys; signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM}); os.execv('/usr/bin/strace', sys.argv[1:])",
            "strace", "-f", "-yy", "-s", "256", "-o", trace, "-p", String(pid),
        ]
        strace.standardError = FileHandle.nullDevice
        try strace.run()
        // Attached once a request made now shows in the trace.
        var sync = 0
        let attached = try Eventually.wait(every: .milliseconds(50)) {
            sync += 1
            _ = try RawHTTP.send(port: port, "GET /healthz HTTP/1.1\r\nX-Cost: sync\(sync)\r\nHost: x\r\nConnection: close\r\n\r\n")
            return ((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").contains("X-Cost: sync")
        }
        try #require(attached, "strace did not attach")
        try before()
        let marker = "measure-" + Hex.encode(SecureRandom.bytes(4))
        try exchange(probe, port: port, count: requests, marker: marker)
        kill(strace.processIdentifier, SIGINT)
        strace.waitUntilExit()
        let lines = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n")
        // The thread that read the marked request served the whole connection.
        guard let first = lines.firstIndex(where: { $0.contains("X-Cost: \(marker)") }), let thread = lines[first].split(separator: " ").first else {
            Issue.record("\(probe.name): the marked request is not in the trace")
            return Count(data: -1, all: -1)
        }
        var (inData, all) = (0, 0)
        for line in lines[first...] where line.split(separator: " ").first == thread && !line.contains("resumed>") {
            all += 1
            // The body's bytes going out by sendfile (a large manifest from its file) are the
            // answer itself, not work to find it: counted in `all` only.
            if line.contains(data) && !line.drop(while: { $0 != " " }).drop(while: { $0 == " " }).hasPrefix("sendfile(") { inData += 1 }
        }
        return Count(data: Double(inData) / Double(requests), all: Double(all) / Double(requests))
    }
}
