/// A streaming message digest: SHA-256 for everything AssetDepot stores, SHA-1 and SHA-512 only
/// to check what tus clients send. OpenSSL's EVP interface on Linux (SHA-NI where the CPU has
/// it), CryptoKit on Apple platforms.
///
/// Not thread-safe: one hasher per stream.
public class MessageDigest {
    /// The algorithms on offer, named as the tus checksum extension names them.
    public enum Algorithm: String, Sendable, CaseIterable {
        case sha1, sha256, sha512

        /// The digest length in bytes.
        public var size: Int {
            switch self {
            case .sha1: 20
            case .sha256: 32
            case .sha512: 64
            }
        }
    }

    /// The algorithm in use.
    public let algorithm: Algorithm
    private let context: DigestContext

    /// Starts a new digest.
    public init(_ algorithm: Algorithm) {
        self.algorithm = algorithm
        context = DigestContext(algorithm)
    }

    /// Adds bytes to the digest.
    public final func update(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        context.update(bytes)
    }

    /// Adds bytes to the digest.
    public final func update<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        if let done: Void = bytes.withContiguousStorageIfAvailable({ update(UnsafeRawBufferPointer($0)) }) {
            return done
        }
        let array = Array(bytes)
        array.withUnsafeBytes { update($0) }
    }

    /// Finishes the digest and returns its bytes; the hasher cannot be used afterwards.
    public final func finalize() -> [UInt8] { context.finalize() }
}

/// Streaming SHA-256: what names blobs and checks packs.
public final class SHA256Hasher: MessageDigest {
    /// Starts a new SHA-256 digest.
    public init() { super.init(.sha256) }

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
