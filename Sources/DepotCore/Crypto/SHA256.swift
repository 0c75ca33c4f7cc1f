internal import COpenSSL

/// Streaming SHA-256 over OpenSSL's EVP interface (SHA-NI where the CPU has it).
///
/// Owns one `EVP_MD_CTX`, freed in `deinit`. Not thread-safe: one hasher per stream.
public final class SHA256Hasher {
    // Owns the EVP_MD_CTX; never shared across threads.
    private let context: OpaquePointer

    /// Starts a new digest.
    public init() {
        guard let context = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new: out of memory") }
        self.context = context
        guard EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1 else { fatalError("EVP_DigestInit_ex(sha256) failed") }
    }

    deinit { EVP_MD_CTX_free(context) }

    /// Adds bytes to the digest.
    public func update(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        _ = EVP_DigestUpdate(context, bytes.baseAddress, bytes.count)
    }

    /// Adds bytes to the digest.
    public func update<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        if let done: Void = bytes.withContiguousStorageIfAvailable({ update(UnsafeRawBufferPointer($0)) }) {
            return done
        }
        let array = Array(bytes)
        array.withUnsafeBytes { update($0) }
    }

    /// Finishes the digest and returns its 32 bytes; the hasher cannot be used afterwards.
    public func finalize() -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 32
        _ = EVP_DigestFinal_ex(context, &out, &length)
        return out
    }

    /// The SHA-256 of a byte sequence in one call.
    public static func hash<Bytes: Sequence>(_ bytes: Bytes) -> [UInt8] where Bytes.Element == UInt8 {
        let hasher = SHA256Hasher()
        hasher.update(bytes)
        return hasher.finalize()
    }
}

extension SHA256Hasher {
    /// The SHA-256 of a file, lower-case hex, read in 1 MiB blocks.
    public static func hexDigest(ofFile path: String) throws(SystemError) -> String {
        let file = try FileDescriptor.openForReading(path)
        let hasher = SHA256Hasher()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            var n = 0
            do { n = try buffer.withUnsafeMutableBytes { try file.read(into: $0) } } catch let error as SystemError { throw error } catch {}
            if n == 0 { break }
            buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }
        return Hex.encode(hasher.finalize())
    }
}
