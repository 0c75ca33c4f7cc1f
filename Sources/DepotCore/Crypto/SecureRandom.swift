internal import COpenSSL

/// Cryptographically secure random bytes from OpenSSL's DRBG.
public enum SecureRandom {
    /// Returns `count` random bytes.
    public static func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        guard count > 0 else { return out }
        // RAND_bytes only fails when the DRBG cannot be seeded, which leaves nothing safe to do.
        guard RAND_bytes(&out, Int32(count)) == 1 else { fatalError("RAND_bytes failed: no entropy") }
        return out
    }
}
