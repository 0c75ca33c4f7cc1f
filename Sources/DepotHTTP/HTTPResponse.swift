#if canImport(Glibc)
import Glibc
#endif

/// A response: status, headers and a body from memory or from a file descriptor.
public struct HTTPResponse: Sendable {
    /// Where the body comes from.
    public enum Body: Sendable {
        /// No body (the length is 0).
        case empty
        /// Bytes copied to libmicrohttpd.
        case bytes([UInt8])
        /// A range of bytes that many responses share without a copy (a live manifest).
        case shared(SharedBytes, offset: Int, length: Int)
        /// A region of an open file, sent with sendfile.
        case file(FileRegion)
        /// `length` bytes produced as they are sent (a blob read from an object store).
        case stream(any HTTPBodySource, length: Int64)
        /// A response made once, headers and body, sent as it is when the response's own
        /// ``HTTPResponse/headers`` are empty and the connection stays open.
        case prepared(PreparedResponse)
    }

    /// The status code.
    public var status: Int
    /// Header fields; `Content-Length` and `Date` are added by the server.
    public var headers: HTTPHeaders
    /// The body.
    public var body: Body
    /// Whether the connection closes after this response.
    public var closeConnection: Bool
    /// A low-cardinality name of what answered (`blob`, `manifest`, …), reported in ``HTTPExchangeRecord``.
    public var route: String

    public init(status: Int, headers: HTTPHeaders = HTTPHeaders(), body: Body = .empty, closeConnection: Bool = false, route: String = "other") {
        self.status = status
        self.headers = headers
        self.body = body
        self.closeConnection = closeConnection
        self.route = route
    }

    /// The number of body bytes this response carries.
    public var bodyLength: Int64 {
        switch body {
        case .empty: return 0
        case .bytes(let bytes): return Int64(bytes.count)
        case .shared(_, _, let length): return Int64(length)
        case .file(let region): return region.length
        case .stream(_, let length): return length
        case .prepared(let prepared): return prepared.bodyLength
        }
    }

    /// A response with a body of bytes and a content type.
    public static func bytes(_ bytes: [UInt8], status: Int = 200, contentType: String) -> HTTPResponse {
        var headers = HTTPHeaders()
        headers.add("Content-Type", contentType)
        return HTTPResponse(status: status, headers: headers, body: .bytes(bytes))
    }

    /// A JSON error body `{"error": {"code": …, "message": …}}`.
    public static func error(status: Int, code: String, message: String, closeConnection: Bool = false) -> HTTPResponse {
        var response = bytes(Array(errorJSON(code: code, message: message).utf8), status: status, contentType: "application/json")
        response.closeConnection = closeConnection
        response.route = "error"
        return response
    }

    /// The JSON text of an error body.
    public static func errorJSON(code: String, message: String) -> String {
        "{\"error\":{\"code\":\"\(jsonEscaped(code))\",\"message\":\"\(jsonEscaped(message))\"}}\n"
    }

    /// Escapes a string for inclusion inside JSON quotes.
    public static func jsonEscaped(_ text: String) -> String {
        // Most messages need nothing escaped: one pass over the bytes, no copy (error answers
        // are what floods of 404s and 401s cost).
        if !text.utf8.contains(where: { $0 == 0x22 || $0 == 0x5C || $0 < 0x20 }) { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20: out += String(format: scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    private static func String(format value: UInt32) -> Swift.String {
        let hex = Swift.String(value, radix: 16)
        return "\\u" + Swift.String(repeating: "0", count: 4 - hex.count) + hex
    }
}

/// Immutable bytes in memory of their own, which libmicrohttpd sends from directly: each
/// response holds a reference until libmicrohttpd is done with it, so a large body served
/// many times at once is not copied once per request.
public final class SharedBytes: @unchecked Sendable {
    // @unchecked: owns raw memory, written once in init and only read afterwards.
    let storage: UnsafeMutableRawBufferPointer

    public init(_ bytes: [UInt8]) {
        let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: max(bytes.count, 1), alignment: 16)
        bytes.withUnsafeBytes { storage.copyMemory(from: $0) }
        self.storage = storage
        count = bytes.count
    }

    /// The number of bytes.
    public let count: Int

    /// A copy of the bytes.
    public var bytes: [UInt8] { Array(UnsafeRawBufferPointer(rebasing: storage[0..<count])) }

    deinit { storage.deallocate() }
}

/// A byte range of an open file, owned until libmicrohttpd takes the descriptor.
public final class FileRegion: @unchecked Sendable {
    // @unchecked: owns a file descriptor that only one thread uses (the one answering the request).
    private var descriptor: Int32
    /// The first byte sent.
    public let offset: Int64
    /// The number of bytes sent.
    public let length: Int64

    /// Takes ownership of `descriptor`.
    public init(descriptor: Int32, offset: Int64, length: Int64) {
        self.descriptor = descriptor
        self.offset = offset
        self.length = length
    }

    /// Hands the descriptor to a new owner, who must close it.
    func take() -> Int32 {
        let fd = descriptor
        descriptor = -1
        return fd
    }

    deinit { if descriptor >= 0 { close(descriptor) } }
}

/// A body produced while it is sent. libmicrohttpd calls `read` on its own thread, in order, with
/// the position in the body; it blocks until it has bytes and returns how many (0 only at the
/// end). A thrown error aborts the response: the connection closes, so a client never takes a
/// short body for a whole one. `close` is called once, when the response is freed.
public protocol HTTPBodySource: AnyObject, Sendable {
    func read(into buffer: UnsafeMutableRawBufferPointer, at position: Int64) throws -> Int
    func close()
}

extension HTTPResponse.Body {
    /// Whether the body is sent from a file descriptor (by `sendfile`).
    var isFile: Bool {
        switch self {
        case .file: return true
        case .prepared(let prepared): return prepared.isFile
        case .empty, .bytes, .shared, .stream: return false
        }
    }
}
