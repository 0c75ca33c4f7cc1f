import DepotCore
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The client's one way to make HTTP calls. It picks the engine inside: on Linux its own
/// HTTP/1.1 connection for `http://` and `https://` (`HTTPConnection`: `sendfile` uploads,
/// 1 MiB reads, TLS through OpenSSL's libssl, at about curl's speed, with a CA file when given);
/// on Apple platforms URLSession. `DEPOT_CLIENT_ENGINE=urlsession` in the environment makes
/// Linux use URLSession too (FoundationNetworking), so the tests run the apps' engine here.
/// Callers see one ``Response`` type either way.
///
/// Bodies stream: an upload goes from a file, and a large download goes into a sink chosen
/// once its head is known, so memory stays flat whatever the pack size.
public struct HTTPTransport: Sendable {
    /// A response: status, header fields, and the body when it was read into memory.
    public struct Response: Sendable {
        public var status: Int
        public var headers: [(name: String, value: String)]
        public var body: [UInt8]

        public init(status: Int, headers: [(name: String, value: String)], body: [UInt8]) {
            self.status = status
            self.headers = headers
            self.body = body
        }

        /// The first value of a header field, whatever its case.
        public func header(_ name: String) -> String? {
            headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
        }

        /// `Content-Length`, when present and valid (digits only).
        public var contentLength: Int64? {
            header("Content-Length").flatMap { HTTPResponseParser.decimal($0.trimmingCharacters(in: .whitespaces)) }
        }
    }

    /// What to send.
    package struct Request: Sendable {
        package enum Body: Sendable {
            case none
            case bytes([UInt8])
            /// `count` bytes of the file at `path` from `offset`.
            case file(path: String, offset: Int64, count: Int64)
        }

        package var method: String
        package var url: URL
        package var headers: [(String, String)]
        package var body: Body = .none
        /// The answer may be large: URLSession then takes it into a temporary file, not memory.
        package var largeResponse = false
        /// Fields sent after a file body, which then goes chunked; called once the body is sent
        /// (so it may wait for a value computed while sending). Only where files stream
        /// (``HTTPTransport/streamsFiles(to:)``): URLSession cannot send trailers.
        package var trailer: (@Sendable () throws -> [(String, String)])?

        package init(method: String, url: URL, headers: [(String, String)], body: Body = .none, largeResponse: Bool = false,
                     trailer: (@Sendable () throws -> [(String, String)])? = nil) {
            (self.method, self.url, self.headers, self.body, self.largeResponse, self.trailer) = (method, url, headers, body, largeResponse, trailer)
        }
    }

    /// Where a response body goes, decided once its head is known.
    package enum BodyHandling {
        /// Into ``Response/body``; more than `limit` bytes fails with ``ClientError/Kind/tooLarge``.
        case collect(limit: Int64)
        /// At most the first `limit` bytes into ``Response/body``, the rest ignored (an error's text).
        case excerpt(limit: Int64)
        /// Into `sink`, chunk by chunk; more than `limit` bytes fails with ``ClientError/Kind/tooLarge``.
        case stream(limit: Int64, into: (UnsafeRawBufferPointer) throws -> Void)
    }

    /// Seconds without progress before a call fails.
    let timeout: TimeInterval
    /// What it trusts and where it connects.
    public let options: TransportOptions
    /// One session for this transport (and its copies), invalidated when the last copy goes.
    private let session: URLSessionEngine
    #if os(Linux)
    /// The TLS trust of the Linux engine, made at the first https call and kept (a CA file that
    /// cannot be read fails each https call). Not before: loading the system's store parses
    /// every CA certificate, which a transport that only speaks http never needs.
    private let trust: LazyTrust
    #endif

    /// Whether this transport's URLSession was made (it is at the first call through it).
    var engineHasSession: Bool { session.hasSession }

    /// One transport for callers that do not make their own (`ManifestSource`'s default): one
    /// URLSession for the process, not one per call.
    public static let shared = HTTPTransport()

    public init(timeout: TimeInterval = 60, options: TransportOptions = TransportOptions()) {
        self.timeout = timeout
        self.options = options
        session = URLSessionEngine(timeout: timeout, deadline: options.responseDeadline)
        #if os(Linux)
        trust = LazyTrust(caFile: options.caFile)
        #endif
    }

    /// GETs a small resource, refusing a body over `limit` bytes.
    public func get(_ url: URL, headers: [String: String] = [:], limit: Int = 8 << 20) async throws -> Response {
        try await exchange(Request(method: "GET", url: url, headers: Self.fields(headers)), limit: Int64(limit))
    }

    /// GETs `url` into the file at `path` (created or replaced), streamed: memory stays flat, and
    /// a body over `limit` bytes fails as it arrives. The body goes to the file only on 200; the
    /// response's other answers come back with an excerpt of their text. The caller renames or
    /// removes the file.
    ///
    /// It asks for the bytes as stored (`Accept-Encoding: identity`, unless the caller says
    /// otherwise): a pack's size and SHA-256 are of those bytes, and a CDN that compresses what it
    /// may would otherwise send another body (URLSession asks for gzip by default).
    public func download(_ url: URL, headers: [String: String] = [:], to path: String, limit: Int64) async throws -> Response {
        var headers = headers
        if !headers.keys.contains(where: { $0.lowercased() == "accept-encoding" }) { headers["Accept-Encoding"] = "identity" }
        let request = Request(method: "GET", url: url, headers: Self.fields(headers), largeResponse: true)
        return try await exchange(request) { head in
            guard head.status == 200 else { return .excerpt(limit: 4096) }
            let file = try FileDescriptor(path: path, flags: O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600)
            return .stream(limit: limit) { chunk in try file.write(chunk) }
        }
    }

    /// Sends a request with a small body or none (POST, DELETE, HEAD) and returns the answer.
    public func send(method: String, to url: URL, headers: [String: String] = [:], body: Data? = nil) async throws -> Response {
        try await exchange(Request(method: method, url: url, headers: Self.fields(headers), body: body.map { .bytes(Array($0)) } ?? .none))
    }

    /// Sends a whole file as the body of `method` to `url`, streamed from disk.
    public func upload(file: String, to url: URL, method: String = "PUT", headers: [String: String] = [:]) async throws -> Response {
        let size = try FileDescriptor.openForReading(file).size()
        return try await exchange(Request(method: method, url: url, headers: Self.fields(headers), body: .file(path: file, offset: 0, count: size)))
    }

    /// Whether a file body to `url` is streamed from disk whatever its size (the Linux engine);
    /// elsewhere (URLSession) callers send a large file in parts of a few MiB.
    public static func streamsFiles(to url: URL) -> Bool {
        #if os(Linux)
        (url.scheme == "http" || url.scheme == "https") && !usesURLSession
        #else
        false
        #endif
    }

    /// Whether Linux runs every call through URLSession (`DEPOT_CLIENT_ENGINE=urlsession`), the
    /// engine of Apple platforms, instead of its own.
    public static let usesURLSession: Bool = {
        #if os(Linux)
        ProcessInfo.processInfo.environment["DEPOT_CLIENT_ENGINE"] == "urlsession"
        #else
        true
        #endif
    }()

    /// One exchange with the body in memory (at most `limit` bytes).
    package func exchange(_ request: Request, limit: Int64 = 8 << 20, progress: (@Sendable (Int64) -> Void)? = nil) async throws -> Response {
        try await exchange(request, progress: progress) { _ in .collect(limit: limit) }
    }

    /// One exchange: `handling` sees the response's head and says where its body goes;
    /// `progress` learns how many body bytes were sent so far.
    package func exchange(
        _ request: Request, progress: (@Sendable (Int64) -> Void)? = nil, handling: @escaping @Sendable (Response) throws -> BodyHandling
    ) async throws -> Response {
        for (name, value) in request.headers where !HTTPResponseParser.isSendable(name: name, value: value) {
            throw ClientError.unsendableField(name, url: request.url.absoluteString)
        }
        if Self.streamsFiles(to: request.url) { return try await plain(request, progress: progress, handling: handling) }
        return try await session.exchange(request, progress: progress, handling: handling)
    }

    /// Over `HTTPConnection`, on a thread of its own.
    #if os(Linux)
    private func plain(
        _ request: Request, progress: (@Sendable (Int64) -> Void)?, handling: @escaping @Sendable (Response) throws -> BodyHandling
    ) async throws -> Response {
        var trust: TLSClientContext?
        if request.url.scheme == "https" {
            switch self.trust.context() {
            case .success(let context): trust = context
            case .failure(let error): throw ClientError.tls(request.url.absoluteString, error.description)
            }
        }
        let connection = try HTTPConnection(url: request.url, timeout: timeout, trust: trust, options: options)
        return try await BlockingCall.run(onCancel: connection.cancel) {
            defer { connection.close() }
            var fields = request.headers
            let hasLength = fields.contains { $0.0.caseInsensitiveCompare("Content-Length") == .orderedSame }
            switch request.body {
            case .none: break
            case .bytes(let bytes): if !hasLength { fields.append(("Content-Length", String(bytes.count))) }
            case .file(_, _, let count):
                if request.trailer != nil {
                    fields.append(("Transfer-Encoding", "chunked"))
                } else if !hasLength {
                    fields.append(("Content-Length", String(count)))
                }
            }
            try connection.sendHead(method: request.method, headers: fields)
            switch request.body {
            case .none: break
            case .bytes(let bytes): if !bytes.isEmpty { try connection.sendBytes(bytes) }
            case .file(let path, let offset, let count):
                let file = try FileDescriptor.openForReading(path)
                var sent: Int64 = 0
                let step: (Int64) -> Void = { step in
                    sent += step
                    progress?(sent)
                }
                if let trailer = request.trailer {
                    try connection.sendChunked(file, offset: offset, count: count, progress: step, trailer: trailer)
                } else {
                    try connection.sendFile(file, offset: offset, count: count, progress: step)
                }
            }
            var response = try connection.readHead()
            switch try handling(response) {
            case .collect(let limit):
                var body: [UInt8] = []
                try connection.readBody(response, method: request.method, limit: limit) { body += $0 }
                response.body = body
            case .excerpt(let limit):
                var body: [UInt8] = []
                try? connection.readBody(response, method: request.method, limit: limit) { body += $0 }
                response.body = body
            case .stream(let limit, let sink):
                try connection.readBody(response, method: request.method, limit: limit, streamed: true, sink: sink)
            }
            return response
        }
    }
    #else
    private func plain(
        _ request: Request, progress: (@Sendable (Int64) -> Void)?, handling: @escaping @Sendable (Response) throws -> BodyHandling
    ) async throws -> Response {
        try await session.exchange(request, progress: progress, handling: handling)
    }
    #endif

    private static func fields(_ headers: [String: String]) -> [(String, String)] { headers.map { ($0.key, $0.value) } }
}

#if os(Linux)
/// A `TLSClientContext` made on first use and shared by the copies of one transport.
final class LazyTrust: Sendable {
    let caFile: String?
    private let made = Locked<Result<TLSClientContext, TLSError>?>(nil)

    init(caFile: String?) { self.caFile = caFile }

    func context() -> Result<TLSClientContext, TLSError> {
        made.withLock { made in
            if let made { return made }
            let result = Result { () throws(TLSError) in try TLSClientContext(caFile: caFile) }
            made = result
            return result
        }
    }
}
#endif
