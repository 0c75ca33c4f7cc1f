import DepotServer
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A client that sends a request and then reads its answer slowly, to keep it in flight.
public final class SlowReader: @unchecked Sendable {
    // @unchecked: owns one socket, used by one test at a time.
    private let fd: Int32

    public init(port: UInt16, request: String) throws {
        fd = try RawHTTP.connect(port: port, receiveBuffer: 4096)
        _ = request.withCString { Glibc.send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
    }

    /// Reads until at least `count` bytes have arrived (or the peer closes); returns the count read.
    public func read(atLeast count: Int) -> Int {
        var total = 0
        var buffer = [UInt8](repeating: 0, count: 4096)
        while total < count {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            total += n
        }
        return total
    }

    /// Reads everything, in small slow steps at first; returns the bytes received.
    public func readAll() throws -> Int {
        var total = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var steps = 0
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, steps < 20 ? 4096 : $0.count, 0) }
            if n <= 0 { break }
            total += n
            steps += 1
            if steps < 20 { usleep(50_000) }
        }
        return total
    }

    deinit { close(fd) }
}

extension DepotServer {
    /// Starts ``shutdown(gracePeriod:)`` on another thread (it blocks until the drain ends).
    public func shutdownInBackground(gracePeriod: Duration) -> Bool {
        Thread.detachNewThread { [self] in _ = self.shutdown(gracePeriod: gracePeriod) }
        return true
    }
}

/// Streams a file as a PUT body over a socket.
public enum HTTPTransportForTests {
    public static func put(port: UInt16, path: String, file: String, token: String) async throws -> RawHTTP.Response {
        let size = FileManager.default.fileExists(atPath: file) ? (try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int ?? 0) : 0
        let body = try Array(Data(contentsOf: URL(fileURLWithPath: file)))
        let head = "PUT \(path) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nContent-Length: \(size)\r\nConnection: close\r\n\r\n"
        guard let response = try RawHTTP.send(port: port, head, body: body, timeout: 30).first else { throw POSIXError(.ECONNRESET) }
        return response
    }
}
