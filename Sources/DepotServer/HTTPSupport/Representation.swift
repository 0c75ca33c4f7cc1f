import DepotCore
import DepotHTTP
import Foundation

/// One resource as served: the single place that applies validators, preconditions and ranges
/// (RFC 9110 §13 and §14) to manifests, releases and blobs alike.
struct Representation {
    /// Where the bytes come from.
    enum Source {
        case bytes([UInt8])
        /// Bytes served to many requests without a copy each.
        case shared(SharedBytes)
        /// An open file; its descriptor passes to the response.
        case file(FileDescriptor)
        /// Bytes produced as they are sent: the source of (offset, length) of the resource.
        case stream((Int64, Int64) -> any HTTPBodySource)
    }

    var source: Source
    var size: Int64
    /// A strong entity tag, quoted.
    var etag: String
    var lastModified: Date?
    var contentType: String
    var cacheControl: String

    /// A strong ETag for bytes made in memory: the first 128 bits of their SHA-256.
    static func etag(of bytes: [UInt8]) -> String { "\"" + Hex.encode(SHA256Hasher.hash(bytes).prefix(16)) + "\"" }

    /// `Cache-Control` for an app's answers: `private` when download credentials gate the app,
    /// so that a shared cache never hands it to a client without them.
    static func cacheControl(_ value: String, gated: Bool) -> String {
        gated ? value.replacingOccurrences(of: "public", with: "private") : value
    }

    /// The validators and caching fields every answer but an error carries, in their order.
    private var validators: HTTPHeaders {
        var headers = HTTPHeaders(capacity: 8)
        headers.add("ETag", etag)
        headers.add("Cache-Control", cacheControl)
        if let lastModified { headers.add("Last-Modified", HTTPDate.format(lastModified)) }
        headers.add("Accept-Ranges", "bytes")
        return headers
    }

    /// The fields of the whole representation's `200`, exactly as ``response(to:)`` sends them.
    var wholeHeaders: HTTPHeaders {
        var headers = validators
        headers.add("Content-Type", contentType)
        return headers
    }

    /// Whether a request's answer may depend on more than the method: a precondition or a range.
    /// Without any, a `GET` or `HEAD` gets the `200` of ``wholeHeaders``.
    static func isConditional(_ request: HTTPRequest) -> Bool {
        // Each lookup compares lengths first: a request with a few headers costs a few compares.
        let headers = request.headers
        return headers["Range"] != nil || headers["If-Match"] != nil || headers["If-None-Match"] != nil
            || headers["If-Modified-Since"] != nil || headers["If-Unmodified-Since"] != nil
    }

    func response(to request: HTTPRequest) -> HTTPResponse {
        var headers = validators

        // Preconditions, in RFC 9110 §13.2.2 order.
        if let ifMatch = request.headers["If-Match"] {
            if !Self.list(ifMatch, matches: etag, weak: false) { return failure(412, "precondition_failed", "If-Match does not match", headers) }
        } else if let since = request.headers["If-Unmodified-Since"].flatMap(HTTPDate.parse), let lastModified,
                  lastModified.timeIntervalSince1970.rounded(.down) > since.timeIntervalSince1970 {
            return failure(412, "precondition_failed", "modified since If-Unmodified-Since", headers)
        }
        if let ifNoneMatch = request.headers["If-None-Match"] {
            if Self.list(ifNoneMatch, matches: etag, weak: true) { return HTTPResponse(status: 304, headers: headers) }
        } else if let since = request.headers["If-Modified-Since"].flatMap(HTTPDate.parse), let lastModified,
                  lastModified.timeIntervalSince1970.rounded(.down) <= since.timeIntervalSince1970 {
            return HTTPResponse(status: 304, headers: headers)
        }

        headers.add("Content-Type", contentType)
        var range = request.method == "GET" ? RangeRequest.parse(request.headers["Range"], size: size) : .whole
        if range != .whole, let ifRange = request.headers["If-Range"], !ifRangeHolds(ifRange) { range = .whole }
        switch range {
        case .whole:
            return HTTPResponse(status: 200, headers: headers, body: body(offset: 0, length: size))
        case .bytes(let first, let last):
            headers.add("Content-Range", "bytes \(first)-\(last)/\(size)")
            return HTTPResponse(status: 206, headers: headers, body: body(offset: first, length: last - first + 1))
        case .unsatisfiable:
            var response = failure(416, "range_not_satisfiable", "the range does not overlap the \(size) bytes of this resource", headers)
            response.headers.set("Content-Range", "bytes */\(size)")
            return response
        }
    }

    /// If-Range holds when it is our strong ETag, or exactly our Last-Modified date.
    private func ifRangeHolds(_ value: String) -> Bool {
        let trimmed = value.trimmingWhitespace
        if trimmed.hasPrefix("\"") || trimmed.hasPrefix("W/") { return trimmed == etag }
        guard let date = HTTPDate.parse(trimmed), let lastModified else { return false }
        return date.timeIntervalSince1970 == lastModified.timeIntervalSince1970.rounded(.down)
    }

    private func body(offset: Int64, length: Int64) -> HTTPResponse.Body {
        switch source {
        case .bytes(let bytes):
            return .bytes(Array(bytes[Int(offset)..<Int(offset + length)]))
        case .shared(let shared):
            return .shared(shared, offset: Int(offset), length: Int(length))
        case .file(let file):
            // The descriptor passes to the response, which passes it to libmicrohttpd (sendfile).
            return .file(FileRegion(descriptor: file.release(), offset: offset, length: length))
        case .stream(let source):
            return length == 0 ? .empty : .stream(source(offset, length), length: length)
        }
    }

    private func failure(_ status: Int, _ code: String, _ message: String, _ headers: HTTPHeaders) -> HTTPResponse {
        var response = HTTPResponse.error(status: status, code: code, message: message)
        for (name, value) in headers where name != "Accept-Ranges" { response.headers.add(name, value) }
        return response
    }

    /// Whether a list of entity tags (or `*`) names `etag`; weak comparison ignores `W/`.
    static func list(_ header: String, matches etag: String, weak: Bool) -> Bool {
        for item in header.split(separator: ",") {
            var tag = String(item).trimmingWhitespace
            if tag == "*" { return true }
            if tag.hasPrefix("W/") {
                guard weak else { continue }
                tag.removeFirst(2)
            }
            if tag == etag { return true }
        }
        return false
    }
}
