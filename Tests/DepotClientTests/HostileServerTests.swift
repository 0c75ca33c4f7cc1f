import DepotCore
@testable import DepotClient
@testable import DepotTransport
import DepotTestSupport
import Foundation
import Testing

/// The client against servers that break the rules (or anything between that pretends to be
/// one): every case ends in a clear error, in bounded time and memory, never a crash, a hang or
/// a body taken for another. Each runs through both engines: the socket engine Linux uses and
/// URLSession (Apple platforms' engine; libcurl underneath here).
@Suite("The client against hostile servers")
struct HostileServerTests {
    enum Engine: String, CaseIterable, Sendable { case socket, urlSession }

    /// One GET through `engine`, the body collected (at most `limit` bytes).
    static func get(_ engine: Engine, _ url: URL, limit: Int64 = 1 << 20, options: TransportOptions = TransportOptions(responseDeadline: 3)) async throws -> HTTPTransport.Response {
        let request = HTTPTransport.Request(method: "GET", url: url, headers: [])
        switch engine {
        case .socket:
            return try await HTTPTransport(timeout: 5, options: options).exchange(request, limit: limit)
        case .urlSession:
            return try await URLSessionEngine(timeout: 5, deadline: options.responseDeadline).exchange(request, progress: nil) { _ in .collect(limit: limit) }
        }
    }

    /// A server that answers every request with `response`, then holds or closes.
    static func answering(_ response: [UInt8], hold: Bool = false) throws -> HostileServer {
        try HostileServer { connection in
            connection.send(response)
            if hold { Thread.sleep(forTimeInterval: 8) }
        }
    }

    static func refused(_ engine: Engine, _ response: String, hold: Bool = false, _ why: String? = nil) async throws {
        let server = try answering(Array(response.utf8), hold: hold)
        defer { server.stop() }
        do {
            let answer = try await get(engine, server.url)
            Issue.record("\(engine): accepted \(answer.status) with \(answer.body.count) bytes")
        } catch let error as ClientError {
            if let why, engine == .socket { #expect(error.description.contains(why), "\(error)") }
        }
    }

    @Test("A chunk size of 2^63-1 after a first chunk is an error, not a trap (M3)", arguments: Engine.allCases)
    func chunkSizeOverflow(_ engine: Engine) async throws {
        try await Self.refused(engine, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nA\r\n7fffffffffffffff\r\n", "longer than")
        try await Self.refused(engine, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nA\r\nffffffffffffffffff\r\n", "too long")
        try await Self.refused(engine, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nA\r\n", "not hexadecimal")
    }

    @Test("An endless chunk-size line is cut at 4 KiB, not read into memory (M2)", arguments: Engine.allCases)
    func endlessChunkLine(_ engine: Engine) async throws {
        let server = try HostileServer { connection in
            connection.send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;")
            let filler = [UInt8](repeating: UInt8(ascii: "a"), count: 64 << 10)
            for _ in 0..<256 where connection.send(filler) {}  // 16 MiB at most, then it closes
        }
        defer { server.stop() }
        await #expect(throws: ClientError.self) { try await Self.get(engine, server.url) }
    }

    @Test("Framing that could run one body into another is refused: two Content-Lengths, a malformed one, Transfer-Encoding other than chunked or with Content-Length, no CRLF after chunk data (L9)", arguments: Engine.allCases)
    func framing(_ engine: Engine) async throws {
        try await Self.refused(engine, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nabcde", "two Content-Length")
        try await Self.refused(engine, "HTTP/1.1 200 OK\r\nContent-Length: 3x\r\n\r\nabc", "not a number")
        try await Self.refused(engine, "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nabc", "not a number")
        try await Self.refused(engine, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n", "no CRLF after")
        if engine == .socket {
            // The system's parser (libcurl here, CFNetwork on a device) decides these itself:
            // libcurl lets Transfer-Encoding win over Content-Length, and decodes gzip.
            try await Self.refused(engine, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "both")
            try await Self.refused(engine, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nabc", "only chunked")
            try await Self.refused(engine, "HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 0\r\n\r\n", "folded")
        }
    }

    @Test("Interim 1xx responses are skipped and the final one read (L9)", arguments: Engine.allCases)
    func interimResponses(_ engine: Engine) async throws {
        let server = try Self.answering(Array("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".utf8))
        defer { server.stop() }
        let response = try await Self.get(engine, server.url)
        #expect(response.status == 200 && response.body == Array("ok".utf8))
    }

    @Test("A server that trickles its head a byte at a time fails at the response deadline, though each read is within the timeout (L9)", arguments: Engine.allCases)
    func trickle(_ engine: Engine) async throws {
        let server = try HostileServer { connection in
            for byte in Array("HTTP/1.1 200 OK\r\nX-Slow: ".utf8) + [UInt8](repeating: 97, count: 100) {
                guard connection.send([byte]) else { return }
                Thread.sleep(forTimeInterval: 0.25)
            }
        }
        defer { server.stop() }
        await #expect { try await Self.get(engine, server.url, options: TransportOptions(responseDeadline: 2)) } throws: { error in
            (error as? ClientError)?.description.contains("took longer than 2 s") == true
        }
    }

    @Test("A streamed body that arrives slower than the minimum rate fails (the socket engine; URLSession is bounded by its per-read timeout)")
    func slowStream() async throws {
        let server = try HostileServer { connection in
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
            for _ in 0..<1000 {
                guard connection.send([1]) else { return }
                Thread.sleep(forTimeInterval: 0.05)
            }
        }
        defer { server.stop() }
        let transport = HTTPTransport(timeout: 1, options: TransportOptions(minimumRate: 100))
        let request = HTTPTransport.Request(method: "GET", url: server.url, headers: [], largeResponse: true)
        await #expect { _ = try await transport.exchange(request) { _ in .stream(limit: 1000) { _ in }} } throws: { error in
            (error as? ClientError)?.description.contains("slower than 100 bytes a second") == true
        }
    }

    @Test("A header value with CR or LF is never sent: no request reaches the server (L9)", arguments: Engine.allCases)
    func headerInjection(_ engine: Engine) async throws {
        let server = try Self.answering(Array("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".utf8))
        defer { server.stop() }
        let transport = HTTPTransport(timeout: 5)
        for value in ["a\r\nX-Injected: 1", "a\nX-Injected: 1", "a\rb"] {
            await #expect(throws: ClientError.self) { _ = try await transport.get(server.url, headers: ["X-Value": value]) }
        }
        _ = engine
        #expect(server.requests.isEmpty)
    }

    @Test("A response larger than the limit is refused as it arrives, declared or not", arguments: Engine.allCases)
    func tooLarge(_ engine: Engine) async throws {
        let big = String(repeating: "x", count: 5000)
        for response in ["HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + big, "HTTP/1.1 200 OK\r\n\r\n" + big,
                         "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1388\r\n" + big + "\r\n0\r\n\r\n"] {
            let server = try Self.answering(Array(response.utf8))
            defer { server.stop() }
            await #expect { _ = try await Self.get(engine, server.url, limit: 1000) } throws: { ($0 as? ClientError)?.kind == .tooLarge }
        }
    }
}

/// The resumable uploader against an origin that misbehaves.
@Suite("The uploader against hostile servers")
struct HostileUploadTests {
    static func file(_ work: TemporaryDirectory) throws -> String {
        let path = work.path + "/pack.bin"
        try FileSystem.writeAtomically([UInt8](repeating: 7, count: 10_000), to: path)
        return path
    }

    @Test("A Location on another host is not followed: the bearer token goes nowhere else (L10)")
    func foreignLocation() async throws {
        let elsewhere = try HostileServer { $0.send("HTTP/1.1 204 No Content\r\nUpload-Offset: 10000\r\n\r\n") }
        defer { elsewhere.stop() }
        let origin = try HostileServer { connection in
            connection.send("HTTP/1.1 201 Created\r\nLocation: http://localhost:\(elsewhere.port)/v1/apps/a/uploads/x\r\nContent-Length: 0\r\n\r\n")
        }
        defer { origin.stop() }
        let work = TemporaryDirectory("depot-hostile")
        defer { work.remove() }
        let uploader = ResumableUploader(server: origin.url, app: "com.example.a", token: "secret-token")
        await #expect { _ = try await uploader.upload(file: try Self.file(work), sha256: String(repeating: "0", count: 64), options: .init(pack: "p"), resume: nil) } throws: { error in
            (error as? ClientError)?.description.contains("the token is not sent there") == true
        }
        #expect(elsewhere.requests.isEmpty, "nothing, and no token, reached the other host")
    }

    @Test("An upload whose PATCHes are acknowledged without advancing fails after a few, not forever (L10)")
    func noProgress() async throws {
        let origin = try HostileServer { connection in
            let head = connection.request.head
            if head.hasPrefix("POST") {
                connection.send("HTTP/1.1 201 Created\r\nLocation: /v1/apps/a/uploads/x\r\nContent-Length: 0\r\n\r\n")
            } else if head.hasPrefix("HEAD") {
                connection.send("HTTP/1.1 200 OK\r\nUpload-Offset: 0\r\nUpload-Length: 10000\r\nContent-Length: 0\r\n\r\n")
            } else {
                connection.send("HTTP/1.1 204 No Content\r\nUpload-Offset: 0\r\n\r\n")
            }
        }
        defer { origin.stop() }
        let work = TemporaryDirectory("depot-hostile")
        defer { work.remove() }
        let uploader = ResumableUploader(server: origin.url, app: "com.example.a", token: "t")
        await #expect { _ = try await uploader.upload(file: try Self.file(work), sha256: String(repeating: "0", count: 64), options: .init(pack: "p"), resume: nil) } throws: { error in
            (error as? ClientError)?.description.contains("without advancing") == true
        }
        #expect(origin.requests.filter { $0.head.hasPrefix("PATCH") }.count == ResumableUploader.stallLimit)
    }
}
