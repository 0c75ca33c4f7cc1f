import DepotCore
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The engine ``HTTPTransport`` uses on Apple platforms (and on Linux with
/// `DEPOT_CLIENT_ENGINE=urlsession`, over FoundationNetworking's libcurl): one URLSession per
/// transport, invalidated when the transport goes. Every body arrives through the data
/// delegate and goes straight to where ``HTTPTransport/BodyHandling`` says, chunk by chunk,
/// with its size limit enforced as bytes arrive: a download is written into the caller's file
/// as it comes (so a cut one keeps what arrived, for a `Range` resume), never staged in a
/// temporary file and copied. A body to send from a file goes by `uploadTask(with:fromFile:)`
/// when it is the whole file, from memory otherwise (callers send ranges of a few MiB).
///
/// The session is made at the first exchange, not with the engine: a process that only
/// verifies files (the Background Assets extension, whose memory is tight, planning from the
/// manifest the system fetched) never makes one.
final class URLSessionEngine: Sendable {
    private let made = Locked<URLSession?>(nil)
    let delegate: SessionDelegate
    /// Seconds without progress before a call fails.
    private let timeout: TimeInterval
    /// Seconds an answer held in memory may take in all (see ``TransportOptions/responseDeadline``).
    private let deadline: TimeInterval

    init(timeout: TimeInterval, deadline: TimeInterval = 120) {
        self.timeout = timeout
        self.deadline = deadline
        delegate = SessionDelegate()
    }

    /// Whether the session was made (for tests: a process that makes no call makes none).
    var hasSession: Bool { made.withLock { $0 != nil } }

    private var session: URLSession {
        made.withLock { made in
            if let made { return made }
            let configuration = URLSessionConfiguration.ephemeral
            configuration.timeoutIntervalForRequest = timeout
            configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
            configuration.urlCache = nil
            configuration.urlCredentialStorage = nil
            configuration.httpCookieStorage = nil
            // The session keeps its delegate until it is invalidated (below, in deinit).
            let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
            made = session
            return session
        }
    }

    deinit {
        // Every exchange holds the engine while it runs, so nothing is in flight here.
        made.withLock { $0?.invalidateAndCancel() }
    }

    func exchange(
        _ request: HTTPTransport.Request, progress: (@Sendable (Int64) -> Void)?,
        handling: @escaping @Sendable (HTTPTransport.Response) throws -> HTTPTransport.BodyHandling
    ) async throws -> HTTPTransport.Response {
        guard request.trailer == nil else {
            throw ClientError(.transport, "\(request.url): trailer fields need the engine that streams files")
        }
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        let task: URLSessionTask
        var bounded = !request.largeResponse
        let session = session
        switch request.body {
        case .none:
            task = session.dataTask(with: urlRequest)
        case .bytes(let bytes):
            task = session.uploadTask(with: urlRequest, from: Data(bytes))
        case .file(let path, let offset, let count):
            bounded = false
            let file = try FileDescriptor.openForReading(path)
            if offset == 0, try file.size() == count {
                task = session.uploadTask(with: urlRequest, fromFile: URL(fileURLWithPath: path))
            } else {
                var chunk = [UInt8](repeating: 0, count: Int(count))
                let read = try chunk.withUnsafeMutableBytes { try file.read(into: $0, at: offset) }
                guard Int64(read) == count else { throw ClientError(.install, "\(path) changed while it was being sent") }
                task = session.uploadTask(with: urlRequest, from: Data(chunk))
            }
        }
        let exchange = TaskExchange(url: request.url, method: request.method, handling: handling, progress: progress)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HTTPTransport.Response, any Error>) in
                // Registered first: a cancellation right after `start` cancels the task, whose
                // completion must find its exchange.
                delegate.register(task, exchange)
                if let early = exchange.start(continuation) {
                    // Cancelled before the exchange began: the task is never resumed, and
                    // cancelled so that the session lets it go.
                    delegate.unregister(task)
                    task.cancel()
                    continuation.resume(throwing: early)
                    return
                }
                if bounded {
                    // A whole answer in memory has a deadline beside the per-read timeout.
                    let seconds = deadline
                    DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
                        if exchange.fail(ClientError(.transport, "cannot reach \(request.url.absoluteString): the response took longer than \(Int(seconds)) s")) {
                            task.cancel()
                        }
                    }
                }
                task.resume()
            }
        } onCancel: {
            if exchange.fail(CancellationError()) { task.cancel() }
        }
    }
}

/// One request in flight: where its body goes and how it ends. The delegate's callbacks for one
/// task come one at a time on the session's serial queue; the deadline and cancellation come
/// from elsewhere, so every field is behind the lock.
final class TaskExchange: Sendable {
    private struct State {
        var continuation: CheckedContinuation<HTTPTransport.Response, any Error>?
        var response: HTTPTransport.Response?
        var handling: HTTPTransport.BodyHandling?
        var received: Int64 = 0
        /// The first failure decided here (a limit, the deadline, a cancellation): it wins over
        /// the error URLSession reports for the cancelled task.
        var failure: (any Error)?
        /// The server asked for HTTP credentials on this task (FoundationNetworking then ends it
        /// with an error instead of handing back the 401).
        var challenged = false
    }

    let url: URL
    let method: String
    private let handling: @Sendable (HTTPTransport.Response) throws -> HTTPTransport.BodyHandling
    let progress: (@Sendable (Int64) -> Void)?
    private let state = Locked<State>(State())

    init(url: URL, method: String, handling: @escaping @Sendable (HTTPTransport.Response) throws -> HTTPTransport.BodyHandling,
         progress: (@Sendable (Int64) -> Void)?) {
        (self.url, self.method, self.handling, self.progress) = (url, method, handling, progress)
    }

    /// Takes the caller's continuation; returns the failure decided before the exchange began
    /// (a cancellation that came first), in which case the task must not run at all.
    func start(_ continuation: CheckedContinuation<HTTPTransport.Response, any Error>) -> (any Error)? {
        state.withLock { state in
            if let failure = state.failure { return failure }
            state.continuation = continuation
            return nil
        }
    }

    func markChallenged() { state.withLock { $0.challenged = true } }

    /// Records `error` as the outcome if none is decided yet; true if it was and the exchange
    /// has begun (the caller then cancels the task, whose completion resumes the caller with this
    /// error). Decided before it began, ``start(_:)`` returns it and the task never runs.
    @discardableResult
    func fail(_ error: any Error) -> Bool {
        state.withLock { state in
            guard state.failure == nil else { return false }
            state.failure = error
            return state.continuation != nil
        }
    }

    /// The response's head: decides where the body goes. False: cancel the task.
    func receive(_ head: HTTPURLResponse) -> Bool {
        var response = HTTPTransport.Response(status: head.statusCode, headers: Self.headers(head), body: [])
        // The system parses the response; a Content-Length it passes on must still be one number
        // (two different values arrive joined by a comma).
        if let length = response.header("Content-Length"), HTTPResponseParser.decimal(length.trimmingCharacters(in: .whitespaces)) == nil {
            fail(ClientError(.transport, "cannot reach \(url.absoluteString): malformed response: Content-Length is not a number: \(length.prefix(40))"))
            return false
        }
        do {
            let decided = try handling(response)
            if case .stream(let limit, _) = decided, let length = response.contentLength, length > limit {
                throw ClientError.tooLarge(url.absoluteString, limit)
            }
            response.body = []
            return state.withLock { state in
                guard state.failure == nil else { return false }
                (state.response, state.handling) = (response, decided)
                return true
            }
        } catch {
            fail(error)
            return false
        }
    }

    /// A piece of the body. False: cancel the task (a limit passed, or the sink failed).
    func receive(_ data: Data) -> Bool {
        state.withLock { state in
            guard state.failure == nil, let handling = state.handling else { return false }
            let count = Int64(data.count)
            do {
                switch handling {
                case .collect(let limit):
                    guard state.received + count <= limit else { throw ClientError.tooLarge(url.absoluteString, limit) }
                    state.response?.body += data
                case .excerpt(let limit):
                    let room = max(0, limit - state.received)
                    if room > 0 { state.response?.body += data.prefix(Int(min(room, count))) }
                case .stream(let limit, let sink):
                    guard state.received + count <= limit else { throw ClientError.tooLarge(url.absoluteString, limit) }
                    try data.withUnsafeBytes { try sink($0) }
                }
                state.received += count
                return true
            } catch {
                state.failure = error
                return false
            }
        }
    }

    /// The task ended: resumes the caller once.
    func complete(_ error: (any Error)?) {
        let (continuation, outcome): (CheckedContinuation<HTTPTransport.Response, any Error>?, Result<HTTPTransport.Response, any Error>) = state.withLock { state in
            defer { state.continuation = nil }
            if let failure = state.failure { return (state.continuation, .failure(failure)) }
            if let error {
                if state.challenged {
                    // FoundationNetworking ends a declined challenge with an error; the device
                    // hands back the 401 itself. Either way the caller sees the 401.
                    if let response = state.response, response.status == 401 { return (state.continuation, .success(response)) }
                    return (state.continuation, .failure(ClientError.http(401, url.absoluteString, "the server requires credentials")))
                }
                return (state.continuation, .failure(ClientError.transport(url.absoluteString, error)))
            }
            guard let response = state.response else {
                return (state.continuation, .failure(ClientError.transport(url.absoluteString, URLError(.badServerResponse))))
            }
            return (state.continuation, .success(response))
        }
        continuation?.resume(with: outcome)
    }

    private static func headers(_ response: HTTPURLResponse) -> [(name: String, value: String)] {
        response.allHeaderFields.compactMap { key, value in
            guard let key = key as? String, let value = value as? String else { return nil }
            return (key, value)
        }
    }
}
