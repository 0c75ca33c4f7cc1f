import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A TCP proxy in front of a real server that misbehaves on purpose: it cuts a response after
/// some bytes (a dropped connection), answers a canned status instead of forwarding, or drops
/// the request's range. It
/// records every request head, so tests can see the `Range` a client resumed with.
public final class FaultyProxy: Sendable {
    public enum Behavior: Sendable {
        /// Forward both ways.
        case forward
        /// Forward the request, then close both sides after this many response bytes.
        case cutAfter(Int)
        /// Answer this status with an empty body, without forwarding.
        case respond(Int)
        /// Read the request and never answer (until the proxy stops).
        case stall
        /// Forward without the `Range` and `If-Range` headers, as a cache that ignores them would.
        case ignoringRange
    }

    public let port: UInt16
    private let listener: Int32
    private let upstream = Atomic<UInt16>(0)
    /// The server behind (settable after start, so a server can be told the proxy's URL first).
    public var upstreamPort: UInt16 {
        get { upstream.load(ordering: .acquiring) }
        set { upstream.store(newValue, ordering: .releasing) }
    }
    private let decide: @Sendable (Int, String) -> Behavior
    private let heads = Mutex<[String]>([])
    private let stopped = Atomic<Bool>(false)

    /// Requests seen so far (request line and headers).
    public var requests: [String] { heads.withLock { $0 } }

    /// Listens on 127.0.0.1 (an ephemeral port); `decide` gets each request's index and head.
    public init(upstreamPort: UInt16 = 0, decide: @escaping @Sendable (Int, String) -> Behavior) throws {
        self.decide = decide
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var one: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(listener, 64) == 0 else { throw POSIXError(.EADDRINUSE) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        port = UInt16(bigEndian: address.sin_port)
        upstream.store(upstreamPort, ordering: .releasing)
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    deinit { stop() }

    public func stop() {
        if !stopped.exchange(true, ordering: .relaxed) {
            shutdown(listener, Int32(SHUT_RDWR))
            close(listener)
        }
    }

    private func acceptLoop() {
        var index = 0
        while !stopped.load(ordering: .relaxed) {
            let client = accept(listener, nil, nil)
            guard client >= 0 else { if errno == EINTR { continue } else { return } }
            let current = index
            index += 1
            Thread.detachNewThread { [self] in serve(client, index: current) }
        }
    }

    private func serve(_ client: Int32, index: Int) {
        defer { close(client) }
        var head: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while head.firstRange(of: [13, 10, 13, 10]) == nil {
            let n = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { return }
            head += buffer[0..<n]
        }
        let text = String(decoding: head[..<head.firstRange(of: [13, 10, 13, 10])!.lowerBound], as: UTF8.self)
        heads.withLock { $0.append(text) }
        let behavior = decide(index, text)
        if case .respond(let status) = behavior {
            RawHTTP.sendAll(client, Array("HTTP/1.1 \(status) Injected\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8))
            return
        }
        if case .stall = behavior {
            while !stopped.load(ordering: .relaxed) { usleep(10_000) }
            return
        }
        guard let upstream = try? RawHTTP.connect(port: upstreamPort) else { return }
        defer { close(upstream) }
        if case .ignoringRange = behavior {
            let lines = text.components(separatedBy: "\r\n").filter { line in
                let name = line.lowercased()
                return !name.hasPrefix("range:") && !name.hasPrefix("if-range:")
            }
            RawHTTP.sendAll(upstream, Array((lines.joined(separator: "\r\n") + "\r\n\r\n").utf8) + head[(head.firstRange(of: [13, 10, 13, 10])!.upperBound)...])
        } else {
            RawHTTP.sendAll(upstream, head)
        }
        // Client to server in the background (request bodies), server to client here.
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
                guard n > 0 else { shutdown(upstream, Int32(SHUT_WR)); return }
                RawHTTP.sendAll(upstream, Array(buffer[0..<n]))
            }
        }
        var forwarded = 0
        let limit: Int = if case .cutAfter(let bytes) = behavior { bytes } else { .max }
        while forwarded < limit {
            let n = buffer.withUnsafeMutableBytes { recv(upstream, $0.baseAddress, min($0.count, limit - forwarded), 0) }
            guard n > 0 else { break }
            RawHTTP.sendAll(client, Array(buffer[0..<n]))
            forwarded += n
        }
        shutdown(client, Int32(SHUT_RDWR))
        shutdown(upstream, Int32(SHUT_RDWR))
    }
}
