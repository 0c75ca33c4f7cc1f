#if os(Linux)
import DepotCore
import Foundation
import Synchronization

/// One HTTP/1.1 exchange over a TCP socket, with TLS (OpenSSL's libssl, through DepotCore) for
/// `https://`: the engine ``HTTPTransport`` uses on Linux, where URLSession (libcurl through
/// Foundation) runs at a fraction of curl's speed and takes no CA file.
///
/// Bodies stream both ways without passing through Swift buffers larger than 1 MiB: uploads
/// go from a file with `sendfile` (over TLS, 1 MiB reads encrypted by libssl), downloads into a
/// sink in 1 MiB reads. Calls block (the transport runs them through `BlockingCall`);
/// ``cancel()`` from any thread makes a blocked call fail at once.
public final class HTTPConnection: Sendable {
    let socket: Int32
    /// The TLS session over the socket, for https.
    let tls: TLSSession?
    private let cancelled = Atomic<Bool>(false)
    private let closed = Atomic<Bool>(false)
    /// Bytes read past the head, not yet handed out. Only the calling thread touches it.
    private let leftover = Mutex<[UInt8]>([])
    /// When the response began and how fast its body comes. Only the calling thread touches it.
    private let pacing = Mutex(Pacing())
    private let options: TransportOptions
    /// The window over which a streamed body's pace is measured: the per-read timeout.
    private let window: TimeInterval
    public let url: URL

    private struct Pacing {
        var responseStarted: ContinuousClock.Instant?
        var windowStart: ContinuousClock.Instant?
        var windowBytes: Int64 = 0
    }

    /// Connects to the URL's host and port (80 or 443 by default), and for https does the TLS
    /// handshake with `trust` (`options.resolve` may name another address to connect to).
    public init(url: URL, timeout: TimeInterval, trust: TLSClientContext?, options: TransportOptions) throws {
        guard url.scheme == "http" || url.scheme == "https", let host = url.host else {
            throw ClientError.transport(url.absoluteString, URLError(.unsupportedURL))
        }
        self.url = url
        self.options = options
        window = max(timeout, 1)
        let name = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        let port = url.port ?? (url.scheme == "https" ? 443 : 80)
        let address = options.resolve["\(name):\(port)"] ?? name
        let socket: Int32
        do {
            socket = try Sockets.connect(host: address, port: port, timeout: timeout)
        } catch .unknownHost {
            throw ClientError.transport(url.absoluteString, URLError(.cannotFindHost))
        } catch .refused(let code) {
            throw ClientError.transport(url.absoluteString, POSIXError(POSIXErrorCode(rawValue: code) ?? .ECONNREFUSED))
        }
        self.socket = socket
        guard url.scheme == "https" else {
            tls = nil
            return
        }
        do {
            guard let trust else { throw TLSError(description: "no TLS configuration") }
            tls = try trust.connect(socket: socket, host: name)
        } catch {
            Sockets.close(socket)
            throw ClientError.tls(url.absoluteString, "\(error)")
        }
    }

    deinit { close() }

    /// Closes the socket (idempotent).
    public func close() {
        if !closed.exchange(true, ordering: .acquiringAndReleasing) { Sockets.close(socket) }
    }

    /// Makes a blocked call fail now and every later one fail at once.
    public func cancel() {
        cancelled.store(true, ordering: .releasing)
        if !closed.load(ordering: .acquiring) { Sockets.shutdown(socket) }
    }

    func failure(_ code: Int32) -> ClientError {
        if cancelled.load(ordering: .acquiring) { return .cancelled }
        if code == EAGAIN || code == EWOULDBLOCK { return .transport(url.absoluteString, URLError(.timedOut)) }
        return .transport(url.absoluteString, POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO))
    }

    /// Runs a TLS call after the handshake: a protocol failure there is a damaged connection,
    /// as worth retrying as a dropped one (a refused handshake is ``ClientError/Kind/tls``).
    func tlsCall<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as TLSError {
            if cancelled.load(ordering: .acquiring) { throw ClientError.cancelled }
            throw ClientError(.transport, "cannot reach \(url.absoluteString): TLS: \(error.description)")
        }
    }

    /// Reads until `buffer` is full or the stream ends, for a body whose length is known (so it
    /// never waits past its end). TLS hands over one 16 KiB record per read; gathering them
    /// makes the sink's writes 1 MiB, as over plain TCP.
    private func receiveFilling(_ buffer: UnsafeMutableRawBufferPointer, deadline: Bool) throws -> Int {
        guard tls != nil else { return try receive(into: buffer, deadline: deadline) }
        var total = 0
        while total < buffer.count {
            let n = try receive(into: UnsafeMutableRawBufferPointer(rebasing: buffer[total...]), deadline: deadline)
            if n == 0 { break }
            total += n
        }
        return total
    }

    /// Reads what is there (waiting at most the per-read timeout), then checks the pace: with
    /// `deadline`, the response (head, or a body held in memory) must be complete by
    /// ``TransportOptions/responseDeadline`` after the request was sent; otherwise (a streamed
    /// body) each window of `timeout` seconds must bring ``TransportOptions/minimumRate`` bytes a
    /// second. A server that trickles a byte at a time gets an error, not a connection held forever.
    private func receive(into buffer: UnsafeMutableRawBufferPointer, deadline: Bool) throws -> Int {
        let n: Int
        if let tls { n = try tlsCall { try tls.read(into: buffer) } } else { n = Sockets.receive(socket, buffer) }
        guard n >= 0 else { throw failure(System.errno) }
        if cancelled.load(ordering: .acquiring) { throw ClientError.cancelled }
        let now = ContinuousClock.now
        let slow = pacing.withLock { pacing -> String? in
            let started = pacing.responseStarted ?? now
            pacing.responseStarted = started
            if deadline {
                return now - started > .seconds(options.responseDeadline) ? "the response took longer than \(Int(options.responseDeadline)) s" : nil
            }
            let windowStart = pacing.windowStart ?? now
            pacing.windowStart = windowStart
            pacing.windowBytes += Int64(n)
            guard now - windowStart >= .seconds(window) else { return nil }
            defer { (pacing.windowStart, pacing.windowBytes) = (now, 0) }
            return Double(pacing.windowBytes) < Double(options.minimumRate) * window ? "the body arrives slower than \(options.minimumRate) bytes a second" : nil
        }
        if let slow { throw ClientError(.transport, "cannot reach \(url.absoluteString): \(slow)") }
        return n
    }

    /// Reads the status line and header fields (at most 64 KiB), as a response without its body.
    /// Interim (1xx) responses are read and skipped; a `101` or more than 8 of them is an error.
    public func readHead() throws -> HTTPTransport.Response {
        // The response deadline counts from here: the request has been sent.
        pacing.withLock { $0 = Pacing(responseStarted: .now) }
        var bytes = leftover.withLock { value -> [UInt8] in defer { value = [] }; return value }
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        var interim = 0
        while true {
            if let end = bytes.firstRange(of: [13, 10, 13, 10]) {
                let head: HTTPResponseParser.Head
                do {
                    head = try HTTPResponseParser.parseHead(bytes[..<end.lowerBound])
                } catch {
                    throw malformed(error)
                }
                bytes.removeSubrange(..<end.upperBound)
                if (100..<200).contains(head.status) {
                    interim += 1
                    guard head.status != 101, interim <= 8 else { throw malformed(HTTPResponseParser.Failure("interim response \(head.status)")) }
                    continue
                }
                leftover.withLock { $0 = bytes }
                return HTTPTransport.Response(status: head.status, headers: head.headers, body: [])
            }
            guard bytes.count < HTTPResponseParser.headLimit else { throw malformed(HTTPResponseParser.Failure("the response head is longer than 64 KiB")) }
            let n = try buffer.withUnsafeMutableBytes { try receive(into: $0, deadline: true) }
            guard n > 0 else { throw ClientError.transport(url.absoluteString, URLError(.networkConnectionLost)) }
            bytes += buffer[0..<n]
        }
    }

    private func malformed(_ failure: HTTPResponseParser.Failure) -> ClientError {
        if failure.tooLarge { return ClientError(.tooLarge, "the response from \(url.absoluteString) is too large: \(failure.description)") }
        return ClientError(.transport, "cannot reach \(url.absoluteString): malformed response: \(failure.description)")
    }

    /// Parses a head as ``readHead()`` does (for tests of the rules).
    static func parseHead(_ bytes: ArraySlice<UInt8>, url: URL) throws -> HTTPTransport.Response {
        do {
            let head = try HTTPResponseParser.parseHead(bytes)
            return HTTPTransport.Response(status: head.status, headers: head.headers, body: [])
        } catch {
            throw ClientError(.transport, "cannot reach \(url.absoluteString): malformed response: \(error.description)")
        }
    }

    /// Reads the next bytes of a body framed by Content-Length (the caller counts them) into
    /// `buffer`: what came with the head first, then the socket; 0 when the server closed.
    public func readBodyBytes(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        let pending = leftover.withLock { value -> [UInt8] in
            let take = min(value.count, buffer.count)
            defer { value.removeFirst(take) }
            return Array(value[0..<take])
        }
        if !pending.isEmpty {
            pending.withUnsafeBytes { buffer.copyMemory(from: $0) }
            return pending.count
        }
        return try receive(into: buffer, deadline: false)
    }

    /// Reads the body into `sink`: by Content-Length, chunked, or until the server closes, as
    /// ``HTTPResponseParser/framing(status:headers:method:)`` decides (a conflicting or malformed
    /// length is an error, never a read to the close). Stops with an error past `limit` bytes,
    /// when the body ends before its declared length, and when it trickles: a body held in memory
    /// must arrive before the response deadline, a streamed one at ``TransportOptions/minimumRate``.
    public func readBody(_ head: HTTPTransport.Response, method: String = "GET", limit: Int64 = .max, streamed: Bool = false, sink: (UnsafeRawBufferPointer) throws -> Void) throws {
        let framing: HTTPResponseParser.Framing
        do {
            framing = try HTTPResponseParser.framing(status: head.status, headers: head.headers, method: method)
        } catch {
            throw malformed(error)
        }
        let useDeadline = !streamed
        switch framing {
        case .none: return
        case .chunked:
            var decoder = HTTPResponseParser.ChunkedDecoder(limit: limit)
            var pending = leftover.withLock { value -> [UInt8] in defer { value = [] }; return value }
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            while true {
                if !pending.isEmpty {
                    let used: Int
                    do {
                        used = try pending.withUnsafeBytes { try decoder.decode($0, sink: sink) }
                    } catch let failure as HTTPResponseParser.Failure {
                        throw malformed(failure)
                    }
                    pending.removeSubrange(..<used)
                }
                if decoder.isDone { return }
                let n = try buffer.withUnsafeMutableBytes { try receive(into: $0, deadline: useDeadline) }
                guard n > 0 else { throw ClientError.transport(url.absoluteString, URLError(.networkConnectionLost)) }
                pending = Array(buffer[0..<n])
            }
        case .length(let declared):
            if declared > limit { throw ClientError.tooLarge(url.absoluteString, limit) }
            try readBody(length: declared, limit: limit, deadline: useDeadline, sink: sink)
        case .untilClose:
            try readBody(length: nil, limit: limit, deadline: useDeadline, sink: sink)
        }
    }

    private func readBody(length declared: Int64?, limit: Int64, deadline: Bool, sink: (UnsafeRawBufferPointer) throws -> Void) throws {
        var remaining = declared ?? .max
        var received: Int64 = 0
        let pending = leftover.withLock { value -> [UInt8] in defer { value = [] }; return value }
        if !pending.isEmpty {
            let take = Int(min(Int64(pending.count), remaining))
            if Int64(take) > limit { throw ClientError.tooLarge(url.absoluteString, limit) }
            try pending.withUnsafeBytes { try sink(UnsafeRawBufferPointer(rebasing: $0[0..<take])) }
            remaining -= Int64(take)
            received += Int64(take)
        }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while remaining > 0 {
            let n = try buffer.withUnsafeMutableBytes { buffer in
                let room = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<Int(min(Int64(buffer.count), remaining))])
                return try declared == nil ? receive(into: room, deadline: deadline) : receiveFilling(room, deadline: deadline)
            }
            if n == 0 {
                if declared == nil { return }
                throw ClientError.transport(url.absoluteString, URLError(.networkConnectionLost))
            }
            received += Int64(n)
            if received > limit { throw ClientError.tooLarge(url.absoluteString, limit) }
            try buffer.withUnsafeBytes { try sink(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            remaining -= Int64(n)
        }
    }
}
#endif
