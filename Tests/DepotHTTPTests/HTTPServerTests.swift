import DepotCore
import DepotHTTP
import DepotTestSupport
import Foundation
import Synchronization
import Testing

/// A handler for exercising the server: `/hello` bytes, `/file` a file region, `PUT /upload`
/// streams a body and answers its length and SHA-256, `PUT /deny` refuses before the body.
final class TestHandler: HTTPHandler {
    let seen = Mutex<[String]>([])
    let aborted = Mutex(0)
    let filePath: String

    init(filePath: String) { self.filePath = filePath }

    func handle(_ request: HTTPRequest) -> HTTPDisposition {
        seen.withLock { $0.append("\(request.method) \(request.path)") }
        switch (request.method, request.path) {
        case ("GET", "/hello"), ("HEAD", "/hello"):
            return .respond(.bytes(Array("hello, world".utf8), contentType: "text/plain"))
        case ("GET", "/file"):
            let fd = try! FileDescriptor.openForReading(filePath)
            return .respond(HTTPResponse(status: 200, body: .file(FileRegion(descriptor: fd.release(), offset: 10, length: 1000))))
        case ("PUT", "/upload"):
            return .receiveBody(Counter(handler: self))
        case ("PUT", "/deny"):
            return .respond(.error(status: 401, code: "unauthorized", message: "no"))
        default:
            return .respond(.error(status: 404, code: "not_found", message: request.path))
        }
    }

    final class Counter: HTTPBodyReceiver {
        let handler: TestHandler
        let hasher = SHA256Hasher()
        var count = 0
        var chunks = 0
        init(handler: TestHandler) { self.handler = handler }
        func receive(_ chunk: UnsafeRawBufferPointer) -> HTTPResponse? {
            hasher.update(chunk)
            count += chunk.count
            chunks += 1
            return nil
        }
        func finish() -> HTTPResponse { .bytes(Array("\(count) \(Hex.encode(hasher.finalize()))".utf8), contentType: "text/plain") }
        func abort() { handler.aborted.withLock { $0 += 1 } }
    }
}

func withHTTPServer<T>(_ body: (HTTPServer, TestHandler, String) async throws -> T) async throws -> T {
    let dir = TemporaryDirectory("depot-http")
    defer { dir.remove() }
    let file = try dir.file("data", size: 4096)
    let handler = TestHandler(filePath: file)
    let server = try HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 2), handler: handler)
    defer { server.stop() }
    return try await body(server, handler, file)
}

@Suite("HTTP server over libmicrohttpd")
struct HTTPServerTests {
    @Test("Port 0 binds a real port; bytes, HEAD and keep-alive with two requests on one connection")
    func bytesAndKeepAlive() async throws {
        try await withHTTPServer { server, handler, _ in
            #expect(server.port != 0)
            let responses = try RawHTTP.send(port: server.port,
                "GET /hello HTTP/1.1\r\nHost: x\r\n\r\nHEAD /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            #expect(responses.count == 2)
            #expect(responses.first?.status == 200)
            #expect(responses.first?.bodyText == "hello, world")
            #expect(responses.first?.header("Connection") == nil)
            #expect(responses.last?.header("Content-Length") == "12")
            #expect(responses.last?.body.isEmpty == true)
            #expect(handler.seen.withLock { $0 } == ["GET /hello", "HEAD /hello"])
        }
    }

    @Test("A file region is sent from the descriptor, exactly")
    func fileRegion() async throws {
        try await withHTTPServer { server, _, file in
            let response = try RawHTTP.send(port: server.port, "GET /file HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
            let expected = Array(try FileSystem.readFile(file)[10..<1010])
            #expect(response?.header("Content-Length") == "1000")
            #expect(response?.body == expected)
        }
    }

    @Test("A body is streamed to the receiver chunk by chunk, with Content-Length or chunked")
    func streamedBody() async throws {
        try await withHTTPServer { server, _, _ in
            let body = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            let digest = Hex.encode(SHA256Hasher.hash(body))
            let response = try RawHTTP.send(port: server.port,
                "PUT /upload HTTP/1.1\r\nHost: x\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n", body: body).first
            #expect(response?.status == 200)
            #expect(response?.bodyText == "\(body.count) \(digest)")

            let chunked = "PUT /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
            let second = try RawHTTP.send(port: server.port, chunked).first
            #expect(second?.bodyText == "11 \(Hex.encode(SHA256Hasher.hash(Array("hello world".utf8))))")
        }
    }

    @Test("A refusal before the body closes the connection: the body is never run as a request")
    func earlyRefusal() async throws {
        try await withHTTPServer { server, handler, _ in
            let hidden = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
            let responses = try RawHTTP.send(port: server.port,
                "PUT /deny HTTP/1.1\r\nHost: x\r\nContent-Length: \(hidden.utf8.count)\r\n\r\n" + hidden)
            #expect(responses.map(\.status) == [401])
            #expect(responses.first?.header("Connection")?.lowercased() == "close")
            #expect(!handler.seen.withLock { $0 }.contains("GET /smuggled"))
        }
    }

    /// The last case libmicrohttpd refuses itself (with its own HTML body); the others reach our checks.
    @Test("Ambiguous framing gets 400 and Connection: close, and the request behind it never runs", arguments: [
        ("Content-Length: 5\r\nContent-Length: 40", true),
        ("Content-Length: 40\r\nTransfer-Encoding: chunked", true),
        ("Transfer-Encoding: gzip", true),
        ("Transfer-Encoding: gzip, chunked", true),
        ("Content-Length: +40", false),
    ])
    func smuggling(framing: String, ours: Bool) async throws {
        try await withHTTPServer { server, handler, _ in
            let hidden = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
            let responses = try RawHTTP.send(port: server.port,
                "PUT /upload HTTP/1.1\r\nHost: x\r\n\(framing)\r\n\r\n0\r\n\r\n" + hidden, timeout: 2)
            #expect(responses.first?.status == 400)
            #expect(responses.first?.header("Connection")?.lowercased() == "close")
            if ours { #expect(responses.first?.bodyText.contains("\"code\":\"bad_framing\"") == true) }
            #expect(!handler.seen.withLock { $0 }.contains("GET /smuggled"))
            // The server still serves.
            #expect(try RawHTTP.send(port: server.port, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first?.status == 200)
        }
    }

    @Test("Hostile targets get 400 (or 414) with a JSON body, and never reach the handler", arguments: [
        ("/x/%00/y", 400), ("/x/%2e%2e/hello", 400), ("/x/../hello", 400), ("/x/./hello", 400), ("/a%2fb", 400),
        ("/a\\b", 400), ("/a%5cb", 400), ("/a%zz", 400), ("/a%", 400), ("/a//b", 400), ("/" + String(repeating: "a", count: 3000), 414),
    ])
    func hostileTargets(target: String, status: Int) async throws {
        try await withHTTPServer { server, handler, _ in
            let response = try RawHTTP.send(port: server.port, "GET \(target) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
            #expect(response?.status == status)
            #expect(response?.header("Content-Type") == "application/json")
            #expect(handler.seen.withLock { $0 }.isEmpty)
        }
    }

    @Test("A client that leaves mid-body makes the receiver abort")
    func abortedUpload() async throws {
        try await withHTTPServer { server, handler, _ in
            _ = try RawHTTP.exchange(port: server.port,
                Array("PUT /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n".utf8) + [UInt8](repeating: 1, count: 5000), timeout: 0.3)
            var waited = 0
            while handler.aborted.withLock({ $0 }) == 0 && waited < 100 {
                try await Task.sleep(for: .milliseconds(20))
                waited += 1
            }
            #expect(handler.aborted.withLock { $0 } == 1)
        }
    }

    @Test("stop() closes the listener and is idempotent")
    func stop() async throws {
        let handler = TestHandler(filePath: "/dev/null")
        let server = try HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 1), handler: handler)
        let port = server.port
        #expect(try RawHTTP.send(port: port, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first?.status == 200)
        server.stop()
        server.stop()
        #expect(throws: (any Error).self) { try RawHTTP.exchange(port: port, Array("GET / HTTP/1.1\r\n\r\n".utf8)) }
    }

    @Test("A port another server holds is a clear error, for its address and for every address: never two servers sharing one port's connections")
    func takenPort() throws {
        let handler = TestHandler(filePath: "/dev/null")
        let first = try HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 1), handler: handler)
        defer { first.stop() }
        for host in ["127.0.0.1", "0.0.0.0"] {
            #expect(throws: HTTPServerError.startFailed(host: host, port: first.port), "\(host)") {
                try HTTPServer(configuration: HTTPServerConfiguration(host: host, port: first.port, threads: 1), handler: handler)
            }
        }
        #expect(try RawHTTP.send(port: first.port, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first?.status == 200)
    }

    @Test("An unbindable host is a clear error")
    func badHost() {
        #expect(throws: HTTPServerError.invalidHost("not a host")) {
            try HTTPServer(configuration: HTTPServerConfiguration(host: "not a host", port: 0), handler: TestHandler(filePath: "/dev/null"))
        }
    }
}

@Suite("Request target parsing")
struct RequestTargetTests {
    @Test func decodesSegmentsAndQuery() throws {
        let target = try RequestTarget.parse("/v1/apps/com.example/packs/a%20b?policy=essential&tag=x+y&tag=z")
        #expect(target.segments == ["v1", "apps", "com.example", "packs", "a b"])
        #expect(target.query.map(\.name) == ["policy", "tag", "tag"])
        #expect(target.query[1].value == "x y")
        #expect(try RequestTarget.parse("/").segments == [])
        #expect(try RequestTarget.parse("/a/").segments == ["a"])
    }

    @Test func refusals() {
        #expect(throws: RequestTarget.Failure.nulByte) { try RequestTarget.parse("/a%00b") }
        #expect(throws: RequestTarget.Failure.dotSegment) { try RequestTarget.parse("/a/%2E%2E/b") }
        #expect(throws: RequestTarget.Failure.encodedSlash) { try RequestTarget.parse("/a%2Fb") }
        #expect(throws: RequestTarget.Failure.notOriginForm) { try RequestTarget.parse("http://x/a") }
        #expect(throws: RequestTarget.Failure.notOriginForm) { try RequestTarget.parse("*") }
        #expect(throws: RequestTarget.Failure.invalidUTF8) { try RequestTarget.parse("/%ff") }
        #expect(throws: RequestTarget.Failure.controlCharacter) { try RequestTarget.parse("/a%0d%0ab") }
    }
}
