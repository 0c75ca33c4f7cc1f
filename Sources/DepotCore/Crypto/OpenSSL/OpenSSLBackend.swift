// The OpenSSL backend of the crypto API (Linux): the only file that imports COpenSSL. Each
// context class owns one OpenSSL object and frees it in deinit. The CryptoKit backend
// (../CryptoKit/CryptoKitBackend.swift) offers the same internal API.
#if !canImport(CryptoKit) && !DEPOT_CRYPTOKIT
internal import COpenSSL

enum CryptoBackend {
    static let name = "OpenSSL"

    static func hkdfSHA256(inputKeyMaterial ikm: [UInt8], salt: [UInt8], info: [UInt8], length: Int) throws(CryptoError) -> [UInt8] {
        guard let ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nil) else { throw .openSSL("EVP_PKEY_CTX_new_id") }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_derive_init(ctx) == 1 else { throw .openSSL("EVP_PKEY_derive_init") }
        guard EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) == 1 else { throw .openSSL("EVP_PKEY_CTX_set_hkdf_md") }
        guard salt.withUnsafeBufferPointer({ EVP_PKEY_CTX_set1_hkdf_salt(ctx, $0.baseAddress, Int32($0.count)) }) == 1 else {
            throw .openSSL("EVP_PKEY_CTX_set1_hkdf_salt")
        }
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

    static func fillRandom(_ bytes: inout [UInt8]) {
        // RAND_bytes only fails when the DRBG cannot be seeded, which leaves nothing safe to do.
        guard RAND_bytes(&bytes, Int32(bytes.count)) == 1 else { fatalError("RAND_bytes failed: no entropy") }
    }
}

/// One AES-256-GCM key and one `EVP_CIPHER_CTX`, reused across messages.
final class AESGCMContext {
    private let context: OpaquePointer
    private let key: [UInt8]

    init(key: [UInt8]) throws(CryptoError) {
        guard let context = EVP_CIPHER_CTX_new() else { throw .openSSL("EVP_CIPHER_CTX_new") }
        self.context = context
        self.key = key
    }

    deinit { EVP_CIPHER_CTX_free(context) }

    func seal(_ plaintext: UnsafeRawBufferPointer, nonce: [UInt8], aad: [UInt8], into output: UnsafeMutableRawBufferPointer) throws(CryptoError) {
        guard EVP_EncryptInit_ex(context, EVP_aes_256_gcm(), nil, key, nonce) == 1 else { throw .openSSL("EVP_EncryptInit_ex") }
        var length: Int32 = 0
        if !aad.isEmpty {
            guard EVP_EncryptUpdate(context, nil, &length, aad, Int32(aad.count)) == 1 else { throw .openSSL("EVP_EncryptUpdate(aad)") }
        }
        let out = output.baseAddress!.assumingMemoryBound(to: UInt8.self)
        if plaintext.count > 0 {
            let input = plaintext.baseAddress!.assumingMemoryBound(to: UInt8.self)
            guard EVP_EncryptUpdate(context, out, &length, input, Int32(plaintext.count)) == 1 else {
                throw .openSSL("EVP_EncryptUpdate")
            }
        }
        var finalLength: Int32 = 0
        guard EVP_EncryptFinal_ex(context, out + plaintext.count, &finalLength) == 1 else { throw .openSSL("EVP_EncryptFinal_ex") }
        guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(AES256GCM.tagSize), out + plaintext.count) == 1 else {
            throw .openSSL("EVP_CTRL_GCM_GET_TAG")
        }
    }

    func open(_ sealed: UnsafeRawBufferPointer, nonce: [UInt8], aad: [UInt8], into output: UnsafeMutableRawBufferPointer) throws(CryptoError) {
        let textCount = sealed.count - AES256GCM.tagSize
        guard EVP_DecryptInit_ex(context, EVP_aes_256_gcm(), nil, key, nonce) == 1 else { throw .openSSL("EVP_DecryptInit_ex") }
        var length: Int32 = 0
        if !aad.isEmpty {
            guard EVP_DecryptUpdate(context, nil, &length, aad, Int32(aad.count)) == 1 else { throw .openSSL("EVP_DecryptUpdate(aad)") }
        }
        let input = sealed.baseAddress!.assumingMemoryBound(to: UInt8.self)
        let out = output.baseAddress?.assumingMemoryBound(to: UInt8.self)
        if textCount > 0 {
            guard EVP_DecryptUpdate(context, out, &length, input, Int32(textCount)) == 1 else { throw .openSSL("EVP_DecryptUpdate") }
        }
        var tag = [UInt8](UnsafeRawBufferPointer(rebasing: sealed[textCount...]))
        guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(AES256GCM.tagSize), &tag) == 1 else {
            throw .openSSL("EVP_CTRL_GCM_SET_TAG")
        }
        var finalLength: Int32 = 0
        var scratch = [UInt8](repeating: 0, count: 16)
        let finalOK = scratch.withUnsafeMutableBufferPointer { s in
            EVP_DecryptFinal_ex(context, out.map { $0 + textCount } ?? s.baseAddress, &finalLength)
        }
        guard finalOK == 1 else { throw .authenticationFailed }
    }
}

/// One `EVP_MD_CTX`, never shared across threads.
final class DigestContext {
    private let context: OpaquePointer
    private let size: Int

    init(_ algorithm: MessageDigest.Algorithm) {
        guard let context = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new: out of memory") }
        self.context = context
        size = algorithm.size
        let md: OpaquePointer? = switch algorithm {
        case .sha1: EVP_sha1()
        case .sha256: EVP_sha256()
        case .sha512: EVP_sha512()
        }
        guard EVP_DigestInit_ex(context, md, nil) == 1 else { fatalError("EVP_DigestInit_ex(\(algorithm)) failed") }
    }

    deinit { EVP_MD_CTX_free(context) }

    func update(_ bytes: UnsafeRawBufferPointer) {
        _ = EVP_DigestUpdate(context, bytes.baseAddress, bytes.count)
    }

    func finalize() -> [UInt8] {
        var out = [UInt8](repeating: 0, count: size)
        var length = UInt32(size)
        _ = EVP_DigestFinal_ex(context, &out, &length)
        return out
    }
}

/// An Ed25519 private key as an `EVP_PKEY`.
final class Ed25519SigningContext: @unchecked Sendable {
    // @unchecked: owns an immutable EVP_PKEY; OpenSSL allows concurrent signing with one key.
    private let key: OpaquePointer
    let publicKey: [UInt8]

    init(seed: [UInt8]) throws(CryptoError) {
        guard let key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, seed, 32) else {
            throw .openSSL("EVP_PKEY_new_raw_private_key")
        }
        var pub = [UInt8](repeating: 0, count: 32)
        var length = 32
        guard EVP_PKEY_get_raw_public_key(key, &pub, &length) == 1, length == 32 else {
            EVP_PKEY_free(key)
            throw .openSSL("EVP_PKEY_get_raw_public_key")
        }
        self.key = key
        publicKey = pub
    }

    deinit { EVP_PKEY_free(key) }

    func sign(_ message: [UInt8]) throws(CryptoError) -> [UInt8] {
        guard let ctx = EVP_MD_CTX_new() else { throw .openSSL("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, nil, nil, key) == 1 else { throw .openSSL("EVP_DigestSignInit") }
        var signature = [UInt8](repeating: 0, count: 64)
        var length = 64
        guard EVP_DigestSign(ctx, &signature, &length, message, message.count) == 1, length == 64 else {
            throw .openSSL("EVP_DigestSign")
        }
        return signature
    }
}

/// An Ed25519 public key as an `EVP_PKEY`.
final class Ed25519VerifyingContext: @unchecked Sendable {
    // @unchecked: owns an immutable EVP_PKEY; verification with one key is thread-safe in OpenSSL.
    private let key: OpaquePointer

    init(raw: [UInt8]) throws(CryptoError) {
        guard let key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, raw, 32) else {
            throw .openSSL("EVP_PKEY_new_raw_public_key")
        }
        self.key = key
    }

    deinit { EVP_PKEY_free(key) }

    func isValid(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        message.withUnsafeBytes { isValid(signature, for: $0) }
    }

    func isValid(_ signature: [UInt8], for message: UnsafeRawBufferPointer) -> Bool {
        guard let ctx = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestVerifyInit(ctx, nil, nil, nil, key) == 1 else { return false }
        return EVP_DigestVerify(ctx, signature, 64, message.baseAddress?.assumingMemoryBound(to: UInt8.self), message.count) == 1
    }
}
#endif
