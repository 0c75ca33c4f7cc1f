import DepotClient
import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// `depot verify-edge` against real nginx edges: a healthy TLS edge passes, and three broken
/// ones — compression on for `application/octet-stream`, a way to the origin that cuts one
/// pack, an old blob served under a manifest's URL — are each named.
@Suite("depot verify-edge: edges checked against the manifest", .serialized)
struct VerifyEdgeTests {
    static let host = "assets.example.test"

    static func published(_ result: Processes.Result) -> String {
        result.stdout.split(separator: " ").drop { $0 != "sha256" }.dropFirst().first.map { String($0.prefix(64)) } ?? ""
    }

    @Test("A healthy TLS edge passes, hashing whole bodies and authenticating sampled records; depot publish --verify-edge checks a release through it")
    func healthy() async throws {
        let work = TemporaryDirectory("depot-verify-edge")
        defer { work.remove() }
        let pki = try TestPKI(folder: work.path, host: Self.host)
        let port = try NginxEdge.freePort()
        let server = "https://\(Self.host):\(port)"
        try await withServer(configure: {
            $0.publicURL = server
            $0.manifestMaxAge = 1
        }) { origin in
            let edge = try NginxEdge(port: port, originPort: origin.port, tls: NginxEdge.Certificate(certificate: pki.certificate, key: pki.key))
            let through = ["--server", server, "--app", origin.app, "--resolve", "\(Self.host):\(port):127.0.0.1", "--ca-file", pki.caFile]
            let environment = ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": origin.token]
            for (index, (pack, size)) in [("core", 3_000_003), ("world", 2_000_002)].enumerated() {
                let file = try work.file(pack, size: size, seed: UInt64(index + 1))
                let published = try Processes.run(Processes.depotBinary, ["publish", file, "--pack", pack, "--release", "--quiet"] + through, environment: environment)
                #expect(published.status == 0, "\(published.stderr)")
            }
            let config = work.path + "/client.json"
            try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: config)

            let whole = try Processes.run(Processes.depotBinary, ["verify-edge", "--config", config] + through)
            #expect(whole.status == 0 && whole.stdout.contains("1 manifest and 2 downloads checked (") && whole.stdout.hasSuffix(" bytes), 0 problems\n"), "\(whole.stdout)\(whole.stderr)")
            let sampled = try Processes.run(Processes.depotBinary, ["verify-edge", "--config", config, "--sample", "3"] + through)
            #expect(sampled.status == 0 && sampled.stdout.contains(", 0 problems"), "\(sampled.stdout)\(sampled.stderr)")
            #expect(edge.accessLog.contains { $0.contains("range=bytes=") }, "sampled records were fetched by Range")
            // Without the edge's CA the handshake fails: a device would refuse the connection.
            let untrusted = try Processes.run(Processes.depotBinary, ["verify-edge", "--server", server, "--app", origin.app, "--resolve", "\(Self.host):\(port):127.0.0.1"])
            #expect(untrusted.status == 1 && untrusted.stdout.contains("TLS"), "\(untrusted.stdout)\(untrusted.stderr)")

            let world2 = try work.file("world2", size: 2_500_000, seed: 9)
            let checked = try Processes.run(Processes.depotBinary, ["publish", world2, "--pack", "world", "--release", "--quiet", "--verify-edge", server,
                                                                    "--verify-config", config] + through, environment: environment)
            #expect(checked.status == 0 && checked.stdout.contains("1 manifest and 2 downloads checked (") && checked.stdout.contains(" bytes), 0 problems"), "\(checked.stdout)\(checked.stderr)")
        }
    }

    @Test("Broken edges, each named: gzip for octet-stream (every pack), a cut pack (that one), an old blob under a manifest's URL (that one, by its SHA-256)")
    func brokenEdges() async throws {
        let work = TemporaryDirectory("depot-verify-broken")
        defer { work.remove() }
        let port = try NginxEdge.freePort(on: ["127.0.0.1", "127.0.0.2", "127.0.0.3"])
        let server = "http://\(Self.host):\(port)"
        try await withServer(configure: { $0.publicURL = server }) { origin in
            let direct = ["--server", "http://127.0.0.1:\(origin.port)", "--app", origin.app]
            let environment = ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": origin.token]
            var sha: [String: String] = [:]
            for (pack, size, seed) in [("core", 1_000_001, 1), ("world", 2_000_002, 2), ("level", 1_500_000, 3), ("level", 1_500_000, 4)] {
                let file = try work.file("\(pack)-\(seed)", size: size, seed: UInt64(seed))
                let published = try Processes.run(Processes.depotBinary, ["publish", file, "--pack", pack, "--release"] + direct, environment: environment)
                #expect(published.status == 0, "\(published.stderr)")
                sha[seed == 3 ? "level-old" : pack] = Self.published(published)
            }
            let config = work.path + "/client.json"
            try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: config)
            func verify(_ address: String) throws -> Processes.Result {
                try Processes.run(Processes.depotBinary, ["verify-edge", "--server", server, "--app", origin.app, "--config", config, "--allow-http",
                                                          "--resolve", "\(Self.host):\(port):\(address)"])
            }
            let blobs = "/v1/apps/\(origin.app)/blobs/"

            // A: compression switched on for octet-stream, as a CDN setting would.
            let gzip = try NginxEdge(address: "127.0.0.1", port: port, originPort: origin.port,
                                     http: "gzip on; gzip_types application/octet-stream; gzip_min_length 1; gzip_proxied any;")
            let compressed = try verify("127.0.0.1")
            let gzipped = compressed.stdout.split(separator: "\n").filter { $0.hasPrefix("problem: ") && $0.contains("Content-Encoding gzip") }
            #expect(compressed.status == 1 && gzipped.count == 3, "\(compressed.stdout)")
            // The problems are the message: no "Error: ExitCode(rawValue: 1)" after them (issue 51).
            #expect(compressed.stderr.isEmpty, "\(compressed.stderr)")
            #expect(["core", "world", "level"].allSatisfy { pack in gzipped.contains { $0.contains("pack \(pack) ") } })
            _ = gzip

            // B: the edge's way to the origin cuts the world pack's blob short (only that URL goes
            // through the cutting proxy, one connection per request).
            let cutter = try FaultyProxy(upstreamPort: origin.port) { _, _ in .cutAfter(300_000) }
            let cutting = try NginxEdge(address: "127.0.0.2", port: port, originPort: origin.port,
                                        server: "location = \(blobs)\(sha["world"] ?? "?") { proxy_pass http://127.0.0.1:\(cutter.port); }")
            let cut = try verify("127.0.0.2")
            let cutProblems = cut.stdout.split(separator: "\n").filter { $0.hasPrefix("problem: ") }
            #expect(cut.status == 1 && cutProblems.count == 1 && cutProblems.first?.contains("pack world ") == true, "\(cut.stdout)")
            _ = cutting

            // C: the edge still serves the level pack's old blob (same size) under the new URL.
            let stale = try NginxEdge(address: "127.0.0.3", port: port, originPort: origin.port,
                                      server: "location = \(blobs)\(sha["level"] ?? "?") { proxy_pass http://assetdepot_origin\(blobs)\(sha["level-old"] ?? "?"); }")
            let old = try verify("127.0.0.3")
            let oldProblems = old.stdout.split(separator: "\n").filter { $0.hasPrefix("problem: ") }
            #expect(old.status == 1 && oldProblems.count == 1 && oldProblems.first?.contains("pack level ") == true
                && oldProblems.first?.contains("SHA-256") == true, "\(old.stdout)")
            _ = stale
        }
    }

    @Test("Without --config, an unsigned manifest's URLs on another host are not fetched (an internal address here), with --any-host they are but without credentials, with --config (signed) with them")
    func unsignedManifestStaysOnTheEdge() async throws {
        let inside = try HostileServer { connection in
            connection.send("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        }
        defer { inside.stop() }
        let work = TemporaryDirectory("depot-verify-hosts")
        defer { work.remove() }
        // The manifest names the internal service's address for every pack.
        try await withServer(configure: { $0.publicURL = "http://localhost:\(inside.port)" }) { origin in
            try put(origin, "core", bytes(10_000, seed: 1))
            let edge = ["--server", "http://127.0.0.1:\(origin.port)", "--app", origin.app, "--allow-http", "--channel", "production", "--credentials", "user:secret"]
            let refused = try Processes.run(Processes.depotBinary, ["verify-edge"] + edge)
            #expect(refused.status == 1 && refused.stdout.contains("not fetched: it is not on the edge"), "\(refused.stdout)\(refused.stderr)")
            #expect(inside.requests.isEmpty, "nothing went to the other host")

            let followed = try Processes.run(Processes.depotBinary, ["verify-edge", "--any-host"] + edge)
            #expect(followed.status == 1 && followed.stdout.contains("HTTP 404"), "\(followed.stdout)")
            #expect(inside.requests.count == 1 && inside.requests.allSatisfy { !$0.head.lowercased().contains("authorization:") }, "no credentials to another host")

            let config = work.path + "/client.json"
            try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: config)
            let signed = try Processes.run(Processes.depotBinary, ["verify-edge", "--config", config] + edge)
            #expect(signed.status == 1 && signed.stdout.contains("HTTP 404"), "\(signed.stdout)")
            #expect(inside.requests.count == 2 && inside.requests.last?.head.lowercased().contains("authorization: basic") == true, "a signed manifest's URLs get the credentials")
        }
    }

    @Test("An edge that accepts a pack's request and never answers: the check stops at --deadline, cancels it and says so")
    func deadline() async throws {
        let manifest = Locked<[UInt8]>([])
        let hold = DispatchSemaphore(value: 0)
        let edge = try HostileServer { connection in
            if connection.request.head.contains("/manifest ") {
                let body = manifest.withLock { $0 }
                connection.send(Array("HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n".utf8) + body)
            } else if connection.request.head.contains("/blobs/") {
                hold.wait()
                hold.signal()
            } else {
                connection.send("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            }
        }
        defer {
            hold.signal()
            edge.stop()
        }
        try await withServer(configure: { $0.publicURL = edge.url.absoluteString }) { origin in
            try put(origin, "core", bytes(10_000, seed: 1))
            manifest.withLock { $0 = (try? ChannelBindingTests.envelope(origin, "/v1/apps/\(origin.app)/manifest")) ?? [] }
            let checked = try Processes.run(Processes.depotBinary, [
                "verify-edge", "--server", edge.url.absoluteString, "--app", origin.app, "--allow-http", "--channel", "production", "--deadline", "2",
            ])
            #expect(checked.status == 1 && checked.stdout.contains("stopped at its deadline of 2 s"), "\(checked.stdout)\(checked.stderr)")
            #expect(edge.requests.contains { $0.head.contains("/blobs/") }, "the pack's request was made, and held")
        }
    }
}
