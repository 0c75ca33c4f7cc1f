internal import CMicroHTTPD
#if canImport(Glibc)
import Glibc
#endif

/// Builds an ``HTTPRequest`` from libmicrohttpd's view of a connection, refusing what it
/// would otherwise let through ambiguously.
enum HTTPRequestReader {
    enum Outcome {
        case success(HTTPRequest)
        case failure(HTTPResponse)
    }

    static func read(connection: OpaquePointer, method: String, version: String, rawTarget: String) -> Outcome {
        let target: RequestTarget
        do {
            target = try RequestTarget.parse(rawTarget)
        } catch {
            if error == .tooLong {
                return .failure(.error(status: 414, code: "uri_too_long", message: "the request target is longer than \(RequestTarget.maximumLength) bytes", closeConnection: true))
            }
            return .failure(.error(status: 400, code: "bad_request_target", message: "the request target is not acceptable (\(error))", closeConnection: true))
        }
        var collector = HeaderCollector()
        _ = withUnsafeMutablePointer(to: &collector) { pointer in
            MHD_get_connection_values(connection, MHD_ValueKind.HEADER_KIND, headerIteratorCallback, pointer)
        }
        let headers = HTTPHeaders(collector.fields)
        // Framing that libmicrohttpd 0.9.75 accepts but that lets a second request hide in a body.
        let lengths = headers.values("Content-Length")
        let codings = headers.values("Transfer-Encoding")
        if lengths.count > 1 {
            return .failure(.error(status: 400, code: "bad_framing", message: "more than one Content-Length", closeConnection: true))
        }
        if let length = lengths.first, Int64(length) == nil || length.hasPrefix("+") || length.hasPrefix("-") {
            return .failure(.error(status: 400, code: "bad_framing", message: "Content-Length is not a number", closeConnection: true))
        }
        if !codings.isEmpty {
            if !lengths.isEmpty {
                return .failure(.error(status: 400, code: "bad_framing", message: "Content-Length together with Transfer-Encoding", closeConnection: true))
            }
            if codings.count > 1 || codings[0].lowercased() != "chunked" {
                return .failure(.error(status: 400, code: "bad_framing", message: "only the chunked transfer coding is accepted", closeConnection: true))
            }
        }
        // RFC 9112 §3.2: an HTTP/1.1 request without exactly one Host gets 400.
        let hosts = headers.values("Host")
        if hosts.count > 1 || (version == "HTTP/1.1" && hosts.isEmpty) {
            return .failure(.error(status: 400, code: "bad_host", message: "an HTTP/1.1 request needs exactly one Host header", closeConnection: true))
        }
        for field in headers where field.name.utf8.contains(where: { $0 == 0x20 || $0 == 0x09 }) || field.name.isEmpty {
            return .failure(.error(status: 400, code: "bad_header", message: "malformed header field name", closeConnection: true))
        }
        let request = HTTPRequest(
            method: method, rawTarget: rawTarget, pathSegments: target.segments,
            query: target.query.map { ($0.name, $0.value) }, headers: headers,
            clientAddress: clientAddress(connection)
        )
        return .success(request)
    }

    private static func clientAddress(_ connection: OpaquePointer) -> String? {
        guard let address = CMicroHTTPD_client_address(connection) else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            let ok = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                withUnsafePointer(to: v4.pointee.sin_addr) { inet_ntop(AF_INET, $0, &buffer, socklen_t(buffer.count)) }
            }
            return ok == nil ? nil : buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        case AF_INET6:
            let ok = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                withUnsafePointer(to: v6.pointee.sin6_addr) { inet_ntop(AF_INET6, $0, &buffer, socklen_t(buffer.count)) }
            }
            return ok == nil ? nil : buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        default:
            return nil
        }
    }
}

struct HeaderCollector {
    var fields: [(name: String, value: String)] = []
}

let headerIteratorCallback: @convention(c) (UnsafeMutableRawPointer?, MHD_ValueKind, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> MHD_Result = {
    cls, _, key, value in
    guard let cls, let key else { return .YES }
    let collector = cls.assumingMemoryBound(to: HeaderCollector.self)
    collector.pointee.fields.append((String(cString: key), value.map { String(cString: $0) } ?? ""))
    return .YES
}
