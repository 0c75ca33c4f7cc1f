internal import CMicroHTTPD
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A small HTTP/1.1 server over libmicrohttpd: an internal polling thread with epoll and a
/// thread pool, bodies streamed to handlers, file bodies sent with sendfile.
///
/// Owns one `MHD_Daemon`. ``stop()`` joins libmicrohttpd's threads before releasing the
/// context those threads use, so no callback outlives the server.
public final class HTTPServer: Sendable {
    /// The configuration it was started with.
    public let configuration: HTTPServerConfiguration
    /// The bound port (the real one when configured with port 0).
    public let port: UInt16
    /// The MHD_Daemon pointer as an integer (0 once stopped): OpaquePointer is not Sendable.
    private let daemon: Mutex<Int>
    private let context: Unmanaged<ServerContext>

    /// Starts listening; returns once the socket is bound.
    public init(configuration: HTTPServerConfiguration, handler: some HTTPHandler) throws(HTTPServerError) {
        self.configuration = configuration
        let context = Unmanaged.passRetained(ServerContext(handler: handler, trustedProxies: configuration.trustedProxies))
        var address = try SocketAddress(host: configuration.host, port: configuration.port)
        var options: [MHD_OptionItem] = [
            MHD_OptionItem(option: .THREAD_POOL_SIZE, value: max(1, configuration.threads), ptr_value: nil),
            MHD_OptionItem(option: .CONNECTION_LIMIT, value: configuration.connectionLimit, ptr_value: nil),
            MHD_OptionItem(option: .CONNECTION_TIMEOUT, value: configuration.connectionTimeout, ptr_value: nil),
            MHD_OptionItem(option: .CONNECTION_MEMORY_LIMIT, value: configuration.connectionMemoryLimit, ptr_value: nil),
            MHD_OptionItem(option: .PER_IP_CONNECTION_LIMIT, value: configuration.perIPConnectionLimit, ptr_value: nil),
            // No LISTENING_ADDRESS_REUSE: it adds SO_REUSEPORT, with which a second origin on a
            // taken port (or two on ephemeral ports, as the tests found) silently shares its
            // connections instead of failing. libmicrohttpd's default, SO_REUSEADDR, is kept (a
            // restart binds at once past TIME_WAIT).
            MHD_OptionItem(option: .END, value: 0, ptr_value: nil),
        ]
        // ITC wakes the workers at stop (and lets requests in flight finish during a drain).
        let flags = MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue | MHD_USE_ITC.rawValue
            | (address.isIPv6 ? MHD_USE_IPv6.rawValue : 0) | (configuration.turbo ? MHD_USE_TURBO.rawValue : 0)
        let started = address.withSockaddr { sockaddr in
            options.withUnsafeMutableBufferPointer { items in
                CMicroHTTPD_start(
                    flags, configuration.port, sockaddr,
                    accessHandlerCallback, context.toOpaque(),
                    requestCompletedCallback, uriLogCallback, context.toOpaque(),
                    items.baseAddress
                )
            }
        }
        guard let started else {
            context.release()
            throw .startFailed(host: configuration.host, port: configuration.port)
        }
        self.daemon = Mutex(Int(bitPattern: started))
        self.context = context
        self.port = CMicroHTTPD_bound_port(started)
    }

    /// Requests whose exchange has begun and not yet ended.
    public var inFlightRequests: Int { context.takeUnretainedValue().inFlight.load(ordering: .relaxed) }

    /// Stops accepting connections, lets requests in flight finish for up to `gracePeriod`,
    /// then stops. Returns the number of requests that were still running when it stopped.
    @discardableResult
    public func shutdown(gracePeriod: Duration) -> Int {
        let running = daemon.withLock { $0 }
        guard let running = OpaquePointer(bitPattern: running) else { return 0 }
        // Not MHD_quiesce_daemon: on an epoll daemon with its own threads it races the workers
        // over removing the listening socket from their epoll sets and aborts the process
        // ("Failed to remove listen FD from epoll set", an open libmicrohttpd defect; CI hit it
        // at d8f8b4d). Instead the listening socket is replaced, under its descriptor number, by
        // a socket that listens on nothing: the kernel closes the listening one (new connections
        // are refused, its backlog reset), which leaves every epoll set with it; the workers
        // never see it again, and MHD_stop_daemon closes the stand-in.
        let listener = CMicroHTTPD_listen_fd(running)
        if listener >= 0 {
            let standIn = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            if standIn >= 0 {
                if dup2(standIn, listener) >= 0 { _ = fcntl(listener, F_SETFD, FD_CLOEXEC) }
                close(standIn)
            }
        }
        let deadline = ContinuousClock.now + gracePeriod
        while inFlightRequests > 0 && ContinuousClock.now < deadline {
            usleep(10_000)
        }
        let left = inFlightRequests
        stop()
        return left
    }

    /// Stops listening, closes every connection and joins libmicrohttpd's threads. Idempotent.
    public func stop() {
        let running = daemon.withLock { value -> Int in
            let d = value
            value = 0
            return d
        }
        guard let running = OpaquePointer(bitPattern: running) else { return }
        MHD_stop_daemon(running)
        // MHD's threads are joined: no callback can use the context any more.
        context.release()
    }

    deinit { stop() }
}

/// What libmicrohttpd's callbacks share: the handler, the proxies trusted to name clients and
/// the in-flight count. Safe on every thread.
final class ServerContext: Sendable {
    let handler: any HTTPHandler
    let trustedProxies: TrustedProxies
    let inFlight = Atomic<Int>(0)
    init(handler: any HTTPHandler, trustedProxies: TrustedProxies = .none) { (self.handler, self.trustedProxies) = (handler, trustedProxies) }
}

/// A bindable socket address for a host literal or `localhost`.
struct SocketAddress {
    private var storage = sockaddr_storage()
    private(set) var isIPv6 = false

    init(host: String, port: UInt16) throws(HTTPServerError) {
        let name = host == "localhost" ? "127.0.0.1" : host
        var v4 = sockaddr_in()
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET, name, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            withUnsafeBytes(of: v4) { src in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: src) } }
        } else if inet_pton(AF_INET6, name.trimmingBrackets, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = port.bigEndian
            withUnsafeBytes(of: v6) { src in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: src) } }
            isIPv6 = true
        } else {
            throw .invalidHost(host)
        }
    }

    mutating func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>) -> R) -> R {
        withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
    }
}

extension String {
    var trimmingBrackets: String {
        hasPrefix("[") && hasSuffix("]") ? String(dropFirst().dropLast()) : self
    }
}
