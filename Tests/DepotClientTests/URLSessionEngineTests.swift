import DepotCore
@testable import DepotClient
@testable import DepotTransport
import DepotTestSupport
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing

/// The URLSession engine, the one apps run (FoundationNetworking underneath here): challenges
/// answered by Apple's rules, no memory of an earlier 401, bodies streamed with their limit
/// enforced as they arrive, and the session let go with its transport.
@Suite("The URLSession engine")
struct URLSessionEngineTests {
    final class Sender: NSObject, URLAuthenticationChallengeSender {
        func use(_ credential: URLCredential, for challenge: URLAuthenticationChallenge) {}
        func continueWithoutCredential(for challenge: URLAuthenticationChallenge) {}
        func cancel(_ challenge: URLAuthenticationChallenge) {}
        func performDefaultHandling(for challenge: URLAuthenticationChallenge) {}
        func rejectProtectionSpaceAndContinue(with challenge: URLAuthenticationChallenge) {}
    }

    static func challenge(_ method: String) -> URLAuthenticationChallenge {
        let space = URLProtectionSpace(host: "assets.example.com", port: 443, protocol: "https", realm: nil, authenticationMethod: method)
        return URLAuthenticationChallenge(protectionSpace: space, proposedCredential: nil, previousFailureCount: 0, failureResponse: nil, error: nil, sender: Sender())
    }

    // Apple's constants, by value: FoundationNetworking marks these two unavailable (it has no
    // Security framework), but a device's URLSession sends exactly these.
    static let serverTrust = "NSURLAuthenticationMethodServerTrust"
    static let clientCertificate = "NSURLAuthenticationMethodClientCertificate"

    @Test("Server trust and other challenges get the system's default handling, at session and task level; only HTTP Basic and Digest are declined")
    func challengeDispositions() throws {
        let engine = URLSessionEngine(timeout: 5)
        let session = URLSession(configuration: .ephemeral)
        let task = session.dataTask(with: URL(string: "https://assets.example.com/x")!)
        func answer(_ method: String, task: URLSessionTask?) -> URLSession.AuthChallengeDisposition? {
            let box = Locked<URLSession.AuthChallengeDisposition?>(nil)
            if let task {
                engine.delegate.urlSession(session, task: task, didReceive: Self.challenge(method)) { disposition, _ in box.withLock { $0 = disposition } }
            } else {
                engine.delegate.urlSession(session, didReceive: Self.challenge(method)) { disposition, _ in box.withLock { $0 = disposition } }
            }
            return box.withLock { $0 }
        }
        #expect(answer(Self.serverTrust, task: nil) == .performDefaultHandling, "the session-level challenge is where trust arrives on Apple platforms")
        #expect(answer(Self.serverTrust, task: task) == .performDefaultHandling)
        #expect(answer(Self.clientCertificate, task: task) == .performDefaultHandling)
        #expect(answer(NSURLAuthenticationMethodHTTPBasic, task: nil) == .performDefaultHandling)
        // Apple platforms: the default handling (no credential store: the 401 comes back).
        // FoundationNetworking's default handling never ends a Basic task: declined there.
        #if canImport(FoundationNetworking)
        let basic = URLSession.AuthChallengeDisposition.rejectProtectionSpace
        #else
        let basic = URLSession.AuthChallengeDisposition.performDefaultHandling
        #endif
        #expect(answer(NSURLAuthenticationMethodHTTPBasic, task: task) == basic)
        #expect(answer(NSURLAuthenticationMethodHTTPDigest, task: task) == basic)
        session.invalidateAndCancel()
    }

    @Test("A 401 is that call's alone: the next call to the same URL sees the server's next answer")
    func noRemembered401() async throws {
        let calls = Locked(0)
        let server = try HostileServer { connection in
            let n = calls.withLock { $0 += 1; return $0 }
            if n == 1 {
                connection.send("HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"assets\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            } else if n == 2 {
                return  // closed without an answer
            } else {
                connection.send("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy")
            }
        }
        defer { server.stop() }
        let engine = URLSessionEngine(timeout: 5)
        let request = HTTPTransport.Request(method: "GET", url: server.url, headers: [])
        do {
            let first = try await engine.exchange(request, progress: nil) { _ in .collect(limit: 1024) }
            #expect(first.status == 401)
        } catch let error as ClientError {
            #expect(error.description.contains("401"), "\(error)")
        }
        // A connection closed without an answer is a transport failure, not the earlier 401 again.
        await #expect { _ = try await engine.exchange(request, progress: nil) { _ in .collect(limit: 1024) } } throws: { error in
            // (Not "401" anywhere: the server's random port may hold those digits.)
            (error as? ClientError).map { $0.kind == .transport && $0.status == nil && !$0.description.contains("HTTP 401") } == true
        }
        let third = try await engine.exchange(request, progress: nil) { _ in .collect(limit: 1024) }
        #expect(third.status == 503 && third.body == Array("busy".utf8))
    }

    @Test("Pack downloads ask for the bytes as stored (Accept-Encoding: identity); a call cancelled before its exchange begins never reaches the server")
    func identityAndEarlyCancel() async throws {
        let server = try HostileServer { connection in
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")
        }
        defer { server.stop() }
        let work = TemporaryDirectory("depot-identity")
        defer { work.remove() }
        let transport = HTTPTransport(timeout: 10)
        let answer = try await transport.download(server.url.appendingPathComponent("pack"), to: work.path + "/pack", limit: 3)
        let body = try FileSystem.readFile(work.path + "/pack")
        #expect(answer.status == 200 && body == Array("abc".utf8))
        let head = try #require(server.requests.first).head.lowercased()
        #expect(head.contains("accept-encoding: identity"), "\(head)")
        #expect(!head.contains("gzip"), "\(head)")

        let engine = URLSessionEngine(timeout: 10)
        let before = server.requests.count
        let cancelled = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await engine.exchange(HTTPTransport.Request(method: "GET", url: server.url, headers: []), progress: nil) { _ in .collect(limit: 1024) }
        }
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        // The engine's exchange has ended; had the task run, its request would be recorded by now
        // (one more, later exchange on the same session shows the server is answering).
        _ = try await engine.exchange(HTTPTransport.Request(method: "GET", url: server.url, headers: []), progress: nil) { _ in .collect(limit: 1024) }
        #expect(server.requests.count == before + 1, "only the later call reached the server")
    }

    @Test("A redirect is never followed (as over the socket engine): the 302 is the answer, and the other host sees nothing, nor the credentials")
    func redirectsNotFollowed() async throws {
        let elsewhere = try HostileServer { connection in
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nsecret")
        }
        defer { elsewhere.stop() }
        let server = try HostileServer { connection in
            connection.send("HTTP/1.1 302 Found\r\nLocation: \(elsewhere.url.absoluteString)/internal\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        }
        defer { server.stop() }
        let engine = URLSessionEngine(timeout: 10)
        let answer = try await engine.exchange(
            HTTPTransport.Request(method: "GET", url: server.url.appendingPathComponent("pack"), headers: [("Authorization", "Basic dXNlcjpzZWNyZXQ=")]), progress: nil
        ) { _ in .collect(limit: 1024) }
        #expect(answer.status == 302 && answer.body.isEmpty)
        #expect(elsewhere.requests.isEmpty)
    }

    @Test("A streamed body over its limit fails as it arrives, undeclared: the sink never sees more than the limit")
    func streamedLimit() async throws {
        let server = try HostileServer { connection in
            connection.send("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
            let block = [UInt8](repeating: 7, count: 64 << 10)
            for _ in 0..<4096 { guard connection.send(block) else { return } }  // 256 MiB
        }
        defer { server.stop() }
        let engine = URLSessionEngine(timeout: 5)
        let received = Locked<Int64>(0)
        let request = HTTPTransport.Request(method: "GET", url: server.url, headers: [], largeResponse: true)
        await #expect { _ = try await engine.exchange(request, progress: nil) { _ in .stream(limit: 1 << 20) { chunk in received.withLock { $0 += Int64(chunk.count) } } } } throws: { error in
            (error as? ClientError)?.kind == .tooLarge
        }
        // (The task is cancelled at once; how soon FoundationNetworking then closes the socket
        // varies with the machine's load, so the server's side is not asserted here.)
        #expect(received.withLock { $0 } <= 1 << 20)
    }

    @Test("The URLSession is made at the first call, not with the transport: a process that only verifies (the extension) makes none")
    func sessionMadeAtFirstCall() async throws {
        let server = try HostileServer { connection in connection.send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok") }
        defer { server.stop() }
        // What `ManifestSource`'s default transport and a flow that plans from a local file do.
        let transport = HTTPTransport()
        _ = ManifestSource(url: URL(fileURLWithPath: "/dev/null"), app: "com.example.game", trustedKeys: [], transport: transport)
        #expect(!transport.engineHasSession)
        let engine = URLSessionEngine(timeout: 5)
        #expect(!engine.hasSession)
        let answer = try await engine.exchange(HTTPTransport.Request(method: "GET", url: server.url, headers: []), progress: nil) { _ in .collect(limit: 16) }
        #expect(answer.body == Array("ok".utf8) && engine.hasSession)
    }

    @Test("The session and its delegate go with the engine (a session keeps its delegate until invalidated)")
    func invalidatedWithTransport() async throws {
        let server = try HostileServer { connection in connection.send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok") }
        defer { server.stop() }
        weak var delegate: SessionDelegate?
        do {
            let engine = URLSessionEngine(timeout: 5)
            delegate = engine.delegate
            let answer = try await engine.exchange(HTTPTransport.Request(method: "GET", url: server.url, headers: []), progress: nil) { _ in .collect(limit: 16) }
            #expect(answer.body == Array("ok".utf8))
        }
        // Invalidation lets go of the delegate on the session's queue: wait for that event.
        while delegate != nil { try await Task.sleep(for: .milliseconds(10)) }
        #expect(delegate == nil)
    }
}
