import Foundation

/// Crash-safe file operations: write a temporary file in the same folder, fsync it,
/// rename it over the target, fsync the folder.
public enum FileSystem {
    /// The folder part of a path.
    public static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// The last component of a path.
    public static func lastComponent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }

    /// Creates a folder and its parents (mode 0755, or `mode`), durably: each folder made is
    /// fsynced into its parent before the next is made inside it, so that a power cut cannot
    /// lose a folder that a durable record (written after this returns) relies on. `durable:
    /// false` for a staging tree that is fsynced whole before it is switched in (no fsync per folder).
    public static func createDirectory(_ path: String, mode: mode_t = 0o755, durable: Bool = true) throws(SystemError) {
        var path = path
        while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
        // The part missing, from the deepest folder that exists down.
        var missing: [String] = []
        var current = path
        while !current.isEmpty && current != "/" && current != "." && !isDirectory(current) {
            missing.append(current)
            current = directory(of: current)
        }
        // The deepest folder that exists may have been made by another process an instant ago,
        // its entry not yet fsynced: its parent is fsynced once per process before anything
        // durable goes inside it (a second upload into a new `blobs/ab/`).
        if durable && !current.isEmpty && current != "/" && current != "." && !knownDurable.withLock({ $0.contains(current) }) {
            // Best effort: the parent may be a folder this process may not open (a sandbox's
            // container root on iOS), as in `durableRename`.
            try? syncDirectory(directory(of: current), .ordered)
            knownDurable.withLock { folders in
                if folders.count >= 4096 { folders.removeAll() }
                folders.insert(current)
            }
        }
        for folder in missing.reversed() {
            if System.makeDirectory(folder, mode) != 0 {
                guard System.errno == EEXIST, isDirectory(folder) else { throw SystemError(call: "mkdir", errno: System.errno, path: folder) }
                // Another process made it meanwhile; its entry is made durable here all the same.
            }
            if durable { try syncDirectory(directory(of: folder)) }
        }
    }

    /// Folders whose entry this process has seen made durable (bounded: emptied when full).
    private static let knownDurable = Locked<Set<String>>([])

    /// Whether something exists at `path`.
    public static func exists(_ path: String) -> Bool { System.status(path) != nil }

    /// Whether a folder exists at `path`.
    public static func isDirectory(_ path: String) -> Bool { System.status(path)?.isDirectory == true }

    /// The size of the file at `path`, or nil if there is none.
    public static func fileSize(_ path: String) -> Int64? { System.status(path)?.size }

    /// fsyncs a folder so that renames and creations in it are durable (`.ordered`: once the
    /// next full sync returns, ``SyncLevel``).
    public static func syncDirectory(_ path: String, _ level: SyncLevel = .full) throws(SystemError) {
        let fd = try FileDescriptor(path: path, flags: O_RDONLY | O_DIRECTORY)
        try fd.sync(level)
    }

    /// A temporary path in the same folder as `path`, unique to this process and call:
    /// `.tmp-NAME-pPID-RANDOM` and `suffix`. The process id is the owner's, read back by
    /// ``temporaryOwner(_:)``, so that a later run can tell a killed writer's leftovers from a
    /// file another process is still writing.
    public static func temporaryPath(besides path: String, suffix: String = "") -> String {
        directory(of: path) + "/" + temporaryName(for: lastComponent(of: path)) + suffix
    }

    /// `.tmp-NAME-pPID-TAG`: a temporary name for `name`, owned by this process. `TAG` is 12 hex
    /// digits: this process's launch token (8, random once per process, so that a later process
    /// given the same pid can tell the name is not its own) and a counter (4, so that two names
    /// this process makes at once differ).
    public static func temporaryName(for name: String) -> String {
        let count = temporaryCounter.withLock { value -> UInt16 in
            value &+= 1
            return value
        }
        return ".tmp-" + name + "-p\(System.processID)-" + launchToken + Hex.encode([UInt8(count >> 8), UInt8(count & 0xff)])
    }

    /// This process's launch token: 8 hex digits, random once per process.
    public static let launchToken = Hex.encode(SecureRandom.bytes(4))
    private static let temporaryCounter = Locked<UInt16>(UInt16.random(in: 0...UInt16.max))

    /// Whether a temporary name is this very process's (its pid and its launch token), not one a
    /// killed process that had the same pid left.
    public static func isThisProcessTemporary(_ name: String) -> Bool {
        guard let (owner, tag) = temporaryOwnerAndTag(name) else { return false }
        return owner == System.processID && tag.hasPrefix(launchToken)
    }

    /// The process that owns a temporary name (``temporaryName(for:)``, with any suffix after a
    /// `.`): the process id of the *last* `-pPID-RANDOM` part, which is the one the writer put
    /// there (the name before it is a pack's or a file's, and may hold such a part itself).
    /// nil for a name that has none.
    public static func temporaryOwner(_ name: String) -> Int32? {
        temporaryOwnerAndTag(name)?.owner
    }

    /// The owner (``temporaryOwner(_:)``) and the 12 hex digits after it.
    static func temporaryOwnerAndTag(_ name: String) -> (owner: Int32, tag: String)? {
        guard name.hasPrefix(".tmp-") else { return nil }
        let utf8 = Array(name.utf8)
        // Scan from the end for "-p<digits>-<12 hex>" followed by the end or a ".".
        var end = utf8.count
        while end > 0 {
            if let owner = owner(in: utf8, endingAt: end) { return (owner, String(decoding: utf8[(end - 12)..<end], as: UTF8.self)) }
            guard let dot = utf8[..<end].lastIndex(of: 46) else { return nil }
            end = dot
        }
        return nil
    }

    private static func owner(in utf8: [UInt8], endingAt end: Int) -> Int32? {
        let random = 12
        guard end >= random + 4 else { return nil }
        let hex = utf8[(end - random)..<end]
        guard hex.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }), utf8[end - random - 1] == 45 else { return nil }
        var start = end - random - 1
        while start > 0, utf8[start - 1] >= 48 && utf8[start - 1] <= 57 { start -= 1 }
        let digits = utf8[start..<(end - random - 1)]
        guard !digits.isEmpty, digits.count <= 10, start >= 2, utf8[start - 1] == 112, utf8[start - 2] == 45 else { return nil }
        return Int32(String(decoding: digits, as: UTF8.self))
    }

    /// Copies the file at `from` to `to` (which must not exist) in 64 KiB pieces and fsyncs it;
    /// at most `limit` bytes (`EFBIG` past that). On failure nothing is left at `to`.
    public static func copyDurably(_ from: String, to: String, limit: Int64 = .max) throws(SystemError) {
        let input = try FileDescriptor.openForReading(from)
        guard try input.size() <= limit else { throw SystemError(call: "read", errno: EFBIG, path: from) }
        do {
            let output = try FileDescriptor(path: to, flags: O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 16)
            defer { buffer.deallocate() }
            var total: Int64 = 0
            while true {
                let n = try input.read(into: buffer)
                if n == 0 { break }
                total += Int64(n)
                guard total <= limit else { throw SystemError(call: "read", errno: EFBIG, path: from) }
                try output.write(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            }
            try output.sync()
            try output.close()
        } catch let error as SystemError {
            remove(to)
            throw error
        } catch {
            remove(to)
            throw SystemError(call: "open", errno: EIO, path: to)
        }
    }

    /// Renames `from` over `to` and fsyncs the folder of `to`, then (as far as it can be
    /// opened) the folder of `from` when it is another, so that the old name does not come back
    /// after a power cut either. (A folder this process may not open — the system's, where
    /// Background Assets hands over a finished download — is left as it is: the rename is done.)
    /// `level` is the folders' sync (``SyncLevel``); `syncingSource: false` leaves the folder of
    /// `from` alone (one whose owner deletes what is left in it anyway).
    public static func durableRename(_ from: String, to: String, _ level: SyncLevel = .full, syncingSource: Bool = true) throws(SystemError) {
        try systemCall("rename", path: to) { System.rename(from, to) }
        try syncDirectory(directory(of: to), level)
        if syncingSource, directory(of: from) != directory(of: to) { try? syncDirectory(directory(of: from), level) }
    }

    /// Renames `from` to `to`, with no sync: for several renames made durable together by one
    /// sync of their folder.
    public static func rename(_ from: String, to: String) throws(SystemError) {
        try systemCall("rename", path: to) { System.rename(from, to) }
    }

    /// Writes `bytes` to `path` atomically and durably.
    /// `level` `.ordered` makes the write ordered before later ones, durable at the next full sync
    /// (``SyncLevel``).
    public static func writeAtomically(_ bytes: [UInt8], to path: String, mode: mode_t = 0o644, _ level: SyncLevel = .full) throws(SystemError) {
        let temporary = temporaryPath(besides: path)
        do {
            let fd = try FileDescriptor(path: temporary, flags: O_WRONLY | O_CREAT | O_EXCL, mode: mode)
            try fd.write(bytes)
            try fd.sync(level)
            try fd.close()
            try durableRename(temporary, to: path, level)
        } catch {
            _ = System.unlink(temporary)
            throw error
        }
    }

    /// Reads a whole file, refusing one larger than `limit` bytes.
    public static func readFile(_ path: String, limit: Int = 64 << 20) throws(SystemError) -> [UInt8] {
        let fd = try FileDescriptor.openForReading(path)
        let size = try fd.size()
        guard size <= Int64(limit) else { throw SystemError(call: "read", errno: EFBIG, path: path) }
        var bytes = [UInt8](repeating: 0, count: Int(size))
        var count = 0
        do { count = try bytes.withUnsafeMutableBytes { try fd.readFully(into: $0) } } catch let error as SystemError { throw error } catch {}
        if count < bytes.count { bytes.removeSubrange(count...) }
        return bytes
    }

    /// Removes a file, ignoring a missing one.
    public static func remove(_ path: String) {
        _ = System.unlink(path)
    }

    /// Removes an empty folder, ignoring a missing one.
    public static func removeDirectory(_ path: String) {
        _ = System.removeDirectory(path)
    }

    /// Removes a file or a folder tree, deepest first, ignoring what is missing. A link is
    /// removed, never followed. Each removal is a crash point (``System``), so a kill in the
    /// middle of a tree's removal is enumerated like any other.
    public static func removeTree(_ path: String) {
        guard System.isFolder(path) else {
            remove(path)
            return
        }
        for name in System.directoryEntries(path) ?? [] { removeTree(path + "/" + name) }
        removeDirectory(path)
    }

    /// Removes a file or a folder tree as ``removeTree(_:)`` does, after renaming it (one step) to
    /// a temporary name of this process: what is half removed is never at its old name, where
    /// another process could take it for whole; killed meanwhile, it is this process's leftover.
    public static func discardTree(_ path: String) {
        guard System.identity(path) != nil else { return }
        let aside = temporaryPath(besides: path)
        removeTree(System.rename(path, aside) == 0 ? aside : path)
    }

    /// Changes a path's permission bits.
    public static func setMode(_ path: String, _ mode: mode_t) {
        _ = System.changeMode(path, mode)
    }

    /// Names in a folder, without `.` and `..`; empty if it cannot be read.
    public static func contents(of path: String) -> [String] {
        (System.directoryEntries(path) ?? []).sorted()
    }

    /// Removes the temporary files (`.tmp-*`) that an interrupted write left in a folder. A
    /// temporary file another live process owns (``temporaryOwner(_:)``) is that process's write
    /// in progress (an admin command beside a starting origin) and stays.
    @discardableResult
    public static func removeTemporaryFiles(in path: String) -> Int {
        var removed = 0
        for name in contents(of: path) where name.hasPrefix(".tmp-") {
            if let owner = temporaryOwner(name), owner != System.processID, System.isProcessAlive(owner) { continue }
            if System.unlink(path + "/" + name) == 0 { removed += 1 }
        }
        return removed
    }
}
