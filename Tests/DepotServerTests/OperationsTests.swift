import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Synchronization
import Testing

@Suite("Origin: hardening")
struct HardeningTests {
    @Test("Malformed requests get a 4xx and close; the server still serves afterwards", arguments: [
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length : 3\r\n\r\nabc",
        "PUT /v1/apps/com.example.game/packs/a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
        "PUT /v1/apps/com.example.game/packs/a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        "PUT /v1/apps/com.example.game/packs/a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + String(repeating: "a", count: 100_000) + "\r\n\r\n",
        "GET /v1/apps/a/b/c/d/e/f/%2e%2e/%2e%2e HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /v1/apps\\..\\keys HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
        "GET /healthz HTTP/1.1\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    ])
    func malformed(text: String) async throws {
        try await withServer { origin in
            let responses = RawHTTP.parse(try RawHTTP.exchange(port: origin.port, Array(text.utf8), timeout: 2))
            let status = try #require(responses.first?.status)
            #expect((400..<500).contains(status) || status == 505, "\(status)")
            #expect(responses.count == 1)
            #expect(try request(origin, "GET", "/healthz").status == 200)
            #expect(FileSystem.contents(of: origin.data.path + "/blobs").isEmpty)
        }
    }

    /// libmicrohttpd drops a connection whose request line it cannot parse, before any callback
    /// runs: no response at all, which is as clear as the peer deserves, and nothing runs.
    @Test("An unparsable request line closes the connection without running anything")
    func garbageRequestLine() async throws {
        try await withServer { origin in
            for text in ["GARBAGE\r\n\r\n", "\u{1}\u{2}\u{3}\r\n\r\n", "GET\r\n\r\n"] {
                let responses = try RawHTTP.parse(RawHTTP.exchange(port: origin.port, Array(text.utf8), timeout: 2))
                let allClientErrors = responses.allSatisfy { (400..<500).contains($0.status) }
                #expect(allClientErrors, "\(text)")
                #expect(try request(origin, "GET", "/healthz").status == 200)
            }
        }
    }

    /// RFC 9112 §5.2 lets a server replace an obsolete line folding with a space; libmicrohttpd does.
    @Test("An obsolete folded header line is unfolded, not refused")
    func obsFold() async throws {
        try await withServer { origin in
            let text = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\nConnection: close\r\n\r\n"
            let responses = try RawHTTP.parse(RawHTTP.exchange(port: origin.port, Array(text.utf8)))
            #expect(responses.map(\.status) == [200])
        }
    }

    @Test("A pipelined request smuggled behind ambiguous framing is never executed")
    func pipelinedSmuggling() async throws {
        try await withServer { origin in
            let smuggled = "PUT /v1/apps/\(origin.app)/packs/smuggled HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(origin.token)\r\nContent-Length: 3\r\n\r\nabc"
            for framing in ["Content-Length: 0\r\nContent-Length: \(smuggled.utf8.count)", "Transfer-Encoding: chunked\r\nContent-Length: 5", "Transfer-Encoding: identity"] {
                let text = "PUT /v1/apps/\(origin.app)/packs/front HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(origin.token)\r\n\(framing)\r\n\r\n" + smuggled
                    + "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\n\r\n"
                let responses = try RawHTTP.parse(RawHTTP.exchange(port: origin.port, Array(text.utf8), timeout: 2))
                #expect(responses.map(\.status) == [400], "\(framing)")
                #expect(responses.first?.header("Connection")?.lowercased() == "close")
            }
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)/manifest").status == 404)
            #expect(FileSystem.contents(of: origin.data.path + "/blobs").isEmpty)
        }
    }

    @Test("Keep-alive pipelining of honest requests still works")
    func honestPipelining() async throws {
        try await withServer { origin in
            let text = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            let responses = RawHTTP.parse(try RawHTTP.exchange(port: origin.port, Array(text.utf8)))
            #expect(responses.map(\.status) == [200, 404, 200])
        }
    }
}

@Suite("Origin: operations")
struct OperationsTests {
    @Test("/metrics exposes requests by route and status, bytes, in-flight, latency and publishes, to the metrics token only (L13)")
    func metrics() async throws {
        let metricsToken = "scraper-" + String(repeating: "9", count: 24)
        try await withServer(configure: { $0.metricsToken = metricsToken }) { origin in
            let (blob, path, _) = try publishedBlob(origin)
            _ = try request(origin, "GET", path)
            _ = try request(origin, "GET", "/v1/apps/\(origin.app)/blobs/" + String(repeating: "0", count: 64))
            #expect(try request(origin, "GET", "/metrics").status == 401)
            #expect(try request(origin, "GET", "/metrics", headers: ["Authorization: Bearer \(origin.token)"]).status == 401, "an app's token is not the metrics token")
            #expect(try request(origin, "GET", "/metrics", headers: ["Authorization: Bearer \(metricsToken.dropLast())8"]).status == 401)
            let text = try request(origin, "GET", "/metrics", headers: ["Authorization: Bearer \(metricsToken)"]).bodyText
            #expect(text.contains("depot_http_requests_total{route=\"blob\",status=\"200\"} 2"), "\(text)")
            #expect(text.contains("depot_http_requests_total{route=\"error\",status=\"404\"} 1"))
            #expect(text.contains("depot_http_requests_total{route=\"error\",status=\"401\"} 3"), "\(text)")
            #expect(text.contains("depot_http_requests_total{route=\"publish\",status=\"201\"} 1"))
            #expect(text.contains("depot_http_response_body_bytes_total{route=\"blob\"} \(2 * blob.count)"))
            #expect(text.contains("depot_publishes_total{app=\"\(origin.app)\",result=\"published\"} 1"))
            #expect(text.contains("depot_http_requests_in_flight 1"))
            #expect(text.contains("depot_http_request_duration_seconds_bucket{route=\"blob\",le=\""))
            #expect(text.contains("depot_http_request_duration_seconds_count{route=\"blob\"} 2"))
        }
    }

    @Test("The access log records each request and never a token or credentials")
    func accessLog() async throws {
        let log = CapturedLog()
        try await withServer(configure: { $0.logger = log.logger() }) { origin in
            _ = try upload(origin, pack: "a", [1, 2, 3])
            _ = try request(origin, "GET", "/v1/apps/\(origin.app)/manifest", headers: ["Authorization: Basic dXNlcjpzZWNyZXRwYXNz"])
            _ = try request(origin, "PUT", "/v1/apps/\(origin.app)/packs/b", headers: ["Authorization: Bearer dpt_not_a_real_token"], body: [1])
            // The completion callback runs after the response is sent.
            Eventually.wait { log.all.filter { $0.hasPrefix("access") }.count >= 3 }
            let lines = log.all.filter { $0.hasPrefix("access") }
            #expect(lines.count == 3)
            #expect(lines.contains { $0.contains("method=PUT") && $0.contains("path=/v1/apps/\(origin.app)/packs/a query=release=true") && $0.contains("status=201") && $0.contains("bytes=") && $0.contains("duration_ms=") })
            #expect(lines.contains { $0.contains("method=PUT") && $0.contains("status=401") })
            for line in log.all {
                #expect(!line.contains(origin.token) && !line.contains("dpt_") && !line.contains("dXNlcjpzZWNyZXRwYXNz") && !line.lowercased().contains("authorization"))
            }
        }
    }

    @Test("Optional download credentials gate the app's reads, not publishing")
    func downloadCredentials() async throws {
        try await withServer { origin in
            let (_, path, _) = try publishedBlob(origin)
            let (user, password) = try #require(try AppStore(folder: DataFolder(origin.data.path)).setDownloadCredentials(origin.app, enabled: true))
            let good = "Authorization: Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
            let wrong = "Authorization: Basic " + Data("\(user):nope".utf8).base64EncodedString()
            for target in [path, "/v1/apps/\(origin.app)/manifest", "/v1/apps/\(origin.app)/releases/1", "/v1/apps/\(origin.app)/releases", "/v1/apps/\(origin.app)/info-plist"] {
                let none = try request(origin, "GET", target)
                #expect(none.status == 401, "\(target)")
                #expect(none.header("WWW-Authenticate")?.hasPrefix("Basic realm=") == true)
                #expect(try request(origin, "GET", target, headers: [wrong]).status == 401)
                let ok = try request(origin, "GET", target, headers: [good])
                #expect(ok.status == 200, "\(target)")
                #expect(ok.header("Cache-Control")?.hasPrefix("private") == true, "\(target)")
            }
            #expect(try upload(origin, pack: "q", [9]).status == 201)
            try AppStore(folder: DataFolder(origin.data.path)).setDownloadCredentials(origin.app, enabled: false)
            #expect(try request(origin, "GET", path).status == 200)
        }
    }

    @Test("shutdown lets a download in flight finish, refuses new connections, and returns")
    func drain() async throws {
        let data = TemporaryDirectory("depot-drain")
        defer { data.remove() }
        let token = try prepareDataFolder(data.path, app: "com.example.drain")
        let server = try startServer(dataPath: data.path, threads: 2)
        let port = server.port
        let file = try data.file("big", size: 32 << 20)
        _ = try await HTTPTransportForTests.put(port: port, path: "/v1/apps/com.example.drain/packs/big?release=true", file: file, token: token)
        let blob = try #require(FileSystem.contents(of: data.path + "/blobs").first.flatMap { FileSystem.contents(of: data.path + "/blobs/" + $0).first })
        let size = try #require(FileSystem.fileSize(data.path + "/blobs/\(blob.prefix(2))/\(blob)"))

        // A client that reads slowly keeps its request in flight. It reads on a thread of its
        // own from the start: on the shared test pool a busy machine could delay it past the
        // grace period.
        let slow = try SlowReader(port: port, request: "GET /v1/apps/com.example.drain/blobs/\(blob) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        let outcome = Mutex<Int?>(nil)
        let started = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            // The answer has begun: the request is in flight when the shutdown starts.
            let first = slow.read(atLeast: 1)
            started.signal()
            outcome.withLock { $0 = first + ((try? slow.readAll()) ?? -1) }
            finished.signal()
        }
        started.wait()
        #expect(server.shutdownInBackground(gracePeriod: .seconds(20)))
        // The listener closes first: new connections are refused while the slow one drains.
        #expect(Eventually.wait { (try? RawHTTP.exchange(port: port, Array("GET /healthz HTTP/1.1\r\n\r\n".utf8), timeout: 1)) == nil })
        finished.wait()
        let received = outcome.withLock { $0 } ?? -1
        #expect(Int64(received) >= size)
        server.stop()
    }

    @Test("/metrics is off (404) on the public listener unless a metrics token is configured (L13)")
    func metricsOff() async throws {
        try await withServer { origin in
            let response = try request(origin, "GET", "/metrics")
            #expect(response.status == 404 && response.bodyText.contains("--metrics-token-file"))
            #expect(try request(origin, "GET", "/metrics", headers: ["Authorization: Bearer \(origin.token)"]).status == 404)
        }
    }
}
