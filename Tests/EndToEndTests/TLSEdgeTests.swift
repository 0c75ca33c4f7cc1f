import DepotClient
import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Synchronization
import Testing

/// The deployment a device talks to, on loopback: one origin and real nginx edges with TLS from a
/// CA the test makes, serving one name (`assets.example.test`) on one port from different
/// addresses, as DNS would spread devices over edges. Clients pick an edge with `--resolve`.
@Suite("End to end: the production topology over TLS", .serialized)
struct TLSEdgeTests {
    static let host = "assets.example.test"

    @Test("20 clients over https through two edges, a release through an edge, a cut download resumed, the origin down, an untrusted CA")
    func topology() async throws {
        #expect(FileManager.default.isExecutableFile(atPath: "/usr/sbin/nginx"), "nginx is not installed: run Deploy/setup.sh deps")
        let work = TemporaryDirectory("depot-tls")
        defer { work.remove() }
        let pki = try TestPKI(folder: work.path, host: Self.host)
        let port = try NginxEdge.freePort(on: ["127.0.0.1", "127.0.0.2", "127.0.0.3"])
        let server = "https://\(Self.host):\(port)"
        let log = CapturedLog()
        let maxAge = 2
        try await withServer(configure: {
            $0.publicURL = server
            $0.manifestMaxAge = maxAge
            $0.logger = log.logger()
        }) { origin in
            let certificate = NginxEdge.Certificate(certificate: pki.certificate, key: pki.key)
            let edgeA = try NginxEdge(address: "127.0.0.1", port: port, originPort: origin.port, tls: certificate, proxyBind: "127.0.0.1")
            let edgeB = try NginxEdge(address: "127.0.0.2", port: port, originPort: origin.port, tls: certificate, proxyBind: "127.0.0.2")
            // A third edge whose way to the origin cuts the first response short.
            let cutter = try FaultyProxy(upstreamPort: origin.port) { index, _ in index == 0 ? .cutAfter(700_000) : .forward }
            let edgeC = try NginxEdge(address: "127.0.0.3", port: port, originPort: cutter.port, tls: certificate)
            let environment = ["XDG_CACHE_HOME": work.path + "/cache"]
            @Sendable func depot(_ arguments: [String], via edge: String?, trusted: Bool = true) throws -> Processes.Result {
                var extra = edge.map { ["--resolve", "\(Self.host):\(port):\($0)"] } ?? []
                if trusted { extra += ["--ca-file", pki.caFile] }
                return try Processes.run(Processes.depotBinary, arguments + extra, environment: environment)
            }
            let transport = { (edge: String) in
                HTTPTransport(options: TransportOptions(caFile: pki.caFile, resolve: ["\(Self.host):\(port)": edge]))
            }
            func liveVersion(via edge: String) async throws -> Int {
                let response = try await transport(edge).get(URL(string: "\(server)/v1/apps/\(origin.app)/manifest")!)
                #expect(response.status == 200)
                return try Envelope.decode(response.body).verifiedManifest(trusting: origin.clientConfiguration().trustedKeys()).version
            }

            // Publishing over https through edge A (tus, streamed).
            let contents = [("core", 3_000_003, "essential"), ("world", 5_000_005, "prefetch"), ("extras", 700_007, "onDemand")]
            for (index, (pack, size, policy)) in contents.enumerated() {
                let file = try work.file(pack, size: size, seed: UInt64(index + 1))
                let published = try depot(["publish", file, "--server", server, "--app", origin.app, "--pack", pack, "--policy", policy, "--release",
                                           "--token", origin.token, "--quiet"], via: "127.0.0.1")
                #expect(published.status == 0, "\(published.stderr)")
            }
            // The edge speaks HTTP/2 (and HTTP/1.1, which the client uses) and sends HSTS.
            let curl = try Processes.run("/usr/bin/curl", ["-s", "-D", "-", "-o", "/dev/null", "-w", "version=%{http_version}", "--http2",
                                                           "--cacert", pki.caFile, "--resolve", "\(Self.host):\(port):127.0.0.1",
                                                           "\(server)/v1/apps/\(origin.app)/manifest"])
            #expect(curl.stdout.contains("version=2") && curl.stdout.lowercased().contains("strict-transport-security: max-age=31536000"), "\(curl.stdout)")

            let config = work.path + "/client.json"
            try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: config)
            let app = origin.app
            @Sendable func sync(_ dest: String, via edge: String?, trusted: Bool = true) throws -> Processes.Result {
                try depot(["sync", "--server", server, "--app", app, "--config", config, "--dest", dest, "--quiet"], via: edge, trusted: trusted)
            }

            // 20 clients at once, half through each edge, all byte-identical.
            let results = Mutex<[Int: Processes.Result]>([:])
            let group = DispatchGroup()
            for client in 0..<20 {
                group.enter()
                Thread.detachNewThread {
                    defer { group.leave() }
                    let result = try? sync(work.path + "/device-\(client)", via: client % 2 == 0 ? "127.0.0.1" : "127.0.0.2")
                    results.withLock { $0[client] = result }
                }
            }
            group.wait()
            for client in 0..<20 {
                let result = results.withLock { $0[client] }
                #expect(result?.status == 0, "client \(client): \(result?.stderr ?? "did not run")")
                for pack in ["core", "world"] {
                    #expect(try FileSystem.readFile(work.path + "/device-\(client)/packs/\(pack)") == FileSystem.readFile(work.path + "/" + pack))
                }
                #expect(!FileSystem.exists(work.path + "/device-\(client)/packs/extras"), "on-demand packs wait until asked for")
            }
            // The origin saw each blob at most once per edge (the edges tell apart by address).
            let fetches = log.all.filter { $0.hasPrefix("access ") && $0.contains("route=blob") && $0.contains("status=200") }.map { line in
                let fields = line.split(separator: " ")
                return (fields.first { $0.hasPrefix("client=") } ?? "") + " " + (fields.first { $0.hasPrefix("path=") } ?? "")
            }
            #expect(Set(fetches).count == fetches.count, "a blob fetched twice through one edge: \(fetches.sorted())")
            #expect(Set(fetches.map { $0.split(separator: " ")[0] }) == ["client=127.0.0.1", "client=127.0.0.2"])

            // A new release through edge B reaches both edges within the manifest's max-age.
            let before = try await liveVersion(via: "127.0.0.1")
            let world2 = try work.file("world2", size: 4_000_004, seed: 9)
            let republished = try depot(["publish", world2, "--server", server, "--app", origin.app, "--pack", "world", "--release",
                                         "--token", origin.token, "--quiet"], via: "127.0.0.2")
            #expect(republished.status == 0, "\(republished.stderr)")
            let start = ContinuousClock.now
            // Each edge fetched the old manifest before `start`, so it must serve the new one to
            // any request made after max-age (+1 s: nginx keeps time in seconds). What is checked
            // is when each poll was made, not how long a busy machine took to answer it.
            var seen: Set<String> = []
            var staleAfterMaxAge: [String] = []
            while seen.count < 2 && ContinuousClock.now - start < .seconds(maxAge + 60) {
                for edge in ["127.0.0.1", "127.0.0.2"] where !seen.contains(edge) {
                    let asked = ContinuousClock.now - start
                    if try await liveVersion(via: edge) > before {
                        seen.insert(edge)
                    } else if asked > .seconds(maxAge + 1) {
                        staleAfterMaxAge.append("\(edge) at \(asked)")
                    }
                }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(seen.count == 2, "the new release reached \(seen.sorted())")
            #expect(staleAfterMaxAge.isEmpty, "an edge served the old manifest past max-age: \(staleAfterMaxAge)")
            let updated = try sync(work.path + "/device-0", via: "127.0.0.1")
            #expect(updated.status == 0, "\(updated.stderr)")
            #expect(try FileSystem.readFile(work.path + "/device-0/packs/world") == FileSystem.readFile(world2))

            // A download through edge C, cut short on its way, resumes with Range and ends identical.
            let manifest = try Envelope.decode(FileSystem.readFile(work.path + "/device-0/.depot/manifest-production.json"))
                .verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())
            let world = try #require(manifest[pack: "world"])
            let fetched = try depot(["fetch", world.url, "--out", work.path + "/fetched", "--size", String(world.size), "--sha256", world.sha256, "--quiet"],
                                    via: "127.0.0.3")
            #expect(fetched.status == 0, "\(fetched.stderr)")
            #expect(edgeC.accessLog.contains { $0.contains("/blobs/\(world.sha256)") && $0.contains("range=bytes=") }, "\(edgeC.accessLog)")
            #expect(edgeC.accessLog.first?.contains("range=-") == true, "the first attempt asked for the whole blob: \(edgeC.accessLog)")

            // The Info.plist keys name the edge's https URL and host; a simulated device given them
            // installs through the edge with no development switch.
            let plist = try depot(["plist", "--server", server, "--app", origin.app], via: "127.0.0.2")
            #expect(plist.status == 0 && plist.stdout.contains("<string>\(server)/v1/apps/\(origin.app)/manifest</string>"), "\(plist.stdout)")
            #expect(plist.stdout.contains("<string>\(Self.host)</string>"))
            try FileSystem.writeAtomically(Array(plist.stdout.utf8), to: work.path + "/Info.plist")
            let device = try depot(["sync", "--server", server, "--app", origin.app, "--config", config, "--dest", work.path + "/device-ba", "--quiet",
                                    "--event", "install", "--info-plist", work.path + "/Info.plist"], via: "127.0.0.2")
            #expect(device.status == 0 && device.stdout.contains("device has core revision 1") && device.stdout.contains("device has world"), "\(device.stderr)")

            // An untrusted CA: a clear refusal, nothing installed.
            let untrusted = try sync(work.path + "/untrusted", via: "127.0.0.1", trusted: false)
            #expect(untrusted.status != 0 && untrusted.stderr.contains("not trusted"), "\(untrusted.stderr)")
            #expect(FileSystem.contents(of: work.path + "/untrusted/packs").isEmpty)

            // The origin goes down: the edges serve the cached blobs and the last manifest.
            origin.server.stop()
            try await Task.sleep(for: .seconds(maxAge + 1))
            let offline = try sync(work.path + "/offline", via: "127.0.0.1")
            #expect(offline.status == 0, "\(offline.stderr)")
            #expect(try FileSystem.readFile(work.path + "/offline/packs/world") == FileSystem.readFile(world2))
            #expect(try FileSystem.readFile(work.path + "/offline/packs/core") == FileSystem.readFile(work.path + "/core"))
            _ = (edgeA, edgeB)
        }
    }
}
