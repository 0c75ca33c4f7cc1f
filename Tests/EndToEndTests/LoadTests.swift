import DepotCore
import DepotTestSupport
import Foundation
import Synchronization
import Testing

/// Load on the real `depot serve` process: many connections of mixed reads (wrk; no HEAD, which
/// wrk cannot frame: it waits for the body a HEAD answer announces), and publishers racing each other. CI runs them short; `DEPOT_LOAD_SECONDS` and `DEPOT_LOAD_PUBLISHES` run
/// the full sizes (60 s, 50 publishes each).
@Suite("Load", .serialized, .enabled(if: HeavyTests.enabled, "run alone by Deploy/setup.sh test, with DEPOT_HEAVY_TESTS=1"))
struct LoadTests {
    static let seconds = Int(ProcessInfo.processInfo.environment["DEPOT_LOAD_SECONDS"] ?? "") ?? 4
    static let publishes = Int(ProcessInfo.processInfo.environment["DEPOT_LOAD_PUBLISHES"] ?? "") ?? 6

    @Test("256 connections of mixed manifest, blob, conditional (304) and Range requests: no error, no failed status, open files and memory back where they were")
    func mixedReads() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/wrk") else {
            Issue.record("wrk is not installed (Deploy/setup.sh installs it)")
            return
        }
        let work = TemporaryDirectory("depot-load")
        defer { work.remove() }
        // Warnings only: nothing drains the process's output after its banner, and a full pipe
        // would stall the logging threads (the access log is an info line per request).
        let server = try ServeProcess(data: work.path + "/data", environment: ["DEPOT_CONNECTION_LIMIT": "1024", "DEPOT_LOG_LEVEL": "warning"])
        defer { server.process.terminate(); server.process.waitUntilExit() }
        let port = UInt16(server.port)!
        let app = "com.example.dev"
        let bodies = [[UInt8](repeating: 1, count: 1024), (0..<262_144).map { UInt8(truncatingIfNeeded: $0 &* 31) }]
        for (index, body) in bodies.enumerated() {
            let put = "PUT /v1/apps/\(app)/packs/p\(index)?release=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(server.token)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
            #expect(try RawHTTP.send(port: port, put, body: body).first?.status == 201)
        }
        let manifest = try #require(try RawHTTP.send(port: port, "GET /v1/apps/\(app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
        let envelope = try Envelope.decode(manifest.body)
        let entries = try Manifest.decode(Array(try #require(Data(base64Encoded: envelope.payload)))).packs.sorted { $0.size < $1.size }
        let blobs = try entries.map { try #require(URL(string: $0.url)).path }
        #expect(blobs.count == 2)
        // Every peer request checked once before the load: 200 and the right bytes.
        for (path, entry) in zip(blobs, entries) {
            let response = try #require(try RawHTTP.send(port: port, "GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
            #expect(response.status == 200 && Int64(response.body.count) == entry.size && Hex.encode(SHA256Hasher.hash(response.body)) == entry.sha256)
        }
        let script = work.path + "/mixed.lua"
        try FileSystem.writeAtomically(Array("""
            local manifest, small, large, etag = "/v1/apps/\(app)/manifest", "\(blobs[0])", "\(blobs[1])", '"\(entries[1].sha256)"'

            request = function()
              local pick = math.random(5)
              if pick == 1 then return wrk.format("GET", manifest)
              elseif pick == 2 then return wrk.format("GET", small)
              elseif pick == 3 then return wrk.format("GET", large, { ["If-None-Match"] = etag })
              elseif pick == 4 then return wrk.format("GET", large, { ["Range"] = "bytes=1000-70999" })
              else return wrk.format("GET", large) end
            end
            """.utf8), to: script)
        func wrk(seconds: Int) throws -> String {
            // One wrk thread in CI, two at full size: the other suites run alongside.
            let threads = Self.seconds > 5 ? "-t2" : "-t1"
            let result = try Processes.run("/usr/bin/wrk", [threads, "-c256", "-d\(seconds)s", "--timeout", "10s", "-s", script, "http://127.0.0.1:\(port)"])
            return result.stdout
        }
        _ = try wrk(seconds: 1)
        let pid = server.process.processIdentifier
        // The baseline once the warm-up's connections are gone.
        let filesBefore = ProcessProbe.settledOpenFiles(pid)
        let rssBefore = ProcessProbe.residentKiB(pid)
        let report = try wrk(seconds: Self.seconds)
        let requests = report.split(separator: "\n").first { $0.contains(" requests in ") }.flatMap { Int($0.split(separator: " ").first ?? "") } ?? 0
        #expect(requests > 500 * Self.seconds, "\(report)")
        #expect(!report.contains("Non-2xx or 3xx responses"), "\(report)")
        #expect(!report.contains("Socket errors"), "\(report)")
        let filesAfter = ProcessProbe.openFiles(pid, backTo: filesBefore, within: 20)
        #expect(filesAfter <= filesBefore, "open files \(filesBefore) before, \(filesAfter) after")
        let rssAfter = ProcessProbe.residentKiB(pid)
        #expect(rssAfter < rssBefore + 32 * 1024, "resident memory \(rssBefore) KiB before, \(rssAfter) KiB after \(requests) requests")
        print("load: \(requests) requests in \(Self.seconds) s on 256 connections, RSS \(rssBefore) -> \(rssAfter) KiB, open files \(filesBefore) -> \(filesAfter)")
    }

    @Test("8 publishers at once, each publishing its own pack again and again with --release: every publish is a release, the versions are contiguous, and the live manifest has each pack's last content")
    func concurrentPublishers() throws {
        let work = TemporaryDirectory("depot-load")
        defer { work.remove() }
        let server = try ServeProcess(data: work.path + "/data", environment: ["DEPOT_LOG_LEVEL": "warning"])
        defer { server.process.terminate(); server.process.waitUntilExit() }
        let port = UInt16(server.port)!
        let app = "com.example.dev"
        let failures = Mutex<[String]>([])
        let (url, token) = (server.url, server.token)
        DispatchQueue.concurrentPerform(iterations: 8) { publisher in
            for round in 0..<Self.publishes {
                let file = work.path + "/p\(publisher)-\(round)"
                try? FileSystem.writeAtomically(Array("publisher \(publisher) round \(round)".utf8), to: file)
                let result = try? Processes.run(Processes.depotBinary, [
                    "publish", file, "--server", url, "--app", app, "--pack", "p\(publisher)", "--token", token, "--release", "--quiet",
                ])
                if result?.status != 0 { failures.withLock { $0.append("p\(publisher) round \(round): \(result?.stderr ?? "did not run")") } }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
        let list = try #require(try RawHTTP.send(port: port, "GET /v1/apps/\(app)/releases HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
        struct Releases: Decodable { struct Release: Decodable { var version: Int }; var releases: [Release]; var live: Int? }
        let releases = try JSONDecoder().decode(Releases.self, from: Data(list.body))
        let versions = releases.releases.map(\.version).sorted()
        #expect(versions.count == 8 * Self.publishes, "\(versions)")
        #expect(versions == Array((versions.first ?? 1)...(versions.last ?? 0)), "contiguous: \(versions)")
        print("load: 8 publishers × \(Self.publishes) publishes: \(versions.count) releases, contiguous")
        #expect(releases.live == versions.last)
        let manifest = try #require(try RawHTTP.send(port: port, "GET /v1/apps/\(app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
        let packs = try Manifest.decode(Array(try #require(Data(base64Encoded: try Envelope.decode(manifest.body).payload)))).packs
        #expect(packs.count == 8)
        for publisher in 0..<8 {
            let last = Array("publisher \(publisher) round \(Self.publishes - 1)".utf8)
            #expect(packs.first { $0.id == "p\(publisher)" }?.plaintextSHA256 == Hex.encode(SHA256Hasher.hash(last)), "p\(publisher) has its last content")
        }
    }
}
