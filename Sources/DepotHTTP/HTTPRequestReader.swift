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

    static func read(connection: OpaquePointer, method: String, version: String, rawTarget: String, trustedProxies: TrustedProxies = .none) -> Outcome {
        let target: RequestTarget
        do {
            target = try RequestTarget.parse(rawTarget)
        } catch {
            if error == .tooLong {
                return .failure(.error(status: 414, code: "uri_too_long", message: "the request target is longer than \(RequestTarget.maximumLength) bytes", closeConnection: true))
            }
            return .failure(.error(status: 400, code: "bad_request_target", message: "the request target is not acceptable (\(error))", closeConnection: true))
        }
        let headers = fields(connection, .HEADER_KIND)
        // One pass over the fields: framing that libmicrohttpd 0.9.75 accepts but that lets a
        // second request hide in a body, the Host rule, malformed names.
        var lengths = 0, codings = 0, hosts = 0
        var length: String?, coding: String?
        for field in headers {
            let name = field.name
            if name.isEmpty || name.utf8.contains(where: { $0 == 0x20 || $0 == 0x09 }) {
                return .failure(.error(status: 400, code: "bad_header", message: "malformed header field name", closeConnection: true))
            }
            if name.caseInsensitiveEquals("Host") {
                hosts += 1
            } else if name.caseInsensitiveEquals("Content-Length") {
                lengths += 1
                length = field.value
            } else if name.caseInsensitiveEquals("Transfer-Encoding") {
                codings += 1
                coding = field.value
            }
        }
        if lengths > 1 {
            return .failure(.error(status: 400, code: "bad_framing", message: "more than one Content-Length", closeConnection: true))
        }
        if let length, Int64(length) == nil || length.hasPrefix("+") || length.hasPrefix("-") {
            return .failure(.error(status: 400, code: "bad_framing", message: "Content-Length is not a number", closeConnection: true))
        }
        if let coding {
            if lengths > 0 {
                return .failure(.error(status: 400, code: "bad_framing", message: "Content-Length together with Transfer-Encoding", closeConnection: true))
            }
            if codings > 1 || coding.lowercased() != "chunked" {
                return .failure(.error(status: 400, code: "bad_framing", message: "only the chunked transfer coding is accepted", closeConnection: true))
            }
        }
        // RFC 9112 §3.2: an HTTP/1.1 request without exactly one Host gets 400.
        if hosts > 1 || (version == "HTTP/1.1" && hosts == 0) {
            return .failure(.error(status: 400, code: "bad_host", message: "an HTTP/1.1 request needs exactly one Host header", closeConnection: true))
        }
        let peer = clientAddress(connection)
        var client = peer
        // Only a trusted proxy's peers cost a look at X-Forwarded-For (behind an edge: all of them).
        if !trustedProxies.isEmpty, let address = peerAddress(connection), trustedProxies.contains(address) {
            let forwarded = headers.values("X-Forwarded-For")
            if !forwarded.isEmpty { client = trustedProxies.client(peer: address, forwardedFor: forwarded).description }
        }
        let request = HTTPRequest(
            method: method, rawTarget: rawTarget, pathSegments: target.segments,
            query: target.query.map { ($0.name, $0.value) }, headers: headers,
            clientAddress: client, peerAddress: peer
        )
        return .success(request)
    }

    /// The peer's address, as ``TrustedProxies`` compares it.
    private static func peerAddress(_ connection: OpaquePointer) -> IPAddress? {
        guard let address = CMicroHTTPD_client_address(connection) else { return nil }
        switch Int32(address.pointee.sa_family) {
        case AF_INET: return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { IPAddress(v4: $0.pointee.sin_addr.s_addr) }
        case AF_INET6:
            return address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                withUnsafeBytes(of: v6.pointee.sin6_addr) { IPAddress(v6: $0) }
            }
        default: return nil
        }
    }

    /// The trailer fields of a chunked body (libmicrohttpd's footers), once the body is complete.
    static func trailers(_ connection: OpaquePointer) -> HTTPHeaders { fields(connection, .FOOTER_KIND) }

    /// The fields of one kind (headers, footers) libmicrohttpd holds for the request.
    private static func fields(_ connection: OpaquePointer, _ kind: MHD_ValueKind) -> HTTPHeaders {
        var collector = HeaderCollector()
        collector.fields.reserveCapacity(16)
        _ = withUnsafeMutablePointer(to: &collector) { pointer in
            MHD_get_connection_values(connection, kind, headerIteratorCallback, pointer)
        }
        return HTTPHeaders(collector.fields)
    }

    private static func clientAddress(_ connection: OpaquePointer) -> String? {
        guard let address = CMicroHTTPD_client_address(connection) else { return nil }
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            // Dotted quad written in place (inet_ntop and its buffer cost more, on every request).
            let octets = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt32(bigEndian: $0.pointee.sin_addr.s_addr) }
            return String(unsafeUninitializedCapacity: 15) { text in
                var count = 0
                for shift in stride(from: 24, through: 0, by: -8) {
                    let octet = Int(octets >> UInt32(shift) & 0xff)
                    if shift != 24 { text[count] = UInt8(ascii: "."); count += 1 }
                    if octet >= 100 { text[count] = UInt8(48 + octet / 100); count += 1 }
                    if octet >= 10 { text[count] = UInt8(48 + octet / 10 % 10); count += 1 }
                    text[count] = UInt8(48 + octet % 10)
                    count += 1
                }
                return count
            }
        case AF_INET6:
            var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
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
