import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A raw HTTP/1.1 exchange over a socket: for requests no well-behaved client would send.
public struct RawHTTP {
    /// A parsed response.
    public struct Response: Sendable {
        public var status: Int
        public var headers: [(String, String)]
        public var body: [UInt8]
        public func header(_ name: String) -> String? {
            headers.first { $0.0.lowercased() == name.lowercased() }?.1
        }
        public var bodyText: String { String(decoding: body, as: UTF8.self) }
    }

    /// How long a request that changes state (a publish: encryption, fsyncs, a release under
    /// the publish lock) may go without an answer byte: the parallel run on a loaded two-core
    /// CI machine stalled a publish past 60 s twice; only a hang should fail.
    public static let changeWait: TimeInterval = 600

    /// A TCP socket connected to `host` (127.0.0.1 by default):`port`; the caller closes it.
    public static func connect(port: UInt16, host: String = "127.0.0.1", receiveBuffer: Int32? = nil) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        if var size = receiveBuffer { setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size)) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr(host)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            throw POSIXError(.ECONNREFUSED)
        }
        return fd
    }

    /// Sends every byte (or as many as the peer takes before it closes).
    public static func sendAll(_ fd: Int32, _ bytes: [UInt8]) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            sent += n
        }
    }

    /// Sends `request` bytes to 127.0.0.1:`port` and reads until the server closes or `timeout`
    /// passes without a byte. Returns every byte received.
    public static func exchange(port: UInt16, host: String = "127.0.0.1", _ request: [UInt8], timeout: TimeInterval = 5) throws -> [UInt8] {
        let fd = try connect(port: port, host: host)
        defer { close(fd) }
        var tv = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - floor(timeout)) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        // Reads while it sends: a server that answers before the body is all sent (a 4xx, a
        // 507) and closes is read before the reset its close causes can discard the answer.
        var sent = 0
        while sent < request.count {
            var ready = pollfd(fd: fd, events: Int16(POLLIN | POLLOUT), revents: 0)
            let polled = poll(&ready, 1, Int32(timeout * 1000))
            // A signal to this thread (another test's child ending, glibc's set*id broadcast)
            // interrupts a call on a socket with a timeout even under SA_RESTART: go on.
            if polled < 0 && errno == EINTR { continue }
            guard polled > 0 else { break }
            if ready.revents & Int16(POLLIN) != 0 {
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
                if n > 0 { received += buffer[0..<n] } else if n == 0 { break }
            }
            if ready.revents & Int16(POLLERR | POLLHUP) != 0 { break }
            if ready.revents & Int16(POLLOUT) != 0 {
                let n = request.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, min(request.count - sent, 1 << 16), Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
                if n < 0 && errno != EAGAIN && errno != EINTR { break }
                if n > 0 { sent += n }
            }
        }
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            received += buffer[0..<n]
        }
        return received
    }

    /// Sends one request (text with `\r\n` line ends) and parses every response that came back.
    public static func send(port: UInt16, host: String = "127.0.0.1", _ text: String, body: [UInt8] = [], timeout: TimeInterval = 5) throws -> [Response] {
        parse(try exchange(port: port, host: host, Array(text.utf8) + body, timeout: timeout))
    }

    /// Parses consecutive responses (bodies framed by Content-Length).
    public static func parse(_ bytes: [UInt8]) -> [Response] {
        var responses: [Response] = []
        var rest = bytes[...]
        let separator: [UInt8] = [13, 10, 13, 10]
        while let end = rest.firstRange(of: separator) {
            let head = String(decoding: rest[rest.startIndex..<end.lowerBound], as: UTF8.self)
            var lines = head.components(separatedBy: "\r\n")
            let statusLine = lines.removeFirst().split(separator: " ")
            guard statusLine.count >= 2, let status = Int(statusLine[1]) else { break }
            let headers = lines.compactMap { line -> (String, String)? in
                guard let colon = line.firstIndex(of: ":") else { return nil }
                return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
            }
            let length = headers.first { $0.0.lowercased() == "content-length" }.flatMap { Int($0.1) } ?? 0
            let bodyStart = end.upperBound
            let bodyEnd = min(rest.endIndex, bodyStart + length)
            responses.append(Response(status: status, headers: headers, body: Array(rest[bodyStart..<bodyEnd])))
            rest = rest[bodyEnd...]
        }
        return responses
    }
}
