internal import CMicroHTTPD
#if canImport(Glibc)
import Glibc
#endif

/// A `200` answer made once and sent to many requests: libmicrohttpd's response object with its
/// headers and body, which the library reference-counts and queues on any number of connections
/// at once, each with its own position in the body (a descriptor's bytes go by `sendfile` from
/// an offset of their own; memory by one vectored send with the header). Per request only the
/// queueing is left: no open, `fstat`, response or header made, no copy.
///
/// For an immutable resource (a blob named by its hash). The headers it was made with are sent
/// as they are; ``HTTPResponse`` with a ``HTTPResponse/Body/prepared(_:)`` body and headers of
/// its own, or one that closes the connection, gets a fresh response for that request.
public final class PreparedResponse: @unchecked Sendable {
    // @unchecked: the MHD response is immutable once made; libmicrohttpd locks its reference count.
    /// Where the body comes from.
    public enum Body: Sendable {
        /// An open descriptor of a regular file of `length` bytes; the response owns it (and
        /// closes it when the last connection using it is done).
        case file(descriptor: Int32, length: Int64)
        /// Bytes in memory, shared without a copy.
        case shared(SharedBytes)
    }

    /// The header fields, as made (`Content-Length` and `Date` are the server's).
    public let headers: HTTPHeaders
    /// The number of body bytes.
    public let bodyLength: Int64
    /// The MHD_Response pointer as an integer, for the same reason the server keeps its daemon so.
    private let response: Int
    /// The body's source, kept so that a request that needs other headers gets its own response.
    private let source: Source

    private enum Source {
        case file(Int32)
        case shared(SharedBytes)
    }

    /// Makes the response, or nil when libmicrohttpd cannot (then a descriptor is closed here).
    public init?(headers: HTTPHeaders, body: Body) {
        let made: OpaquePointer?
        switch body {
        case .file(let descriptor, let length):
            made = MHD_create_response_from_fd_at_offset64(UInt64(length), descriptor, 0)
            if made == nil { close(descriptor) }
            source = .file(descriptor)
            bodyLength = length
        case .shared(let bytes):
            let owner = Unmanaged.passRetained(bytes).toOpaque()
            made = MHD_create_response_from_buffer_with_free_callback_cls(bytes.count, bytes.storage.baseAddress!, releaseSharedBytes, owner)
            if made == nil { Unmanaged<SharedBytes>.fromOpaque(owner).release() }
            source = .shared(bytes)
            bodyLength = Int64(bytes.count)
        }
        guard let made else { return nil }
        for (name, value) in headers {
            guard name.withCString({ name in value.withCString { MHD_add_response_header(made, name, $0) } }) == .YES else {
                MHD_destroy_response(made)
                return nil
            }
        }
        self.headers = headers
        self.response = Int(bitPattern: made)
    }

    /// Whether the body is sent from a descriptor.
    var isFile: Bool {
        if case .file = source { return true }
        return false
    }

    /// Queues it on `connection` (the caller holds a reference to self until this returns;
    /// libmicrohttpd holds its own from here until the connection is done with it).
    func queue(on connection: OpaquePointer, status: Int) -> MHD_Result {
        MHD_queue_response(connection, UInt32(status), OpaquePointer(bitPattern: response))
    }

    /// The same body for one request that needs more headers or a closing connection: memory is
    /// shared, a descriptor duplicated (the copy passes to the new response). Nil if it cannot be.
    func fresh() -> HTTPResponse.Body? {
        switch source {
        case .shared(let bytes):
            return .shared(bytes, offset: 0, length: bytes.count)
        case .file(let descriptor):
            // Alive while this object is: libmicrohttpd closes it only when the response is freed.
            let copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
            return copy < 0 ? nil : .file(FileRegion(descriptor: copy, offset: 0, length: bodyLength))
        }
    }

    deinit {
        // libmicrohttpd frees it (closing the descriptor) once no connection still sends it.
        MHD_destroy_response(OpaquePointer(bitPattern: response))
    }
}
