/// AES-256-GCM with a 12-byte nonce and a 16-byte tag, for one key.
///
/// On Linux through OpenSSL's EVP interface (one `EVP_CIPHER_CTX` reused across messages), on
/// Apple platforms through CryptoKit. One instance per thread.
public final class AES256GCM {
    /// Tag length in bytes.
    public static let tagSize = 16
    /// Nonce length in bytes.
    public static let nonceSize = 12

    private let context: AESGCMContext

    /// Creates a cipher for one 32-byte key.
    public init(key: [UInt8]) throws(CryptoError) {
        guard key.count == 32 else { throw .invalidKeySize(expected: 32, got: key.count) }
        context = try AESGCMContext(key: key)
    }

    /// Encrypts `plaintext` into `output` (plaintext.count + 16 bytes: ciphertext then tag).
    public func seal(
        _ plaintext: UnsafeRawBufferPointer, nonce: [UInt8], aad: [UInt8], into output: UnsafeMutableRawBufferPointer
    ) throws(CryptoError) {
        guard nonce.count == Self.nonceSize else { throw .invalidNonceSize }
        precondition(output.count >= plaintext.count + Self.tagSize)
        try context.seal(plaintext, nonce: nonce, aad: aad, into: output)
    }

    /// Decrypts `sealed` (ciphertext then tag) into `output` (sealed.count - 16 bytes); throws if
    /// the tag does not verify, leaving `output` zeroed.
    public func open(
        _ sealed: UnsafeRawBufferPointer, nonce: [UInt8], aad: [UInt8], into output: UnsafeMutableRawBufferPointer
    ) throws(CryptoError) {
        guard nonce.count == Self.nonceSize else { throw .invalidNonceSize }
        guard sealed.count >= Self.tagSize else { throw .authenticationFailed }
        precondition(output.count >= sealed.count - Self.tagSize)
        do {
            try context.open(sealed, nonce: nonce, aad: aad, into: output)
        } catch {
            let textCount = sealed.count - Self.tagSize
            if let base = output.baseAddress, textCount > 0 { base.initializeMemory(as: UInt8.self, repeating: 0, count: textCount) }
            throw error
        }
    }
}
