internal import COpenSSL

/// HKDF with SHA-256 (RFC 5869), through OpenSSL's `EVP_PKEY_HKDF`.
public enum HKDF {
    /// Extracts and expands `length` bytes of key material.
    public static func deriveKey(
        inputKeyMaterial ikm: [UInt8], salt: [UInt8], info: [UInt8], length: Int
    ) throws(CryptoError) -> [UInt8] {
        guard let ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nil) else { throw .openSSL("EVP_PKEY_CTX_new_id") }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_derive_init(ctx) == 1 else { throw .openSSL("EVP_PKEY_derive_init") }
        guard EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) == 1 else { throw .openSSL("EVP_PKEY_CTX_set_hkdf_md") }
        // RFC 5869: an absent salt is HashLen zero bytes.
        let effectiveSalt = salt.isEmpty ? [UInt8](repeating: 0, count: 32) : salt
        let saltOK = effectiveSalt.withUnsafeBufferPointer {
            EVP_PKEY_CTX_set1_hkdf_salt(ctx, $0.baseAddress, Int32($0.count))
        }
        guard saltOK == 1 else { throw .openSSL("EVP_PKEY_CTX_set1_hkdf_salt") }
        guard ikm.withUnsafeBufferPointer({ EVP_PKEY_CTX_set1_hkdf_key(ctx, $0.baseAddress, Int32($0.count)) }) == 1 else {
            throw .openSSL("EVP_PKEY_CTX_set1_hkdf_key")
        }
        if !info.isEmpty {
            guard info.withUnsafeBufferPointer({ EVP_PKEY_CTX_add1_hkdf_info(ctx, $0.baseAddress, Int32($0.count)) }) == 1 else {
                throw .openSSL("EVP_PKEY_CTX_add1_hkdf_info")
            }
        }
        var out = [UInt8](repeating: 0, count: length)
        var outLength = length
        guard EVP_PKEY_derive(ctx, &out, &outLength) == 1, outLength == length else { throw .openSSL("EVP_PKEY_derive") }
        return out
    }
}
