// TLS for the client's own HTTP engine on Linux, through OpenSSL's libssl: part of the OpenSSL
// backend, so COpenSSL stays in this folder. Apple platforms use URLSession (and the system's TLS).
#if !canImport(CryptoKit) && !DEPOT_CRYPTOKIT
internal import COpenSSL
import Foundation

/// Why a TLS session failed: the handshake (an untrusted or mismatched certificate), or the
/// connection under it.
public struct TLSError: Error, Sendable, CustomStringConvertible {
    public let description: String

    public init(description: String) { self.description = description }
}

/// What a client trusts: the system's certificate store, or the CAs of one PEM file (a private
/// CA, the tests'). Owns one `SSL_CTX`, shared by every session made from it.
public final class TLSClientContext: @unchecked Sendable {
    // @unchecked: owns an SSL_CTX, which OpenSSL lets sessions on several threads share once set up.
    private let context: OpaquePointer

    /// `caFile` nil: the system's store (`SSL_CTX_set_default_verify_paths`).
    public init(caFile: String? = nil) throws(TLSError) {
        guard let context = SSL_CTX_new(TLS_client_method()) else { throw TLSClientContext.error("SSL_CTX_new") }
        self.context = context
        _ = COpenSSL_CTX_set_min_proto_version(context, TLS1_2_VERSION)
        // A peer that closes without close_notify reads as the end of the stream: HTTP's own
        // framing (Content-Length, chunked) tells a complete body from a cut one.
        SSL_CTX_set_options(context, UInt64(1) << 7 /* SSL_OP_IGNORE_UNEXPECTED_EOF */)
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        if let caFile {
            guard SSL_CTX_load_verify_locations(context, caFile, nil) == 1 else {
                throw TLSError(description: "cannot load the CA file \(caFile): \(Self.lastError())")
            }
        } else {
            guard SSL_CTX_set_default_verify_paths(context) == 1 else { throw Self.error("SSL_CTX_set_default_verify_paths") }
        }
    }

    deinit { SSL_CTX_free(context) }

    /// A session over the connected socket `fd` to `host` (its name is checked against the
    /// certificate and sent as SNI); the handshake is done when this returns.
    public func connect(socket fd: Int32, host: String) throws(TLSError) -> TLSSession {
        try TLSSession(context: context, socket: fd, host: host)
    }

    static func lastError() -> String {
        let code = ERR_get_error()
        guard code != 0 else { return "unknown error" }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        ERR_clear_error()
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func error(_ call: String) -> TLSError { TLSError(description: "\(call): \(lastError())") }
}

/// One TLS client session over a blocking socket (whose timeouts still apply). Owns its `SSL`;
/// the socket stays the caller's. Used by one thread at a time.
public final class TLSSession: @unchecked Sendable {
    // @unchecked: owns an SSL object, used by the one thread running the exchange.
    private let ssl: OpaquePointer

    fileprivate init(context: OpaquePointer, socket fd: Int32, host: String) throws(TLSError) {
        guard let ssl = SSL_new(context) else { throw TLSClientContext.error("SSL_new") }
        self.ssl = ssl
        SSL_set_fd(ssl, fd)
        // The identity is always checked, or the session fails: an IP literal (dotted quad or
        // IPv6, as inet_pton reads them) against the certificate's IP addresses, anything else as
        // a DNS name. Forms a resolver takes as addresses but inet_pton does not (`10.1`,
        // `2130706433`) go to the name check, which no real certificate passes; a scoped IPv6
        // address (`fe80::1%eth0`) cannot be checked and is refused.
        switch TLSSession.kind(of: host) {
        case .address:
            guard X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1 else {
                throw TLSError(description: "cannot check the certificate for address \(host)")
            }
        case .name:
            guard COpenSSL_set_tlsext_host_name(ssl, host) == 1, SSL_set1_host(ssl, host) == 1 else {
                throw TLSError(description: "cannot check the certificate for host \(host)")
            }
        case .unusable:
            throw TLSError(description: "cannot check a certificate for \(host): not a host name or an IP address whose identity TLS can verify")
        }
        ERR_clear_error()
        guard SSL_connect(ssl) == 1 else {
            let verify = SSL_get_verify_result(ssl)
            if verify != X509_V_OK {
                throw TLSError(description: "the server's certificate is not trusted: \(String(cString: X509_verify_cert_error_string(verify)))")
            }
            throw TLSError(description: "TLS handshake with \(host) failed: \(TLSClientContext.lastError())")
        }
    }

    deinit { SSL_free(ssl) }

    enum HostKind: Equatable { case address, name, unusable }

    /// How a host's identity is checked: an IP literal as inet_pton reads it, or a DNS name
    /// (letters, digits, `-`, `.`, `_`, `*`-free); anything else (a scope, a space, NUL) cannot be.
    static func kind(of host: String) -> HostKind {
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1 { return .address }
        let utf8 = host.utf8
        guard !utf8.isEmpty, utf8.count <= 253, utf8.allSatisfy({ (48...57).contains($0) || (65...90).contains($0) || (97...122).contains($0) || $0 == 45 || $0 == 46 || $0 == 95 }) else {
            return .unusable
        }
        return .name
    }

    /// Reads up to `buffer.count` bytes: the count, 0 at the end of the stream, -1 with `errno`
    /// set (a timeout is EAGAIN) or a ``TLSError`` for a protocol failure.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(TLSError) -> Int {
        ERR_clear_error()
        let n = SSL_read(ssl, buffer.baseAddress, Int32(min(buffer.count, Int(Int32.max))))
        if n > 0 { return Int(n) }
        switch SSL_get_error(ssl, n) {
        case SSL_ERROR_ZERO_RETURN: return 0
        case SSL_ERROR_SYSCALL: return System.errno == 0 ? 0 : -1
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE: return -1
        default: throw TLSClientContext.error("SSL_read")
        }
    }

    /// Writes all of `bytes`: true, or false with `errno` set (a timeout, a closed connection).
    public func write(_ bytes: UnsafeRawBufferPointer) throws(TLSError) -> Bool {
        var offset = 0
        while offset < bytes.count {
            ERR_clear_error()
            let n = SSL_write(ssl, bytes.baseAddress! + offset, Int32(min(bytes.count - offset, 1 << 20)))
            if n > 0 {
                offset += Int(n)
                continue
            }
            switch SSL_get_error(ssl, n) {
            case SSL_ERROR_SYSCALL, SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE: return false
            default: throw TLSClientContext.error("SSL_write")
            }
        }
        return true
    }
}
#endif
