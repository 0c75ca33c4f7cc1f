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
    /// The request ended early (client gone, timeout, server stop): drop what was received.
    func abort()
}

/// Answers requests. Called concurrently from the server's threads, so it must be `Sendable`.
public protocol HTTPHandler: Sendable {
    /// Decides what to do with a request whose head has arrived.
    func handle(_ request: HTTPRequest) -> HTTPDisposition
}
