// X.509 and ECDSA for App Attest (Apple's "Validating apps that connect to your server"): a DER
// chain checked against one anchor at a given instant, a certificate's extension by dotted OID,
// its P-256 key, and ECDSA-P256-SHA256 over a message. Part of the OpenSSL backend, so COpenSSL
// stays in this folder; the origin verifies attestations with it. Apple platforms have no use for it.
#if !canImport(CryptoKit) && !DEPOT_CRYPTOKIT
internal import COpenSSL
import Foundation

/// One DER certificate parsed by OpenSSL. Owns one `X509`.
public final class X509Certificate: @unchecked Sendable {
    // @unchecked: owns an X509 that is never mutated after parsing; OpenSSL's reads are thread-safe.
    fileprivate let certificate: OpaquePointer

    /// Parses `der`; the whole input must be one certificate (no trailing bytes).
    public init(der: [UInt8]) throws(CryptoError) {
        let (parsed, used): (OpaquePointer?, Int) = der.withUnsafeBufferPointer { buffer in
            guard let start = buffer.baseAddress else { return (nil, 0) }
            var cursor: UnsafePointer<UInt8>? = start
            let x = d2i_X509(nil, &cursor, buffer.count)
            return (x, cursor.map { $0 - start } ?? 0)
        }
        guard let parsed else {
            ERR_clear_error()
            throw .backend("reading a DER certificate")
        }
        certificate = parsed
        guard used == der.count else { throw .backend("reading a DER certificate (\(der.count - used) bytes after it)") }
    }

    deinit { X509_free(certificate) }

    /// The value (the OCTET STRING's content) of the extension named by a dotted OID, such as
    /// App Attest's nonce `1.2.840.113635.100.8.2`; nil when the certificate has none. An OID
    /// present twice is refused: which one a verifier reads would then be a choice.
    public func extensionValue(oid: String) throws(CryptoError) -> [UInt8]? {
        guard let object = OBJ_txt2obj(oid, 1) else {
            ERR_clear_error()
            throw .backend("reading the OID \(oid)")
        }
        defer { ASN1_OBJECT_free(object) }
        let index = X509_get_ext_by_OBJ(certificate, object, -1)
        guard index >= 0 else { return nil }
        guard X509_get_ext_by_OBJ(certificate, object, index) < 0 else { throw .backend("the extension \(oid) appears twice") }
        guard let ext = X509_get_ext(certificate, index), let data = X509_EXTENSION_get_data(ext) else {
            throw .openSSL("X509_EXTENSION_get_data")
        }
        let length = Int(ASN1_STRING_length(data))
        guard length > 0, let bytes = ASN1_STRING_get0_data(data) else { return [] }
        return Array(UnsafeBufferPointer(start: bytes, count: length))
    }

    /// The subject's public key as an uncompressed P-256 point (X9.63: 0x04 ‖ x ‖ y, 65 bytes).
    /// A key of any other type or curve is refused.
    public func p256PublicKey() throws(CryptoError) -> [UInt8] {
        guard let key = X509_get0_pubkey(certificate) else {
            ERR_clear_error()
            throw .backend("reading the certificate's public key")
        }
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_EC else { throw .backend("the certificate's key is not an EC key") }
        var group = [CChar](repeating: 0, count: 64)
        var groupLength = 0
        guard EVP_PKEY_get_utf8_string_param(key, "group", &group, group.count, &groupLength) == 1 else {
            ERR_clear_error()
            throw .openSSL("EVP_PKEY_get_utf8_string_param(group)")
        }
        let name = String(decoding: group.prefix(groupLength).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard name == "prime256v1" || name == "P-256" else { throw .backend("the certificate's key is on \(name), not P-256") }
        var point = [UInt8](repeating: 0, count: 65)
        var length = 0
        guard EVP_PKEY_get_octet_string_param(key, "encoded-pub-key", &point, point.count, &length) == 1 else {
            ERR_clear_error()
            throw .openSSL("EVP_PKEY_get_octet_string_param(encoded-pub-key)")
        }
        guard length == 65, point[0] == 0x04 else { throw .backend("the certificate's P-256 key is not an uncompressed point") }
        return point
    }

    /// The end of the certificate's validity (notAfter).
    public func notAfter() throws(CryptoError) -> Date {
        guard let time = X509_get0_notAfter(certificate) else { throw .openSSL("X509_get0_notAfter") }
        var parsed = tm()
        guard ASN1_TIME_to_tm(time, &parsed) == 1 else { throw .openSSL("ASN1_TIME_to_tm") }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&parsed)))
    }
}

/// A certificate chain checked against one trust anchor.
public enum X509Chain {
    /// Checks that `chain[0]` (the leaf) chains, through `chain[1...]` (never trusted by
    /// themselves), to `anchor` — the only trusted certificate — with every certificate valid
    /// at `instant`. Throws with OpenSSL's reason when it does not.
    public static func verify(_ chain: [[UInt8]], anchor: [UInt8], at instant: Date) throws(CryptoError) {
        guard let leafDER = chain.first else { throw .backend("verifying an empty certificate chain") }
        let root = try X509Certificate(der: anchor)
        let leaf = try X509Certificate(der: leafDER)
        var intermediates: [X509Certificate] = []
        for der in chain.dropFirst() { intermediates.append(try X509Certificate(der: der)) }

        guard let store = X509_STORE_new() else { throw .openSSL("X509_STORE_new") }
        defer { X509_STORE_free(store) }
        guard X509_STORE_add_cert(store, root.certificate) == 1 else { throw .openSSL("X509_STORE_add_cert") }
        // An OPENSSL_STACK of borrowed X509 pointers (the certificates above own them and outlive it).
        guard let untrusted = OPENSSL_sk_new_null() else { throw .openSSL("OPENSSL_sk_new_null") }
        defer { OPENSSL_sk_free(untrusted) }
        for certificate in intermediates {
            guard OPENSSL_sk_push(untrusted, UnsafeRawPointer(certificate.certificate)) > 0 else { throw .openSSL("OPENSSL_sk_push") }
        }
        guard let context = X509_STORE_CTX_new() else { throw .openSSL("X509_STORE_CTX_new") }
        defer { X509_STORE_CTX_free(context) }
        guard X509_STORE_CTX_init(context, store, leaf.certificate, untrusted) == 1 else { throw .openSSL("X509_STORE_CTX_init") }
        guard let parameters = X509_STORE_CTX_get0_param(context) else { throw .openSSL("X509_STORE_CTX_get0_param") }
        X509_VERIFY_PARAM_set_time(parameters, time_t(instant.timeIntervalSince1970.rounded(.down)))
        let verified = withExtendedLifetime((root, leaf, intermediates)) { X509_verify_cert(context) }
        guard verified == 1 else {
            let error = X509_STORE_CTX_get_error(context)
            let depth = X509_STORE_CTX_get_error_depth(context)
            ERR_clear_error()
            throw .backend("the chain check (at depth \(depth): \(String(cString: X509_verify_cert_error_string(Int(error)))))")
        }
    }
}

/// ECDSA on P-256 with SHA-256.
public enum P256Signature {
    /// Whether `signature` (DER `SEQUENCE { r, s }`) signs `message` (hashed here with SHA-256)
    /// under `publicKey` (X9.63 uncompressed, 65 bytes). A point off the curve never verifies.
    public static func isValid(_ signature: [UInt8], for message: [UInt8], publicKey: [UInt8]) -> Bool {
        guard publicKey.count == 65, publicKey[0] == 0x04, !signature.isEmpty, signature.count <= 80 else { return false }
        guard let key = COpenSSL_p256_public_key(publicKey, publicKey.count) else {
            ERR_clear_error()
            return false
        }
        defer { EVP_PKEY_free(key) }
        guard let check = EVP_PKEY_CTX_new_from_pkey(nil, key, nil) else { return false }
        defer { EVP_PKEY_CTX_free(check) }
        // The quick check (on the curve, not the point at infinity): the full one multiplies by
        // the group order, a second scalar multiplication per assertion for a key that already
        // came out of a certificate Apple's chain vouched for.
        guard EVP_PKEY_public_check_quick(check) == 1 else {
            ERR_clear_error()
            return false
        }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key) == 1 else {
            ERR_clear_error()
            return false
        }
        let valid = EVP_DigestVerify(context, signature, signature.count, message, message.count) == 1
        ERR_clear_error()
        return valid
    }
}
#endif
