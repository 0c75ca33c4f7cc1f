import DepotCore
import Foundation
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The engine ``HTTPTransport`` uses for `https://`: URLSession (the system on Apple platforms,
/// libcurl on Linux). A large answer is taken into a temporary file and handed to the body's
/// sink from there; a body to send from a file goes by `upload(fromFile:)` when it is the whole
/// file, from memory otherwise (callers send ranges of a few MiB).
struct URLSessionEngine: Sendable {
    private let session: URLSession
    private let decliner = ChallengeDecliner()
    /// Seconds an answer held in memory may take in all (see ``TransportOptions/responseDeadline``).
    private let deadline: TimeInterval

    init(timeout: TimeInterval, deadline: TimeInterval = 120) {
        self.deadline = deadline
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        session = URLSession(configuration: configuration, delegate: decliner, delegateQueue: nil)
    }

    func exchange(
        _ request: HTTPTransport.Request, progress: (@Sendable (Int64) -> Void)?,
        handling: @Sendable (HTTPTransport.Response) throws -> HTTPTransport.BodyHandling
    ) async throws -> HTTPTransport.Response {
        guard request.trailer == nil else {
            throw ClientError(.transport, "\(request.url): trailer fields need the engine that streams files")
        }
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        let prepared = urlRequest
        let url = request.url
        let received: Received
        let head: HTTPURLResponse
        switch request.body {
        case .none where request.largeResponse:
            let (location, response) = try await perform(url) { try await session.download(for: prepared) }
            (received, head) = (.file(location), response)
        case .none:
            let (data, response) = try await perform(url, deadline: deadline) { try await session.data(for: prepared) }
            (received, head) = (.bytes(data), response)
        case .bytes(let bytes):
            let (data, response) = try await perform(url, deadline: deadline) { try await session.upload(for: prepared, from: Data(bytes)) }
            (received, head) = (.bytes(data), response)
        case .file(let path, let offset, let count):
            let file = try FileDescriptor.openForReading(path)
            let data: Data
            let response: HTTPURLResponse
            if offset == 0, try file.size() == count {
                (data, response) = try await perform(url) { try await session.upload(for: prepared, fromFile: URL(fileURLWithPath: path)) }
            } else {
                var chunk = [UInt8](repeating: 0, count: Int(count))
                let read = try chunk.withUnsafeMutableBytes { try file.read(into: $0, at: offset) }
                guard Int64(read) == count else { throw ClientError(.install, "\(path) changed while it was being sent") }
                let sent = chunk
                (data, response) = try await perform(url) { try await session.upload(for: prepared, from: Data(sent)) }
            }
            progress?(count)
            (received, head) = (.bytes(data), response)
        }
        defer { if case .file(let location) = received { try? FileManager.default.removeItem(at: location) } }
        var response = HTTPTransport.Response(status: head.statusCode, headers: Self.headers(head), body: [])
        // The system parses the response; a Content-Length it passes on must still be one number
        // (two different values arrive joined by a comma).
        if let length = response.header("Content-Length"), HTTPResponseParser.decimal(length.trimmingCharacters(in: .whitespaces)) == nil {
            throw ClientError(.transport, "cannot reach \(url.absoluteString): malformed response: Content-Length is not a number: \(length.prefix(40))")
        }
        let noBody = request.method == "HEAD" || head.statusCode == 204 || head.statusCode == 304
        switch try handling(response) {
        case .collect(let limit):
            try received.forEach(url: url, limit: limit) { response.body += $0 }
        case .excerpt(let limit):
            try? received.forEach(url: url, limit: limit) { response.body += $0 }
        case .stream(let limit, let sink):
            if !noBody { try received.forEach(url: url, limit: limit, sink) }
        }
        return response
    }

    /// A body as URLSession delivered it.
    private enum Received {
        case bytes(Data)
        case file(URL)

        /// Hands the body to `sink` in chunks of at most 1 MiB; fails past `limit` bytes.
        func forEach(url: URL, limit: Int64, _ sink: (UnsafeRawBufferPointer) throws -> Void) throws {
            switch self {
            case .bytes(let data):
                guard Int64(data.count) <= limit else { throw ClientError.tooLarge(url.absoluteString, limit) }
                try data.withUnsafeBytes { try sink($0) }
            case .file(let location):
                let file = try FileDescriptor.openForReading(location.path)
                guard try file.size() <= limit else { throw ClientError.tooLarge(url.absoluteString, limit) }
                var buffer = [UInt8](repeating: 0, count: 1 << 20)
                while true {
                    let n = try buffer.withUnsafeMutableBytes { try file.read(into: $0) }
                    if n == 0 { return }
                    try buffer.withUnsafeBytes { try sink(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
                }
            }
        }
    }

    /// Runs `body`; with `deadline`, cancels it (and fails) once that many seconds have passed,
    /// whatever the per-read timeout lets through.
    private func perform<T: Sendable>(
        _ url: URL, deadline: TimeInterval? = nil, _ body: @escaping @Sendable () async throws -> (T, URLResponse)
    ) async throws -> (T, HTTPURLResponse) {
        let result: (T, URLResponse)
        do {
            if let deadline {
                result = try await withThrowingTaskGroup(of: (T, URLResponse)?.self) { group in
                    group.addTask { try await body() }
                    group.addTask {
                        try await Task.sleep(for: .seconds(deadline))
                        return nil
                    }
                    defer { group.cancelAll() }
                    guard let first = try await group.next(), let first else {
                        throw ClientError(.transport, "cannot reach \(url.absoluteString): the response took longer than \(Int(deadline)) s")
                    }
                    return first
                }
            } else {
                result = try await body()
            }
        } catch let error as ClientError {
            throw error
        } catch {
            if decliner.challenged(url) { throw ClientError.http(401, url.absoluteString, "the server requires credentials") }
            throw ClientError.transport(url.absoluteString, error)
        }
        guard let http = result.1 as? HTTPURLResponse else { throw ClientError.transport(url.absoluteString, URLError(.badServerResponse)) }
        return (result.0, http)
    }

    private static func headers(_ response: HTTPURLResponse) -> [(name: String, value: String)] {
        response.allHeaderFields.compactMap { key, value in
            guard let key = key as? String, let value = value as? String else { return nil }
            return (key, value)
        }
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
