import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A TCP server on 127.0.0.1 that answers each connection as a script says: it reads the
/// request's head (and a body of its `Content-Length`), records it, and hands the connection to
/// `respond`, which writes whatever bytes it likes, as slowly as it likes. For the client's
/// tests against servers that break the rules. Stopped by ``stop()``; connections end when
/// `respond` returns.
public final class HostileServer: Sendable {
    /// A request as received.
    public struct Request: Sendable {
        public let head: String
        public let body: [UInt8]
    }

    /// What `respond` gets: the request, and a way to send bytes (false once the client is gone).
    public struct Connection: Sendable {
        public let request: Request
        let fd: Int32

        /// Sends bytes; false if the client went away.
        @discardableResult
        public func send(_ bytes: [UInt8]) -> Bool {
            var sent = 0
            while sent < bytes.count {
                let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
                guard n > 0 else { return false }
                sent += n
            }
            return true
        }

        @discardableResult
        public func send(_ text: String) -> Bool { send(Array(text.utf8)) }
    }

    public let port: UInt16
    private let listener: Int32
    private let stopped = Atomic<Bool>(false)
    private let received = Mutex<[Request]>([])

    /// Every request received so far.
    public var requests: [Request] { received.withLock { $0 } }

    public init(_ respond: @escaping @Sendable (Connection) -> Void) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw POSIXError(.EADDRINUSE)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        port = UInt16(bigEndian: address.sin_port)
        listener = fd
        Thread.detachNewThread { [self] in
            while !stopped.load(ordering: .acquiring) {
                let client = accept(fd, nil, nil)
                guard client >= 0 else { continue }
                Thread.detachNewThread { [self] in
                    defer { close(client) }
                    guard let request = Self.readRequest(client) else { return }
                    received.withLock { $0.append(request) }
                    respond(Connection(request: request, fd: client))
                }
            }
        }
    }

    public var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    public func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    deinit { stop() }

    private static func readRequest(_ fd: Int32) -> Request? {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        while bytes.firstRange(of: [13, 10, 13, 10]) == nil {
            let n = recv(fd, &buffer, buffer.count, 0)
            guard n > 0 else { return nil }
            bytes += buffer[0..<n]
        }
        let end = bytes.firstRange(of: [13, 10, 13, 10])!
        let head = String(decoding: bytes[..<end.lowerBound], as: UTF8.self)
        var body = Array(bytes[end.upperBound...])
        let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
            .flatMap { Int($0.split(separator: ":", maxSplits: 1)[1].trimmingCharacters(in: .whitespaces)) } ?? 0
        while body.count < length {
            let n = recv(fd, &buffer, min(buffer.count, length - body.count), 0)
            guard n > 0 else { break }
            body += buffer[0..<n]
        }
        return Request(head: head, body: body)
    }
}
