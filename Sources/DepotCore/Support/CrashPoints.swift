#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The crash-point seam of the durability tests, in debug builds only (a release build, and so
/// an app's, has none of it): every call of ``System`` that changes what a crash leaves on disk
/// — creating a file, `mkdir`, `rename`, an exchange, `unlink`, `rmdir`, `fsync`, `ftruncate` —
/// is a numbered crash point, and a process started with
///
/// - `DEPOT_CRASH_AT=N` kills itself (SIGKILL) as it enters its Nth crash point
///   (`DEPOT_CRASH_AT=rename:N`: its Nth rename);
/// - `DEPOT_CRASH_STOP=1` (with `DEPOT_CRASH_AT`) stops it there (SIGSTOP) instead, until a test
///   continues it (SIGCONT): two processes interleaved at a chosen point;
/// - `DEPOT_CRASH_TRACE=FILE` appends a line per crash point (`N call path`), so a test learns how
///   many a sequence has and enumerates them all;
/// - `DEPOT_CRASH_POWER=lose|data|entries` (with `DEPOT_CRASH_BACKUP=DIR`, a folder on the same
///   file system) first leaves the disk as a power cut at that instant may: written data not
///   fsynced since is cut off (`lose`, `data`; the last written file cut at a 4 KiB boundary
///   halfway), and every created, renamed, exchanged or removed entry whose folder was not
///   fsynced after the change is undone (`lose`, `entries`), newest first — the states ALICE
///   (OSDI 2014) enumerates from a call trace, built here on the real file system at the crash.
///   Data written in place over fsynced bytes is modelled as appended (nothing here overwrites).
///
/// `DEPOT_CRASH_NO_EXCHANGE=1` makes ``System/exchange(_:_:)`` answer that the file system has no
/// atomic exchange, so that the fallback of a system without one (Linux before 3.15) is enumerated
/// as well.
///
/// Without these variables nothing is counted and each call costs one load of a `let`.
enum CrashPoints {
    #if DEBUG
    static let injector: Injector? = Injector.fromEnvironment()
    #endif

    /// Whether a test asked for the fallback without an atomic exchange (debug builds only).
    static var exchangeDisabled: Bool {
        #if DEBUG
        return noExchange
        #else
        return false
        #endif
    }

    #if DEBUG
    private static let noExchange = getenv("DEPOT_CRASH_NO_EXCHANGE").map { String(cString: $0) == "1" } ?? false
    #endif

    /// A crash point: `call` on `path` is about to happen.
    @inline(__always)
    static func reach(_ call: Call, _ path: String, _ other: String? = nil) {
        #if DEBUG
        injector?.reach(call, path, other)
        #endif
    }

    /// A descriptor opened (`created`: the call made a new file), for the power-cut model.
    @inline(__always)
    static func opened(_ fd: Int32, _ path: String, created: Bool) {
        #if DEBUG
        if fd >= 0 { injector?.opened(fd, path, created: created) }
        #endif
    }

    /// Whether the open about to happen creates a file (it does not exist yet); asked only when injecting.
    @inline(__always)
    static func willCreate(_ path: String, _ flags: Int32) -> Bool {
        #if DEBUG
        guard injector != nil, flags & O_CREAT != 0 else { return false }
        var info = stat()
        return lstat(path, &info) != 0
        #else
        return false
        #endif
    }

    @inline(__always)
    static func closed(_ fd: Int32) {
        #if DEBUG
        injector?.closed(fd)
        #endif
    }

    /// Bytes about to be written to `fd` (the power-cut model's data).
    @inline(__always)
    static func writing(_ fd: Int32) {
        #if DEBUG
        injector?.writing(fd)
        #endif
    }

    /// A completed call that changes folders (after it succeeded), for the power-cut model.
    @inline(__always)
    static func done(_ call: Call, _ path: String, _ other: String? = nil, fd: Int32 = -1) {
        #if DEBUG
        injector?.done(call, path, other, fd: fd)
        #endif
    }

    enum Call: String {
        case create, mkdir, rename, exchange, unlink, rmdir, fsync, ftruncate
    }
}
