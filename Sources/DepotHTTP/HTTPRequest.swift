/// The head of a request: what a handler sees before any body byte.
public struct HTTPRequest: Sendable {
    /// The method, as sent (`GET`, `PUT`, …).
    public var method: String
    /// The request target as it arrived on the wire, before any decoding.
    public var rawTarget: String
    /// The decoded path segments (`/v1/apps/x` → `["v1", "apps", "x"]`).
    public var pathSegments: [String]
    /// Decoded query parameters, in order.
    public var query: [(name: String, value: String)]
    /// The header fields.
    public var headers: HTTPHeaders
    /// The client's IP address, when known: the peer's, or from a trusted proxy the address its
    /// `X-Forwarded-For` names (``TrustedProxies``). What per-address limits and logs use.
    public var clientAddress: String?
    /// The address of the connection's other end (a trusted proxy's, when one forwarded the request).
    public var peerAddress: String?

    public init(
        method: String, rawTarget: String, pathSegments: [String], query: [(name: String, value: String)] = [],
        headers: HTTPHeaders = HTTPHeaders(), clientAddress: String? = nil, peerAddress: String? = nil
    ) {
        self.method = method
        self.rawTarget = rawTarget
        self.pathSegments = pathSegments
        self.query = query
        self.headers = headers
        self.clientAddress = clientAddress
        self.peerAddress = peerAddress ?? clientAddress
    }

    /// The decoded path, segments joined by `/`.
    public var path: String { "/" + pathSegments.joined(separator: "/") }

    /// The first value of a query parameter.
    public func queryValue(_ name: String) -> String? { query.first { $0.name == name }?.value }

    /// The declared body length, when `Content-Length` is present and valid.
    public var contentLength: Int64? { headers["Content-Length"].flatMap { Int64($0) } }

    /// Whether the request announces a body (a non-zero length or a transfer coding).
    public var hasBody: Bool {
        if headers["Transfer-Encoding"] != nil { return true }
        return (contentLength ?? 0) > 0
    }
}
