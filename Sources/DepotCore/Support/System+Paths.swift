#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Paths: identities, folders, renames and the exchange, unlinks, modes and listings (``System``'s
/// calls on names rather than descriptors).
extension System {
    /// The device and inode of what is at `path` (not following a final symbolic link), or nil:
    /// whether a path still names the folder a process created.
    public static func identity(_ path: String) -> FileIdentity? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return FileIdentity(device: UInt64(truncatingIfNeeded: info.st_dev), inode: UInt64(truncatingIfNeeded: info.st_ino))
    }

    /// The identity of what `path` leads to, links followed (``identity(_:)`` does not follow a
    /// last link): two paths to one folder or file, however named, have the same.
    public static func resolvedIdentity(_ path: String) -> FileIdentity? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return FileIdentity(device: UInt64(truncatingIfNeeded: info.st_dev), inode: UInt64(truncatingIfNeeded: info.st_ino))
    }

    /// What is at `path`: nil if nothing, else its size and whether it is a folder.
    static func status(_ path: String) -> (size: Int64, isDirectory: Bool)? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return (Int64(info.st_size), (info.st_mode & S_IFMT) == S_IFDIR)
    }

    /// Whether `path` is a folder itself (a link to one is not: `lstat`).
    static func isFolder(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// Creates one folder (not its parents); false, with `errno`, if it cannot (one is there).
    public static func makeFolder(_ path: String, mode: mode_t = 0o755) -> Bool { makeDirectory(path, mode) == 0 }

    static func makeDirectory(_ path: String, _ mode: mode_t) -> Int32 {
        CrashPoints.reach(.mkdir, path)
        #if canImport(Glibc)
        let result = Glibc.mkdir(path, mode)
        #else
        let result = Darwin.mkdir(path, mode)
        #endif
        if result == 0 { CrashPoints.done(.mkdir, path) }
        return result
    }

    static func rename(_ from: String, _ to: String) -> Int32 {
        CrashPoints.reach(.rename, from, to)
        #if canImport(Glibc)
        let result = Glibc.rename(from, to)
        #else
        let result = Darwin.rename(from, to)
        #endif
        if result == 0 { CrashPoints.done(.rename, from, to) }
        return result
    }

    /// Swaps what is at `a` and `b` in one atomic step: `renameat2(RENAME_EXCHANGE)` on Linux,
    /// `renamex_np(RENAME_SWAP)` on Apple platforms. False where the system cannot (Linux
    /// before 3.15, or a file system without it); the caller then falls back to two renames.
    public static func exchange(_ a: String, _ b: String) throws(SystemError) -> Bool {
        if CrashPoints.exchangeDisabled { return false }
        CrashPoints.reach(.exchange, a, b)
        let exchanged = try exchangeUncounted(a, b)
        if exchanged { CrashPoints.done(.exchange, a, b) }
        return exchanged
    }

    /// ``exchange(_:_:)`` without the crash point (the crash-point seam undoes one with it).
    static func exchangeUncounted(_ a: String, _ b: String) throws(SystemError) -> Bool {
        #if canImport(Glibc)
        guard let renameat2 = Self.renameat2 else { return false }
        if renameat2(AT_FDCWD, a, AT_FDCWD, b, 1 << 1 /* RENAME_EXCHANGE */) == 0 { return true }
        if errno == EINVAL || errno == ENOSYS { return false }
        throw SystemError(call: "renameat2", errno: errno, path: b)
        #else
        if renamex_np(a, b, UInt32(RENAME_SWAP)) == 0 { return true }
        if errno == ENOTSUP || errno == EINVAL { return false }
        throw SystemError(call: "renamex_np", errno: errno, path: b)
        #endif
    }

    #if canImport(Glibc)
    private typealias RenameAt2 = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
    /// glibc's `renameat2`, which Swift's Glibc module does not export; looked up once.
    private static let renameat2: RenameAt2? = dlsym(nil, "renameat2").map { unsafeBitCast($0, to: RenameAt2.self) }
    #endif

    static func unlink(_ path: String) -> Int32 {
        CrashPoints.reach(.unlink, path)
        #if canImport(Glibc)
        let result = Glibc.unlink(path)
        #else
        let result = Darwin.unlink(path)
        #endif
        if result == 0 { CrashPoints.done(.unlink, path) }
        return result
    }

    static func removeDirectory(_ path: String) -> Int32 {
        CrashPoints.reach(.rmdir, path)
        #if canImport(Glibc)
        let result = Glibc.rmdir(path)
        #else
        let result = Darwin.rmdir(path)
        #endif
        if result == 0 { CrashPoints.done(.rmdir, path) }
        return result
    }

    static func changeMode(_ path: String, _ mode: mode_t) -> Int32 {
        #if canImport(Glibc)
        Glibc.chmod(path, mode)
        #else
        Darwin.chmod(path, mode)
        #endif
    }

    /// The name of a directory entry `readdir` returned, read in place up to its NUL. Never
    /// `entry.pointee.d_name` (a copy of the whole array: 256 bytes on Linux, 1024 on Darwin): a record is as long as its
    /// name (`d_reclen`), so the copy reads past a short one at the end of the buffer, and the
    /// origin crashed there (a segfault in a year-long run, the buffer ending at a page).
    package static func entryName(_ entry: UnsafeMutablePointer<dirent>) -> String {
        let offset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!
        return String(cString: (UnsafeRawPointer(entry) + offset).assumingMemoryBound(to: CChar.self))
    }

    /// Names in a folder, without `.` and `..`; nil if it cannot be read.
    static func directoryEntries(_ path: String) -> [String]? {
        guard let dir = opendir(path) else { return nil }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = System.entryName(entry)
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}
