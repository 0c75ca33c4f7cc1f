/// What a handler decides once it has seen a request's head.
public enum HTTPDisposition {
    /// Answer now. If the request announced a body, it is not read and the connection closes.
    case respond(HTTPResponse)
    /// Read the body chunk by chunk into a receiver, which answers at the end.
    case receiveBody(any HTTPBodyReceiver)
}

/// Receives one request body as it arrives, on the thread serving that connection.
public protocol HTTPBodyReceiver: AnyObject {
    /// Takes the next chunk; returning a response stops reading and answers at once.
    func receive(_ chunk: UnsafeRawBufferPointer) -> HTTPResponse?
    /// The body is complete: produce the answer.
    func finish() -> HTTPResponse
    /// The body is complete, with the trailer fields of a chunked body: produce the answer.
    /// By default the trailers are ignored and ``finish()`` answers.
    func finish(trailers: HTTPHeaders) -> HTTPResponse
    /// The request ended early (client gone, timeout, server stop): drop what was received.
    func abort()
}

extension HTTPBodyReceiver {
    public func finish(trailers: HTTPHeaders) -> HTTPResponse { finish() }
}

/// Answers requests. Called concurrently from the server's threads, so it must be `Sendable`.
public protocol HTTPHandler: Sendable {
    /// Decides what to do with a request whose head has arrived.
    func handle(_ request: HTTPRequest) -> HTTPDisposition
    /// Called once per request when its exchange ends (sent, or cut short), for logs and metrics.
    func completed(_ record: HTTPExchangeRecord)
}

extension HTTPHandler {
    public func completed(_ record: HTTPExchangeRecord) {}
}

/// What happened to one request, reported when its exchange ends.
public struct HTTPExchangeRecord: Sendable {
    /// The method.
    public var method: String
    /// The path as received, escapes kept, without its query (at most 512 bytes).
    public var path: String
    /// The query as received, without its `?` (at most 256 bytes; empty when there is none).
    public var query: String
    /// The status sent, 0 if none was.
    public var status: Int
    /// Body bytes queued for sending (0 for HEAD, 204 and 304).
    public var bodyBytes: Int64
    /// From the request line to the end of the exchange.
    public var duration: Duration
    /// The response's route label, for metrics.
    public var route: String
    /// The client's address (``HTTPRequest/clientAddress``: behind a trusted proxy, the one it forwarded for).
    public var clientAddress: String?
    /// False when the client left, timed out or the server stopped before the end.
    public var completedNormally: Bool

    public init(
        method: String, path: String, status: Int, bodyBytes: Int64, duration: Duration, route: String, clientAddress: String?,
        completedNormally: Bool, query: String = ""
    ) {
        (self.method, self.path, self.status, self.bodyBytes, self.query) = (method, path, status, bodyBytes, query)
        (self.duration, self.route, self.clientAddress, self.completedNormally) = (duration, route, clientAddress, completedNormally)
    }
}
