/// Starts writing a file's new bytes to disk every few MiB while the file is still being
/// written, so that the `fsync` which makes it durable later waits for little instead of the
/// whole file (and the disk works while the CPU encrypts or decrypts the next bytes).
///
/// Where the system has no such call (Apple platforms) it does nothing and the final sync does it all.
public struct WriteBehind {
    /// Bytes written between two requests.
    public static let step: Int64 = 8 << 20
    private var written: Int64
    private var flushed: Int64

    /// For a file whose first new byte goes at `offset`.
    public init(from offset: Int64 = 0) {
        written = offset
        flushed = offset
    }

    /// `count` more bytes were written to `file`.
    public mutating func wrote(_ count: Int, to file: FileDescriptor) {
        written += Int64(count)
        if written - flushed >= Self.step {
            file.startWriteback(from: flushed, count: written - flushed)
            flushed = written
        }
    }
}
