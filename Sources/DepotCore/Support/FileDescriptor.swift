import Foundation

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
        self.rawValue = try systemCall("open", path: path) { System.open(path, flags, mode) }
    }

    /// Takes ownership of a descriptor opened elsewhere (`openat`, say).
    public init(adopting rawValue: Int32, path: String) {
        self.rawValue = rawValue
        self.path = path
    }

    /// Opens an existing file read-only.
    public static func openForReading(_ path: String) throws(SystemError) -> FileDescriptor {
        try FileDescriptor(path: path, flags: O_RDONLY)
    }

    deinit { if rawValue >= 0 { _ = System.close(rawValue) } }

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
        if System.close(fd) != 0, System.errno != EINTR { throw SystemError(call: "close", errno: System.errno, path: path) }
    }

    /// Reads up to `buffer.count` bytes; 0 at end of file.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> Int {
        try systemCall("read", path: path) { System.read(rawValue, buffer.baseAddress, buffer.count) }
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
                System.pread(rawValue, buffer.baseAddress! + total, buffer.count - total, offset + Int64(total))
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
                System.write(rawValue, bytes.baseAddress! + written, bytes.count - written)
            }
        }
    }

    /// Writes all of `bytes`.
    public func write(_ bytes: [UInt8]) throws(SystemError) {
        // Array.withUnsafeBytes is rethrows, so the typed error is recovered here.
        do { try bytes.withUnsafeBytes { try write($0) } } catch let error as SystemError { throw error } catch {}
    }

    /// Sets the file's modification time to now.
    public func touch() throws(SystemError) {
        try systemCall("futimens", path: path) { System.touch(rawValue) }
    }

    /// Flushes the file's data and metadata to stable storage: `.full` (the default) reaches the
    /// medium (`F_FULLFSYNC` on Apple platforms, which flushes the whole drive's cache);
    /// `.ordered` leaves the system's cache, ordered before later writes, and is committed by
    /// the next full sync (``SyncLevel``).
    public func sync(_ level: SyncLevel = .full) throws(SystemError) {
        switch level {
        case .full: try systemCall("fsync", path: path) { System.fullSync(rawValue, path: path) }
        case .ordered: try systemCall("fsync", path: path) { System.orderedSync(rawValue, path: path) }
        }
    }

    /// Starts writing `count` bytes from `offset` to disk in the background (Linux; a no-op elsewhere).
    public func startWriteback(from offset: Int64, count: Int64) {
        System.startWriteback(rawValue, offset, count)
    }

    /// The file's size in bytes.
    public func size() throws(SystemError) -> Int64 {
        try System.status(rawValue, path: path).size
    }

    /// The file's size in bytes and its last modification time.
    public func sizeAndModification() throws(SystemError) -> (size: Int64, modified: Date) {
        try System.status(rawValue, path: path)
    }

    /// Truncates or extends the file.
    public func truncate(to size: Int64) throws(SystemError) {
        try systemCall("ftruncate", path: path) { System.truncate(rawValue, size, path: path) }
    }

    /// Moves the file position.
    public func seek(to offset: Int64) throws(SystemError) {
        try systemCall("lseek", path: path) { System.seek(rawValue, offset) }
    }
}
