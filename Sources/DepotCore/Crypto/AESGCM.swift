internal import COpenSSL

/// AES-256-GCM with a 12-byte nonce and a 16-byte tag, one `EVP_CIPHER_CTX` reused across messages.
///
/// Owns its context, freed in `deinit`. One instance per thread.
public final class AES256GCM {
    /// Tag length in bytes.
    public static let tagSize = 16
    /// Nonce length in bytes.
    public static let nonceSize = 12

    private let context: OpaquePointer
    private let key: [UInt8]

    /// Creates a cipher for one 32-byte key.
    public init(key: [UInt8]) throws(CryptoError) {
        guard key.count == 32 else { throw .invalidKeySize(expected: 32, got: key.count) }
        guard let context = EVP_CIPHER_CTX_new() else { throw .openSSL("EVP_CIPHER_CTX_new") }
        self.context = context
        self.key = key
    }

    deinit { EVP_CIPHER_CTX_free(context) }

    /// Encrypts `plaintext` into `output` (plaintext.count + 16 bytes: ciphertext then tag).
    public func seal(
        _ plaintext: UnsafeRawBufferPointer, nonce: [UInt8], aad: [UInt8], into output: UnsafeMutableRawBufferPointer
    ) throws(CryptoError) {
        guard nonce.count == Self.nonceSize else { throw .invalidNonceSize }
        precondition(output.count >= plaintext.count + Self.tagSize)
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
        guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(Self.tagSize), out + plaintext.count) == 1 else {
            throw .openSSL("EVP_CTRL_GCM_GET_TAG")
        }
    }

    /// Decrypts `sealed` (ciphertext then tag) into `output` (sealed.count - 16 bytes); throws if the tag does not verify.
    public func open(
        _ sealed: UnsafeRawBufferPointer, nonce: [UInt8], aad: [UInt8], into output: UnsafeMutableRawBufferPointer
    ) throws(CryptoError) {
        guard nonce.count == Self.nonceSize else { throw .invalidNonceSize }
        guard sealed.count >= Self.tagSize else { throw .authenticationFailed }
        let textCount = sealed.count - Self.tagSize
        precondition(output.count >= textCount)
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
        guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(Self.tagSize), &tag) == 1 else {
            throw .openSSL("EVP_CTRL_GCM_SET_TAG")
        }
        var finalLength: Int32 = 0
        var scratch = [UInt8](repeating: 0, count: 16)
        let finalOK = scratch.withUnsafeMutableBufferPointer { s in
            EVP_DecryptFinal_ex(context, out.map { $0 + textCount } ?? s.baseAddress, &finalLength)
        }
        guard finalOK == 1 else {
            if let base = output.baseAddress, textCount > 0 { base.initializeMemory(as: UInt8.self, repeating: 0, count: textCount) }
            throw .authenticationFailed
        }
    }
}
