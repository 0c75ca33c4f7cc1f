#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import struct Foundation.Date

/// Every system call of DepotCore, and of the client through it: one function each, with the
/// differences between Linux (glibc) and Apple platforms (Darwin) here and nowhere else.
/// Each returns what the call returns (-1 and `errno` on failure) or throws a ``SystemError``.
public enum System {
    /// The calling thread's `errno`.
    public static var errno: Int32 {
        #if canImport(Glibc)
        Glibc.errno
        #else
        Darwin.errno
        #endif
    }

    // MARK: Descriptors

    static func open(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 {
        let creates = CrashPoints.willCreate(path, flags)
        if creates { CrashPoints.reach(.create, path) }
        #if canImport(Glibc)
        let fd = Glibc.open(path, flags | O_CLOEXEC, mode)
        #else
        let fd = Darwin.open(path, flags | O_CLOEXEC, mode)
        #endif
        CrashPoints.opened(fd, path, created: creates)
        return fd
    }

    static func close(_ fd: Int32) -> Int32 {
        CrashPoints.closed(fd)
        #if canImport(Glibc)
        return Glibc.close(fd)
        #else
        return Darwin.close(fd)
        #endif
    }

    static func read(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
        #if canImport(Glibc)
        Glibc.read(fd, buffer, count)
        #else
        Darwin.read(fd, buffer, count)
        #endif
    }

    /// Sets a file's access and modification times to now.
    static func touch(_ fd: Int32) -> Int32 {
        #if canImport(Glibc)
        Glibc.futimens(fd, nil)
        #else
        Darwin.futimens(fd, nil)
        #endif
    }

    static func pread(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int, _ offset: Int64) -> Int {
        #if canImport(Glibc)
        Glibc.pread(fd, buffer, count, off_t(offset))
        #else
        Darwin.pread(fd, buffer, count, off_t(offset))
        #endif
    }

    static func write(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int {
        CrashPoints.writing(fd)
        #if canImport(Glibc)
        return Glibc.write(fd, buffer, count)
        #else
        return Darwin.write(fd, buffer, count)
        #endif
    }

    /// Flushes data and metadata to stable storage. On Apple platforms `fsync` only reaches the
    /// drive's cache; `F_FULLFSYNC` reaches the medium (with `fsync` where the file system
    /// does not support it).
    static func fullSync(_ fd: Int32, path: String = "") -> Int32 {
        CrashPoints.reach(.fsync, path)
        SyncTally.current?.count(.full)
        #if canImport(Glibc)
        let result = Glibc.fsync(fd)
        #else
        let result = Darwin.fcntl(fd, F_FULLFSYNC) == 0 ? 0 : Darwin.fsync(fd)
        #endif
        if result == 0 { CrashPoints.done(.fsync, path, fd: fd) }
        return result
    }

    /// Writes the file's data and metadata out of the system's cache, ordered before every later
    /// write to the device, without draining the drive's cache: `fsync` on Linux (which reaches
    /// the medium), `F_BARRIERFSYNC` on Apple platforms (`fsync` where the file system lacks it).
    /// The next ``fullSync(_:path:)`` on the device — `F_FULLFSYNC` flushes everything the drive
    /// holds, not one file's — commits it: many files are made durable with one drive flush.
    static func orderedSync(_ fd: Int32, path: String = "") -> Int32 {
        CrashPoints.reach(.fsync, path)
        SyncTally.current?.count(.ordered)
        #if canImport(Glibc)
        let result = Glibc.fsync(fd)
        #else
        let result = Darwin.fcntl(fd, F_BARRIERFSYNC) == 0 ? 0 : Darwin.fsync(fd)
        #endif
        if result == 0 { CrashPoints.done(.fsync, path, fd: fd) }
        return result
    }

    /// Starts writing a range of a file to disk without waiting for it, so that a later
    /// ``fullSync(_:)`` has little left to do. On Linux `POSIX_FADV_DONTNEED` starts the
    /// writeback of the range's dirty pages (and lets the cache drop them once written);
    /// elsewhere nothing happens and the final sync does it all.
    static func startWriteback(_ fd: Int32, _ offset: Int64, _ count: Int64) {
        #if canImport(Glibc)
        _ = Glibc.posix_fadvise(fd, off_t(offset), off_t(count), POSIX_FADV_DONTNEED)
        #endif
    }

    static func truncate(_ fd: Int32, _ size: Int64, path: String = "") -> Int32 {
        CrashPoints.reach(.ftruncate, path)
        #if canImport(Glibc)
        let result = Glibc.ftruncate(fd, off_t(size))
        #else
        let result = Darwin.ftruncate(fd, off_t(size))
        #endif
        if result == 0 { CrashPoints.done(.ftruncate, path, fd: fd) }
        return result
    }

    static func seek(_ fd: Int32, _ offset: Int64) -> Int64 {
        #if canImport(Glibc)
        Int64(Glibc.lseek(fd, off_t(offset), SEEK_SET))
        #else
        Int64(Darwin.lseek(fd, off_t(offset), SEEK_SET))
        #endif
    }

    /// Size and modification time of an open file.
    static func status(_ fd: Int32, path: String) throws(SystemError) -> (size: Int64, modified: Date) {
        var info = stat()
        try systemCall("fstat", path: path) { fstat(fd, &info) }
        #if canImport(Glibc)
        let seconds = info.st_mtim.tv_sec
        #else
        let seconds = info.st_mtimespec.tv_sec
        #endif
        return (Int64(info.st_size), Date(timeIntervalSince1970: Double(seconds)))
    }

    /// Takes an exclusive advisory lock (`flock`) without waiting; false if another descriptor
    /// holds it. Closing the descriptor releases it.
    public static func tryLock(_ fd: Int32) throws(SystemError) -> Bool {
        while true {
            // Both platforms name the call flock (the struct of the same name is fcntl's).
            let result = flock(fd, LOCK_EX | LOCK_NB)
            if result == 0 { return true }
            if errno == EINTR { continue }
            if errno == EWOULDBLOCK { return false }
            throw SystemError(call: "flock", errno: errno)
        }
    }

    // MARK: Processes

    /// This process's id.
    public static var processID: Int32 { getpid() }

    /// Whether a process with this id exists (one of another user's too: `kill` answers EPERM).
    public static func isProcessAlive(_ pid: Int32) -> Bool {
        pid > 0 && (kill(pid, 0) == 0 || errno == EPERM)
    }

    /// Whether the process `pid` provably no longer runs: `kill(pid, 0)` answers "no such
    /// process". A process this one may not signal (another app's, on iOS) is not gone.
    public static func processIsGone(_ pid: Int32) -> Bool {
        guard pid > 0, pid != getpid() else { return false }
        return kill(pid, 0) != 0 && errno == ESRCH
    }

    // MARK: Memory

    /// Anonymous private memory of `count` bytes (zeroed), or nil.
    static func mapMemory(_ count: Int) -> UnsafeMutableRawBufferPointer? {
        guard let base = mmap(nil, max(1, count), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON, -1, 0),
              base != UnsafeMutableRawPointer(bitPattern: -1) else { return nil }
        return UnsafeMutableRawBufferPointer(start: base, count: count)
    }

    static func unmapMemory(_ memory: UnsafeMutableRawBufferPointer) {
        if let base = memory.baseAddress { _ = munmap(base, max(1, memory.count)) }
    }

    /// Gives the pages of `memory` back to the system (their contents are lost): the process's
    /// resident size drops at once — on Apple platforms also its footprint, which the memory
    /// limit of an extension counts (`MADV_FREE_REUSABLE`).
    static func releasePages(_ memory: UnsafeMutableRawBufferPointer) {
        guard let base = memory.baseAddress, memory.count > 0 else { return }
        #if canImport(Darwin)
        // (It can fail where the pages were never touched: then the plain advice.)
        if madvise(base, memory.count, MADV_FREE_REUSABLE) != 0 { _ = madvise(base, memory.count, MADV_DONTNEED) }
        #else
        _ = madvise(base, memory.count, MADV_DONTNEED)
        #endif
    }

    /// The memory page size.
    static let pageSize = Int(getpagesize())

    /// The text of an `errno` value.
    public static func describe(_ code: Int32) -> String { String(cString: strerror(code)) }
}

/// A file's device and inode: the same path naming another file has another identity.
public struct FileIdentity: Hashable, Sendable {
    public var device: UInt64
    public var inode: UInt64
}
