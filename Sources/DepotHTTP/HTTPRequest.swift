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
    /// The peer's IP address, when known.
    public var clientAddress: String?

    public init(
        method: String, rawTarget: String, pathSegments: [String], query: [(name: String, value: String)] = [],
        headers: HTTPHeaders = HTTPHeaders(), clientAddress: String? = nil
    ) {
        self.method = method
        self.rawTarget = rawTarget
        self.pathSegments = pathSegments
        self.query = query
        self.headers = headers
        self.clientAddress = clientAddress
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
