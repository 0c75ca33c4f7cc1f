import DepotCore
import Foundation
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The HTTP calls the client makes: over ``HTTPConnection`` for `http://` (fast, and what the
/// tests and a LAN origin use), over URLSession for `https://` (libcurl on Linux, the system on
/// Apple platforms).
///
/// Downloads go straight to a file, and uploads stream from one, so memory stays flat
/// whatever the pack size.
public struct HTTPTransport: Sendable {
    /// A response with its body in memory (manifests, JSON answers).
    public struct Response: Sendable {
        public var status: Int
        public var headers: [String: String]
        public var body: [UInt8]
        public func header(_ name: String) -> String? {
            headers.first { $0.key.caseInsensitiveCompare(name) == .orderedSame }?.value
        }
    }

    private let session: URLSession
    private let decliner = ChallengeDecliner()
    private let timeout: TimeInterval

    public init(timeout: TimeInterval = 60) {
        self.timeout = timeout
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        session = URLSession(configuration: configuration, delegate: decliner, delegateQueue: nil)
    }

    /// GETs a small resource, refusing a body over `limit` bytes.
    public func get(_ url: URL, headers: [String: String] = [:], limit: Int = 8 << 20) async throws -> Response {
        if url.scheme == "http" { return try await plain("GET", url, headers: headers, limit: limit) }
        var request = URLRequest(url: url)
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await perform(url) { try await session.data(for: request) }
        guard data.count <= limit else { throw ClientError.manifest("the response from \(url) is larger than \(limit) bytes") }
        return Response(status: response.statusCode, headers: Self.headers(response), body: Array(data))
    }

    /// Downloads `url` into a new file at `path`; returns the status and headers.
    public func download(_ url: URL, to path: String, headers: [String: String] = [:]) async throws -> Response {
        var request = URLRequest(url: url)
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (location, response) = try await perform(url) { try await session.download(for: request) }
        defer { try? FileManager.default.removeItem(at: location) }
        if (200..<300).contains(response.statusCode) {
            FileSystem.remove(path)
            do {
                try FileManager.default.moveItem(atPath: location.path, toPath: path)
            } catch {
                throw ClientError.install(FileSystem.lastComponent(of: path), error)
            }
            return Response(status: response.statusCode, headers: Self.headers(response), body: [])
        }
        let body = (try? FileSystem.readFile(location.path, limit: 4096)) ?? []
        return Response(status: response.statusCode, headers: Self.headers(response), body: body)
    }

    /// Sends a request with a small body or none (POST, DELETE, a tus PATCH) and returns the answer.
    public func send(method: String, to url: URL, headers: [String: String] = [:], body: Data? = nil) async throws -> Response {
        if url.scheme == "http" { return try await plain(method, url, headers: headers, body: body.map { Array($0) }, limit: 8 << 20) }
        var request = URLRequest(url: url)
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await perform(url) {
            if let body { try await session.upload(for: request, from: body) } else { try await session.data(for: request) }
        }
        return Response(status: response.statusCode, headers: Self.headers(response), body: Array(data))
    }

    /// Sends a file as the body of `method` to `url`, streamed from disk.
    public func upload(file: String, to url: URL, method: String = "PUT", headers: [String: String] = [:]) async throws -> Response {
        var request = URLRequest(url: url)
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await perform(url) {
            try await session.upload(for: request, fromFile: URL(fileURLWithPath: file))
        }
        return Response(status: response.statusCode, headers: Self.headers(response), body: Array(data))
    }

    /// One exchange over ``HTTPConnection``, the response body in memory (at most `limit` bytes).
    private func plain(_ method: String, _ url: URL, headers: [String: String], body: [UInt8]? = nil, limit: Int) async throws -> Response {
        let connection = try HTTPConnection(url: url, timeout: timeout)
        return try await HTTPConnection.run(cancelling: connection) {
            defer { connection.close() }
            var fields = headers.map { ($0.key, $0.value) }
            if let body { fields.append(("Content-Length", String(body.count))) }
            try connection.sendHead(method: method, headers: fields)
            if let body, !body.isEmpty { try connection.sendBytes(body) }
            return try connection.readResponse(method: method, limit: Int64(limit))
        }
    }

    private func perform<T>(_ url: URL, _ body: () async throws -> (T, URLResponse)) async throws -> (T, HTTPURLResponse) {
        let result: (T, URLResponse)
        do {
            result = try await body()
        } catch {
            if decliner.challenged(url) { throw ClientError.http(401, url.absoluteString, "the server requires credentials") }
            throw ClientError.transport(url.absoluteString, error)
        }
        guard let http = result.1 as? HTTPURLResponse else { throw ClientError.transport(url.absoluteString, URLError(.badServerResponse)) }
        return (result.0, http)
    }

    private static func headers(_ response: HTTPURLResponse) -> [String: String] {
        var out: [String: String] = [:]
        for (key, value) in response.allHeaderFields {
            if let key = key as? String, let value = value as? String { out[key] = value }
        }
        return out
    }
}

/// Declines authentication challenges so that a 401 comes back as a response: credentials are
/// sent up front by the caller. (Without a delegate, URLSession on Linux waits forever on a
/// `WWW-Authenticate: Basic` challenge.)
final class ChallengeDecliner: NSObject, URLSessionTaskDelegate, Sendable {
    private let challengedURLs = Mutex<Set<String>>([])

    /// Whether a request to `url` was answered with a challenge (corelibs then cancels it).
    func challenged(_ url: URL) -> Bool { challengedURLs.withLock { $0.contains(url.absoluteString) } }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        if let url = task.originalRequest?.url { challengedURLs.withLock { _ = $0.insert(url.absoluteString) } }
        completionHandler(.rejectProtectionSpace, nil)
    }

    func urlSession(
        _ session: URLSession, didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        completionHandler(.rejectProtectionSpace, nil)
    }
}
