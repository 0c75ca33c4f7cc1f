import struct Foundation.Date
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An open file descriptor with one owner, closed in `deinit` unless released.
public final class FileDescriptor: @unchecked Sendable {
    // @unchecked: owns a descriptor; it may be handed to another thread (a blocking call, a
    // response), but one owner uses it at a time.
    /// The raw descriptor; -1 once closed or released.
    public private(set) var rawValue: Int32
    /// The path it was opened with, for error messages.
    public let path: String

    /// Opens `path` with `open(2)` flags.
    public init(path: String, flags: Int32, mode: mode_t = 0o644) throws(SystemError) {
        self.path = path
        self.rawValue = try systemCall("open", path: path) { open(path, flags | O_CLOEXEC, mode) }
    }

    /// Opens an existing file read-only.
    public static func openForReading(_ path: String) throws(SystemError) -> FileDescriptor {
        try FileDescriptor(path: path, flags: O_RDONLY)
    }

    deinit { if rawValue >= 0 { _ = Glibc.close(rawValue) } }

    /// Gives up ownership: the caller must close the returned descriptor.
    public func release() -> Int32 {
        let fd = rawValue
        rawValue = -1
        return fd
    }

    /// Closes now, reporting the error `close(2)` returns (it can carry a delayed write error).
    public func close() throws(SystemError) {
        guard rawValue >= 0 else { return }
        let fd = release()
        if Glibc.close(fd) != 0, errno != EINTR { throw SystemError(call: "close", errno: errno, path: path) }
    }

    /// Reads up to `buffer.count` bytes; 0 at end of file.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> Int {
        try systemCall("read", path: path) { Glibc.read(rawValue, buffer.baseAddress, buffer.count) }
    }

    /// Reads until `buffer` is full or the file ends; returns the count read.
    public func readFully(into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> Int {
        var total = 0
        while total < buffer.count {
            let n = try read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[total...]))
            if n == 0 { break }
            total += n
        }
        return total
    }

    /// Reads up to `count` bytes at `offset` without moving the file position.
    public func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(SystemError) -> Int {
        var total = 0
        while total < buffer.count {
            let n = try systemCall("pread", path: path) {
                pread(rawValue, buffer.baseAddress! + total, buffer.count - total, off_t(offset) + off_t(total))
            }
            if n == 0 { break }
            total += n
        }
        return total
    }

    /// Writes all of `bytes`.
    public func write(_ bytes: UnsafeRawBufferPointer) throws(SystemError) {
        var written = 0
        while written < bytes.count {
            written += try systemCall("write", path: path) {
                Glibc.write(rawValue, bytes.baseAddress! + written, bytes.count - written)
            }
        }
    }

    /// Writes all of `bytes`.
    public func write(_ bytes: [UInt8]) throws(SystemError) {
        // Array.withUnsafeBytes is rethrows, so the typed error is recovered here.
        do { try bytes.withUnsafeBytes { try write($0) } } catch let error as SystemError { throw error } catch {}
    }

    /// Flushes the file's data and metadata to stable storage.
    public func sync() throws(SystemError) {
        try systemCall("fsync", path: path) { fsync(rawValue) }
    }

    /// The file's size in bytes.
    public func size() throws(SystemError) -> Int64 {
        var info = stat()
        try systemCall("fstat", path: path) { fstat(rawValue, &info) }
        return Int64(info.st_size)
    }

    /// The file's size in bytes and its last modification time.
    public func sizeAndModification() throws(SystemError) -> (size: Int64, modified: Date) {
        var info = stat()
        try systemCall("fstat", path: path) { fstat(rawValue, &info) }
        return (Int64(info.st_size), Date(timeIntervalSince1970: Double(info.st_mtim.tv_sec)))
    }

    /// Truncates or extends the file.
    public func truncate(to size: Int64) throws(SystemError) {
        try systemCall("ftruncate", path: path) { ftruncate(rawValue, off_t(size)) }
    }

    /// Moves the file position.
    public func seek(to offset: Int64) throws(SystemError) {
        try systemCall("lseek", path: path) { lseek(rawValue, off_t(offset), SEEK_SET) }
    }
}
