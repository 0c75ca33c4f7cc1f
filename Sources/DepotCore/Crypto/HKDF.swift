/// HKDF with SHA-256 (RFC 5869).
public enum HKDF {
    /// Extracts and expands `length` bytes of key material. An empty salt is HashLen zero bytes.
    public static func deriveKey(
        inputKeyMaterial ikm: [UInt8], salt: [UInt8], info: [UInt8], length: Int
    ) throws(CryptoError) -> [UInt8] {
        try CryptoBackend.hkdfSHA256(inputKeyMaterial: ikm, salt: salt.isEmpty ? [UInt8](repeating: 0, count: 32) : salt, info: info, length: length)
    }
}
