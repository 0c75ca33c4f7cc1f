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
    var started = false
    var pending: HTTPResponse?
    var receiver: (any HTTPBodyReceiver)?
    var finished = false

    init(rawTarget: String) { self.rawTarget = rawTarget }
}

let uriLogCallback: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>?, OpaquePointer?) -> UnsafeMutableRawPointer? = {
    _, uri, _ in
    let raw = uri.map { String(cString: $0) } ?? ""
    return Unmanaged.passRetained(RequestState(rawTarget: raw)).toOpaque()
}

let requestCompletedCallback: @convention(c) (
    UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?, MHD_RequestTerminationCode
) -> Void = { _, _, reqCls, _ in
    guard let reqCls, let pointer = reqCls.pointee else { return }
    reqCls.pointee = nil
    let state = Unmanaged<RequestState>.fromOpaque(pointer).takeRetainedValue()
    if !state.finished, let receiver = state.receiver {
        state.finished = true
        receiver.abort()
    }
}

let accessHandlerCallback: @convention(c) (
    UnsafeMutableRawPointer?, OpaquePointer?, UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafePointer<CChar>?,
    UnsafePointer<CChar>?, UnsafeMutablePointer<Int>?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result = { cls, connection, _, method, _, uploadData, uploadDataSize, reqCls in
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
        let request = HTTPRequestReader.read(
            connection: connection, method: method.map { String(cString: $0) } ?? "", rawTarget: state.rawTarget
        )
        let disposition: HTTPDisposition
        switch request {
        case .failure(let response): disposition = .respond(response)
        case .success(let request):
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
            return queue(response, on: connection)
        case .receiveBody(let receiver):
            state.receiver = receiver
            return .YES
        }
    }

    if uploadDataSize.pointee > 0 {
        let count = uploadDataSize.pointee
        uploadDataSize.pointee = 0
        guard let receiver = state.receiver, !state.finished else { return .YES }
        if let early = receiver.receive(UnsafeRawBufferPointer(start: uploadData, count: count)) {
            state.finished = true
            receiver.abort()
            var response = early
            response.closeConnection = true
            return queue(response, on: connection)
        }
        return .YES
    }

    if let response = state.pending {
        state.pending = nil
        state.finished = true
        return queue(response, on: connection)
    }
    if let receiver = state.receiver, !state.finished {
        state.finished = true
        return queue(receiver.finish(), on: connection)
    }
    return .YES
}

/// Hands a response to libmicrohttpd. The response's file descriptor, if any, passes to MHD.
private func queue(_ response: HTTPResponse, on connection: OpaquePointer) -> MHD_Result {
    let mhdResponse: OpaquePointer?
    switch response.body {
    case .empty:
        mhdResponse = MHD_create_response_from_buffer(0, nil, .RESPMEM_PERSISTENT)
    case .bytes(let bytes):
        mhdResponse = bytes.withUnsafeBytes {
            MHD_create_response_from_buffer($0.count, UnsafeMutableRawPointer(mutating: $0.baseAddress), .RESPMEM_MUST_COPY)
        }
    case .file(let region):
        let fd = region.take()
        // On success the response owns fd and closes it; on failure it is still ours.
        mhdResponse = MHD_create_response_from_fd_at_offset64(UInt64(region.length), fd, UInt64(region.offset))
        if mhdResponse == nil { close(fd) }
    }
    guard let mhdResponse else { return .NO }
    defer { MHD_destroy_response(mhdResponse) }
    for (name, value) in response.headers {
        _ = MHD_add_response_header(mhdResponse, name, value)
    }
    if response.closeConnection {
        _ = MHD_add_response_header(mhdResponse, "Connection", "close")
    }
    return MHD_queue_response(connection, UInt32(response.status), mhdResponse)
}
