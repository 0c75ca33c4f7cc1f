/// How an ``HTTPServer`` listens and what it tolerates.
public struct HTTPServerConfiguration: Sendable, Hashable {
    /// The address to bind: an IPv4 or IPv6 literal, or `localhost`.
    public var host: String
    /// The port; 0 picks a free one (read it back from ``HTTPServer/port``).
    public var port: UInt16
    /// Threads serving connections (libmicrohttpd's pool, each with epoll).
    public var threads: Int
    /// Most connections open at once.
    public var connectionLimit: Int
    /// Most connections open at once from one IP address (0: no limit).
    public var perIPConnectionLimit: Int
    /// Seconds of inactivity before a connection is closed.
    public var connectionTimeout: Int
    /// Bytes of buffer memory per connection (the request's head and the read buffer). Each
    /// request clears its connection's buffer (libmicrohttpd zeroes it), so a small one is cheaper
    /// per request; the request's head must fit in it (else `431`, or `414` for the target).
    public var connectionMemoryLimit: Int
    /// libmicrohttpd's turbo mode: reads, writes and accepts are tried before readiness is
    /// polled, and a few `shutdown` calls are skipped.
    public var turbo: Bool
    /// The edges whose `X-Forwarded-For` names a request's client (``HTTPRequest/clientAddress``);
    /// none: every request is its peer, whatever it sends.
    public var trustedProxies: TrustedProxies = .none

    public init(
        host: String = "127.0.0.1", port: UInt16 = 8080, threads: Int = 4, connectionLimit: Int = 1024,
        perIPConnectionLimit: Int = 0, connectionTimeout: Int = 30, connectionMemoryLimit: Int = 8 << 10, turbo: Bool = true
    ) {
        self.host = host
        self.port = port
        self.threads = threads
        self.connectionLimit = connectionLimit
        self.perIPConnectionLimit = perIPConnectionLimit
        self.connectionTimeout = connectionTimeout
        self.connectionMemoryLimit = connectionMemoryLimit
        self.turbo = turbo
    }
}

/// Why a server could not start.
public struct HTTPServerError: Error, Hashable, Sendable, CustomStringConvertible {
    public let description: String
    private init(_ description: String) { self.description = description }
    /// The host is not an address this server can bind.
    public static func invalidHost(_ host: String) -> HTTPServerError { HTTPServerError("cannot bind to host \"\(host)\"") }
    /// libmicrohttpd refused to start (port in use, permission, limits).
    public static func startFailed(host: String, port: UInt16) -> HTTPServerError {
        HTTPServerError("cannot listen on \(host):\(port) (address in use or not permitted)")
    }
}
