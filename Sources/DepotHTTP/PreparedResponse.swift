internal import CMicroHTTPD
import Synchronization
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
    /// MHD_Response pointers as integers (0: none). libmicrohttpd holds a response's lock while it
    /// sends a descriptor's bytes, so one response shared by two server threads makes each wait
    /// for the other's `sendfile`: a descriptor's body gets one response per server thread, each
    /// with a duplicate of the descriptor, all made at once (so the descriptors an answer holds do
    /// not depend on which threads happened to serve it); memory needs one.
    private let responses: [Slot]

    private final class Slot: Sendable {
        let response = Atomic<Int>(0)
    }
    /// The body's source, kept so that a request that needs other headers gets its own response.
    private let source: Source

    private enum Source: Sendable {
        case file(Int32)
        case shared(SharedBytes)
    }

    /// The most responses one descriptor's body gets; more server threads share them (correct,
    /// only slower).
    public static let threadSlots = 16

    /// Makes the response, or nil when libmicrohttpd cannot (then a descriptor is closed). A
    /// descriptor's body gets `threads` responses (at most ``threadSlots``): one per server thread.
    public init?(headers: HTTPHeaders, body: Body, threads: Int = 1) {
        self.headers = headers
        let first: OpaquePointer?
        switch body {
        case .file(let descriptor, let length):
            source = .file(descriptor)
            bodyLength = length
            first = Self.make(headers: headers, source: .file(descriptor), length: length)
            responses = (0..<min(max(threads, 1), Self.threadSlots)).map { _ in Slot() }
        case .shared(let bytes):
            source = .shared(bytes)
            bodyLength = Int64(bytes.count)
            first = Self.make(headers: headers, source: .shared(bytes), length: bodyLength)
            responses = [Slot()]
        }
        // On failure make has closed the descriptor (or libmicrohttpd has, freeing the response).
        guard let first else { return nil }
        responses[0].response.store(Int(bitPattern: first), ordering: .releasing)
        guard case .file(let descriptor) = source else { return }
        // The other threads' responses, each with a duplicate of the descriptor (alive while the
        // first response is). One that cannot be made leaves its slot to the first response.
        for slot in responses.dropFirst() {
            let copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
            guard copy >= 0, let made = Self.make(headers: headers, source: .file(copy), length: bodyLength) else { continue }
            slot.response.store(Int(bitPattern: made), ordering: .releasing)
        }
    }

    /// One libmicrohttpd response of the body (which passes to it: the descriptor is closed, the
    /// memory released, when libmicrohttpd frees it), or nil — and then the descriptor is closed,
    /// exactly once: here if no response was made, by libmicrohttpd if one was made and freed.
    private static func make(headers: HTTPHeaders, source: Source, length: Int64) -> OpaquePointer? {
        let made: OpaquePointer?
        switch source {
        case .file(let descriptor):
            made = MHD_create_response_from_fd_at_offset64(UInt64(length), descriptor, 0)
            if made == nil { close(descriptor) }
        case .shared(let bytes):
            let owner = Unmanaged.passRetained(bytes).toOpaque()
            made = MHD_create_response_from_buffer_with_free_callback_cls(bytes.count, bytes.storage.baseAddress!, releaseSharedBytes, owner)
            if made == nil { Unmanaged<SharedBytes>.fromOpaque(owner).release() }
        }
        guard let made else { return nil }
        for (name, value) in headers {
            guard name.withCString({ name in value.withCString { MHD_add_response_header(made, name, $0) } }) == .YES else {
                MHD_destroy_response(made)
                return nil
            }
        }
        // Made once per answer, with the fields every answer carries (queued as it is, it skips
        // the path that adds them).
        guard addBaselineHeaders(made, ownPolicy: headers["Content-Security-Policy"] != nil) else {
            MHD_destroy_response(made)
            return nil
        }
        return made
    }

    /// This thread's response (the first one when its own could not be made).
    private func response() -> OpaquePointer? {
        let slot = responses.count == 1 ? 0 : ThreadSlot.current % responses.count
        if let ready = OpaquePointer(bitPattern: responses[slot].response.load(ordering: .acquiring)) { return ready }
        return OpaquePointer(bitPattern: responses[0].response.load(ordering: .acquiring))
    }

    /// Queues it on `connection` (the caller holds a reference to self until this returns;
    /// libmicrohttpd holds its own from here until the connection is done with it).
    func queue(on connection: OpaquePointer, status: Int) -> MHD_Result {
        guard let response = response() else { return .NO }
        return MHD_queue_response(connection, UInt32(status), response)
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

    /// Whether the body is sent from a descriptor.
    var isFile: Bool {
        if case .file = source { return true }
        return false
    }

    deinit {
        // libmicrohttpd frees each once no connection still sends it (closing its descriptor).
        for slot in responses {
            if let made = OpaquePointer(bitPattern: slot.response.load(ordering: .acquiring)) { MHD_destroy_response(made) }
        }
    }
}

/// A small index per thread (0, 1, 2, … in order of first use), for per-thread copies.
enum ThreadSlot {
    private static let next = Atomic<Int>(0)
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    /// This thread's index.
    static var current: Int {
        if let value = pthread_getspecific(key) { return Int(bitPattern: value) - 1 }
        let index = next.add(1, ordering: .relaxed).oldValue
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: index + 1))
        return index
    }
}
