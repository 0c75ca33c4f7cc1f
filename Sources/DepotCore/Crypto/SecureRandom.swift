/// Cryptographically secure random bytes: OpenSSL's DRBG on Linux, the system's generator on
/// Apple platforms.
public enum SecureRandom {
    /// Returns `count` random bytes.
    public static func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        guard count > 0 else { return out }
        CryptoBackend.fillRandom(&out)
        return out
    }
}
