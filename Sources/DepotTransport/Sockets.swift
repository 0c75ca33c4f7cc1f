// The client's own system calls: those of the raw-socket HTTP client, which is Linux only
// (on Apple platforms the transport uses URLSession, and on a device the system downloads).
// File calls go through DepotCore's System.
#if os(Linux)
import DepotCore
import Foundation
import Glibc

enum Sockets {
    /// Why a connection could not be made.
    enum ConnectFailure: Error {
        case unknownHost
        case refused(errno: Int32)
    }

    /// A TCP connection to `host`:`port` (the first address that answers), with send and
    /// receive timeouts and Nagle off.
    static func connect(host: String, port: Int, timeout: TimeInterval) throws(ConnectFailure) -> Int32 {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &list) == 0, let first = list else { throw .unknownHost }
        defer { freeaddrinfo(list) }
        var candidate: UnsafeMutablePointer<addrinfo>? = first
        var lastError: Int32 = ECONNREFUSED
        while let info = candidate {
            let fd = Glibc.socket(info.pointee.ai_family, info.pointee.ai_socktype, info.pointee.ai_protocol)
            if fd >= 0 {
                var tv = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - timeout.rounded(.down)) * 1_000_000))
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
                setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
                var one: Int32 = 1
                setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                if Glibc.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 { return fd }
                lastError = errno
                Glibc.close(fd)
            }
            candidate = info.pointee.ai_next
        }
        throw .refused(errno: lastError)
    }

    /// `send` without SIGPIPE (`MSG_NOSIGNAL`), retrying EINTR; -1 and `errno` on failure.
    static func send(_ socket: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int {
        while true {
            let n = Glibc.send(socket, bytes, count, Int32(MSG_NOSIGNAL))
            if n < 0 && errno == EINTR { continue }
            return n
        }
    }

    /// `sendfile` from `position`, advancing it, retrying EINTR; -1 and `errno` on failure.
    static func sendFile(_ socket: Int32, _ file: Int32, position: inout Int64, count: Int) -> Int {
        var offset = off_t(position)
        while true {
            let n = Glibc.sendfile(socket, file, &offset, count)
            if n < 0 && errno == EINTR { continue }
            position = Int64(offset)
            return n
        }
    }

    /// `recv`, retrying EINTR; -1 and `errno` on failure.
    static func receive(_ socket: Int32, _ buffer: UnsafeMutableRawBufferPointer) -> Int {
        while true {
            let n = recv(socket, buffer.baseAddress, buffer.count, 0)
            if n < 0 && errno == EINTR { continue }
            return n
        }
    }

    /// Makes blocked calls on the socket return at once.
    static func shutdown(_ socket: Int32) { _ = Glibc.shutdown(socket, Int32(SHUT_RDWR)) }

    static func close(_ socket: Int32) { _ = Glibc.close(socket) }

    /// Blocks SIGPIPE on the calling thread: a peer that closes early makes `sendfile` raise
    /// it, which would kill the process; blocked, it stays pending on the thread and ends with
    /// it, and the call fails with EPIPE instead.
    static func blockSIGPIPEOnThisThread() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }
}
#endif
