#if os(Linux)
import DepotCore
import Foundation

/// The request side of an exchange: the head, then a body from memory or from a file (with
/// `sendfile` over plain TCP; read and encrypted 1 MiB at a time over TLS), plain or chunked.
extension HTTPConnection {
    /// Sends the request line and header fields (`Host` and `Connection: close` are added).
    public func sendHead(method: String, headers: [(String, String)]) throws {
        // The target as written (percent-encoding kept), not URL.path's decoded form.
        let components = URLComponents(url: url, resolvingAgainstBaseURL: true)
        var target = components?.percentEncodedPath ?? "/"
        if target.isEmpty { target = "/" }
        if let query = components?.percentEncodedQuery { target += "?" + query }
        var hostField = url.host ?? ""
        if hostField.contains(":") && !hostField.hasPrefix("[") { hostField = "[\(hostField)]" }
        if let port = url.port { hostField += ":\(port)" }
        var text = "\(method) \(target) HTTP/1.1\r\nHost: \(hostField)\r\nConnection: close\r\nUser-Agent: assetdepot\r\n"
        for (name, value) in headers {
            guard HTTPResponseParser.isSendable(name: name, value: value) else { throw ClientError.unsendableField(name, url: url.absoluteString) }
            text += "\(name): \(value)\r\n"
        }
        text += "\r\n"
        try sendBytes(Array(text.utf8))
    }

    /// Sends bytes of a body.
    public func sendBytes(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            if let tls {
                guard try tlsCall({ try bytes.withUnsafeBytes { try tls.write($0) } }) else { throw failure(System.errno) }
                return
            }
            let n = bytes.withUnsafeBytes { Sockets.send(socket, $0.baseAddress! + sent, bytes.count - sent) }
            guard n > 0 else { throw failure(System.errno) }
            sent += n
        }
    }

    /// Sends `count` bytes of `file` from `offset` with sendfile, reporting each step to `progress`.
    public func sendFile(_ file: FileDescriptor, offset: Int64, count: Int64, progress: (Int64) -> Void = { _ in }) throws {
        if let tls { return try sendFileOverTLS(tls, file, offset: offset, count: count, progress: progress) }
        var position = offset
        var remaining = count
        while remaining > 0 {
            let n = Sockets.sendFile(socket, file.rawValue, position: &position, count: Int(min(remaining, 4 << 20)))
            guard n > 0 else { throw n == 0 ? ClientError.transport(url.absoluteString, URLError(.cannotWriteToFile)) : failure(System.errno) }
            remaining -= Int64(n)
            progress(Int64(n))
        }
    }

    /// Sends `count` bytes of `file` from `offset` as a chunked body (chunks of up to 4 MiB, each
    /// by ``sendFile(_:offset:count:progress:)``), then the last chunk with the `trailer` fields.
    func sendChunked(
        _ file: FileDescriptor, offset: Int64, count: Int64, progress: (Int64) -> Void, trailer: () throws -> [(String, String)]
    ) throws {
        let chunk: Int64 = 4 << 20
        var position = offset
        var remaining = count
        // Each chunk's size line goes out with the end of the chunk before it, in one send.
        var pending = ""
        while remaining > 0 {
            let size = min(chunk, remaining)
            try sendBytes(Array((pending + String(size, radix: 16) + "\r\n").utf8))
            try sendFile(file, offset: position, count: size, progress: progress)
            position += size
            remaining -= size
            pending = "\r\n"
        }
        var last = pending + "0\r\n"
        for (name, value) in try trailer() {
            guard HTTPResponseParser.isSendable(name: name, value: value) else { throw ClientError.unsendableField(name, url: url.absoluteString) }
            last += "\(name): \(value)\r\n"
        }
        try sendBytes(Array((last + "\r\n").utf8))
    }

    /// TLS has no sendfile: 1 MiB reads from the file, encrypted and written by libssl.
    private func sendFileOverTLS(_ tls: TLSSession, _ file: FileDescriptor, offset: Int64, count: Int64, progress: (Int64) -> Void) throws {
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var position = offset
        var remaining = count
        while remaining > 0 {
            let n = try buffer.withUnsafeMutableBytes { try file.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<Int(min(Int64($0.count), remaining))]), at: position) }
            guard n > 0 else { throw ClientError.transport(url.absoluteString, URLError(.cannotWriteToFile)) }
            guard try tlsCall({ try buffer.withUnsafeBytes { try tls.write(UnsafeRawBufferPointer(rebasing: $0[0..<n])) } }) else {
                throw failure(System.errno)
            }
            position += Int64(n)
            remaining -= Int64(n)
            progress(Int64(n))
        }
    }
}
#endif
