internal import CMicroHTTPD
#if canImport(Glibc)
import Glibc
#endif

// libmicrohttpd's callbacks: capture-free, nonisolated `let` closures, so that running them on
// MHD's threads never trips an actor isolation check. The server travels as `cls`; each
// request's state travels in `*req_cls`, created by the URI log callback (which sees the raw
// target) and released by the completion callback.

/// One request's state; only the thread serving its connection touches it.
final class RequestState {
    let rawTarget: String
    let start = ContinuousClock.now
    var started = false
    var pending: HTTPResponse?
    var receiver: (any HTTPBodyReceiver)?
    var finished = false
    /// A refusal made in the middle of a body, sent once the rest of the body has been read
    /// (and thrown away): queued at once, libmicrohttpd 0.9.75 closes with the client's bytes
    /// unread, and the reset loses the answer on its way.
    var refusal: HTTPResponse?
    var discarded: Int64 = 0
    /// TCP_CORK is set on the connection until this response is complete.
    var corked = false
    // What the exchange record reports.
    var method = ""
    var clientAddress: String?
    var status = 0
    var bodyBytes: Int64 = 0
    var route = "other"

    init(rawTarget: String) {
        self.rawTarget = rawTarget
    }

    /// The path as received (escapes kept), at most 512 bytes, and the query (at most 256):
    /// what the exchange record reports. Made once, when the request completes.
    var reportedPathAndQuery: (path: String, query: String) {
        var raw = rawTarget
        return raw.withUTF8 { bytes in
            var end = 0
            while end < bytes.count && bytes[end] != UInt8(ascii: "?") { end += 1 }
            let path = String(decoding: UnsafeBufferPointer(rebasing: bytes[..<min(end, 512)]), as: UTF8.self)
            guard end + 1 < bytes.count else { return (path, "") }
            return (path, String(decoding: UnsafeBufferPointer(rebasing: bytes[(end + 1)..<min(bytes.count, end + 257)]), as: UTF8.self))
        }
    }

    func record(_ response: HTTPResponse) {
        status = response.status
        route = response.route
        bodyBytes = method == "HEAD" || response.status == 304 || response.status == 204 ? 0 : response.bodyLength
    }
}

let uriLogCallback: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>?, OpaquePointer?) -> UnsafeMutableRawPointer? = {
    cls, uri, _ in
    if let cls { Unmanaged<ServerContext>.fromOpaque(cls).takeUnretainedValue().inFlight.add(1, ordering: .relaxed) }
    let raw = uri.map { String(cString: $0) } ?? ""
    return Unmanaged.passRetained(RequestState(rawTarget: raw)).toOpaque()
}

let requestCompletedCallback: @convention(c) (
    UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?, MHD_RequestTerminationCode
) -> Void = { cls, connection, reqCls, termination in
    // A peer that half-closed after its request gets its connection closed now, not at the timeout.
    guard let cls, let reqCls, let pointer = reqCls.pointee else {
        if termination == .REQUEST_TERMINATED_COMPLETED_OK, let connection { _ = CMicroHTTPD_close_if_peer_finished(connection) }
        return
    }
    reqCls.pointee = nil
    let context = Unmanaged<ServerContext>.fromOpaque(cls).takeUnretainedValue()
    let state = Unmanaged<RequestState>.fromOpaque(pointer).takeRetainedValue()
    if let connection {
        // The whole response is with the kernel: what the cork held goes now.
        if state.corked { CMicroHTTPD_cork(connection, 0) }
        // Turbo mode's read after a response sees a FIN only if it has already arrived: peek in both modes.
        if termination == .REQUEST_TERMINATED_COMPLETED_OK { _ = CMicroHTTPD_close_if_peer_finished(connection) }
    }
    if !state.finished, let receiver = state.receiver {
        state.finished = true
        receiver.abort()
    }
    if state.started {
        let target = state.reportedPathAndQuery
        context.handler.completed(HTTPExchangeRecord(
            method: state.method, path: target.path, status: state.status, bodyBytes: state.bodyBytes,
            duration: ContinuousClock.now - state.start, route: state.route, clientAddress: state.clientAddress,
            completedNormally: termination == .REQUEST_TERMINATED_COMPLETED_OK, query: target.query
        ))
    }
    context.inFlight.subtract(1, ordering: .relaxed)
}

let accessHandlerCallback: @convention(c) (
    UnsafeMutableRawPointer?, OpaquePointer?, UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafePointer<CChar>?,
    UnsafePointer<CChar>?, UnsafeMutablePointer<Int>?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result = { cls, connection, _, method, version, uploadData, uploadDataSize, reqCls in
    guard let cls, let connection, let reqCls, let uploadDataSize else { return .NO }
    let state: RequestState
    if let pointer = reqCls.pointee {
        state = Unmanaged<RequestState>.fromOpaque(pointer).takeUnretainedValue()
    } else {
        // No URI log call happened (should not occur); keep a state so completion can release it.
        state = RequestState(rawTarget: "")
        reqCls.pointee = Unmanaged.passRetained(state).toOpaque()
    }
    let context = Unmanaged<ServerContext>.fromOpaque(cls).takeUnretainedValue()

    if !state.started {
        state.started = true
        state.method = knownText(method, methods)
        let request = HTTPRequestReader.read(
            connection: connection, method: state.method, version: knownText(version, versions), rawTarget: state.rawTarget, trustedProxies: context.trustedProxies
        )
        let disposition: HTTPDisposition
        switch request {
        case .failure(let response): disposition = .respond(response)
        case .success(let request):
            state.clientAddress = request.clientAddress
            disposition = context.handler.handle(request)
            if case .respond(let response) = disposition, !request.hasBody {
                // Answer on the next call: queuing in the headers-only call makes 0.9.75 close keep-alive.
                state.pending = response
                return .YES
            }
        }
        switch disposition {
        case .respond(var response):
            // A body was announced but will not be read: close so its bytes are never parsed as a request.
            response.closeConnection = true
            state.finished = true
            return queue(response, for: state, on: connection)
        case .receiveBody(let receiver):
            state.receiver = receiver
            return .YES
        }
    }

    if uploadDataSize.pointee > 0 {
        let count = uploadDataSize.pointee
        uploadDataSize.pointee = 0
        if var refusal = state.refusal {
            // Past the drain limit, answer now and close: the client may not read it.
            state.discarded += Int64(count)
            guard state.discarded > refusalDrainLimit else { return .YES }
            state.refusal = nil
            refusal.closeConnection = true
            return queue(refusal, for: state, on: connection)
        }
        guard let receiver = state.receiver, !state.finished else { return .YES }
        if let early = receiver.receive(UnsafeRawBufferPointer(start: uploadData, count: count)) {
            state.finished = true
            receiver.abort()
            state.refusal = early
            return .YES
        }
        return .YES
    }

    if let refusal = state.refusal {
        // The body is over: the refusal goes out on a connection that stays usable.
        state.refusal = nil
        return queue(refusal, for: state, on: connection)
    }

    if let response = state.pending {
        state.pending = nil
        state.finished = true
        return queue(response, for: state, on: connection)
    }
    if let receiver = state.receiver, !state.finished {
        state.finished = true
        return queue(receiver.finish(trailers: HTTPRequestReader.trailers(connection)), for: state, on: connection)
    }
    return .YES
}

/// The methods and versions of nearly every request, as literals: comparing a few bytes costs
/// less than `String(cString:)` (length, validation, copy) on every request.
private let methods: [(StaticString, String)] = [("GET", "GET"), ("HEAD", "HEAD"), ("PUT", "PUT"), ("POST", "POST"), ("PATCH", "PATCH")]
private let versions: [(StaticString, String)] = [("HTTP/1.1", "HTTP/1.1"), ("HTTP/1.0", "HTTP/1.0")]

/// `text` as a string: one of `known` when it is one of them, else a copy.
private func knownText(_ text: UnsafePointer<CChar>?, _ known: [(StaticString, String)]) -> String {
    guard let text else { return "" }
    for (c, string) in known where strcmp(text, UnsafeRawPointer(c.utf8Start).assumingMemoryBound(to: CChar.self)) == 0 { return string }
    return String(cString: text)
}

/// Releases the reference a response held on its ``SharedBytes``.
let releaseSharedBytes: @convention(c) (UnsafeMutableRawPointer?) -> Void = { owner in
    if let owner { Unmanaged<SharedBytes>.fromOpaque(owner).release() }
}

/// A streamed body's source, as libmicrohttpd's callbacks hold it.
final class StreamedBody {
    let source: any HTTPBodySource
    init(_ source: any HTTPBodySource) { self.source = source }
}

/// libmicrohttpd asks for the next bytes of a streamed body: -1 (end of stream) past its end,
/// -2 (abort, the connection closes) when the source fails or ends early.
let readStreamedBody: @convention(c) (UnsafeMutableRawPointer?, UInt64, UnsafeMutablePointer<CChar>?, Int) -> Int = { owner, position, buffer, max in
    guard let owner, let buffer, max > 0 else { return -2 }
    let body = Unmanaged<StreamedBody>.fromOpaque(owner).takeUnretainedValue()
    do {
        let n = try body.source.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: max), at: Int64(position))
        return n > 0 ? n : -2
    } catch {
        return -2
    }
}

let freeStreamedBody: @convention(c) (UnsafeMutableRawPointer?) -> Void = { owner in
    guard let owner else { return }
    let body = Unmanaged<StreamedBody>.fromOpaque(owner).takeRetainedValue()
    body.source.close()
}

/// How much of a refused body is read and thrown away so that the refusal reaches the client;
/// past it the answer goes at once and the connection closes.
let refusalDrainLimit: Int64 = 256 << 20

/// The fields every answer carries (issue 50): `X-Content-Type-Options: nosniff`, so that no
/// browser runs bytes served as `application/octet-stream` (a blob a publisher stored) as a
/// script or a style sheet, and — unless the answer sets its own policy (the dashboard's files
/// do) — `Content-Security-Policy: default-src 'none'; sandbox`, under which nothing an answer
/// holds runs or loads anything even when opened as a page on the origin. C string literals:
/// nothing is allocated. False if libmicrohttpd refused a field (the answer is then not sent).
func addBaselineHeaders(_ response: OpaquePointer, ownPolicy: Bool) -> Bool {
    guard MHD_add_response_header(response, "X-Content-Type-Options", "nosniff") == .YES else { return false }
    return ownPolicy || MHD_add_response_header(response, "Content-Security-Policy", "default-src 'none'; sandbox") == .YES
}

/// Hands a response to libmicrohttpd. The response's file descriptor, if any, passes to MHD.
private func queue(_ response: HTTPResponse, for state: RequestState, on connection: OpaquePointer) -> MHD_Result {
    state.record(response)
    var response = response
    if response.body.isFile && state.method != "HEAD" {
        // Header and body leave together (uncorked when the request completes).
        CMicroHTTPD_cork(connection, 1)
        state.corked = true
    }
    if case .prepared(let prepared) = response.body {
        if response.headers.fields.isEmpty && !response.closeConnection { return prepared.queue(on: connection, status: response.status) }
        // More headers, or a closing connection, for this request: a response of its own.
        guard let body = prepared.fresh() else { return .NO }
        response.headers = HTTPHeaders(prepared.headers.fields + response.headers.fields)
        response.body = body
    }
    let mhdResponse: OpaquePointer?
    switch response.body {
    case .empty:
        mhdResponse = MHD_create_response_from_buffer(0, nil, .RESPMEM_PERSISTENT)
    case .bytes(let bytes):
        mhdResponse = bytes.withUnsafeBytes {
            MHD_create_response_from_buffer($0.count, UnsafeMutableRawPointer(mutating: $0.baseAddress), .RESPMEM_MUST_COPY)
        }
    case .shared(let shared, let offset, let length):
        // libmicrohttpd sends from the shared memory; the reference goes with the response and
        // is released by the callback when libmicrohttpd frees it.
        let owner = Unmanaged.passRetained(shared).toOpaque()
        mhdResponse = MHD_create_response_from_buffer_with_free_callback_cls(
            length, shared.storage.baseAddress! + offset, releaseSharedBytes, owner
        )
        if mhdResponse == nil { Unmanaged<SharedBytes>.fromOpaque(owner).release() }
    case .file(let region):
        let fd = region.take()
        // On success the response owns fd and closes it; on failure it is still ours.
        mhdResponse = MHD_create_response_from_fd_at_offset64(UInt64(region.length), fd, UInt64(region.offset))
        if mhdResponse == nil { close(fd) }
    case .stream(let source, let length):
        // The source goes with the response and is closed and released when MHD frees it.
        let owner = Unmanaged.passRetained(StreamedBody(source)).toOpaque()
        mhdResponse = MHD_create_response_from_callback(UInt64(length), 256 << 10, readStreamedBody, owner, freeStreamedBody)
        if mhdResponse == nil { freeStreamedBody(owner) }
    case .prepared:
        preconditionFailure("a prepared body was replaced above")
    }
    guard let mhdResponse else { return .NO }
    defer { MHD_destroy_response(mhdResponse) }
    for (name, value) in response.headers {
        // withCString: a short (inline) Swift string passed as a pointer would be copied to the heap.
        _ = name.withCString { name in value.withCString { value in MHD_add_response_header(mhdResponse, name, value) } }
    }
    guard addBaselineHeaders(mhdResponse, ownPolicy: response.headers["Content-Security-Policy"] != nil) else { return .NO }
    if response.closeConnection {
        _ = MHD_add_response_header(mhdResponse, "Connection", "close")
    }
    return MHD_queue_response(connection, UInt32(response.status), mhdResponse)
}
