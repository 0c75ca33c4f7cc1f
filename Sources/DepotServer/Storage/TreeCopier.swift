import DepotCore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Copies a folder's tree (or parts of it, named relative to it) with permission bits, each file
/// fsynced, each folder fsynced once its entries are in — as root may copy a folder another user
/// controls (`depot backup` and `depot restore` keep root's rights): it never follows a link
/// inside the tree. Every name is opened relative to its folder's descriptor with `O_NOFOLLOW`
/// (and `O_NONBLOCK`, so that a FIFO cannot hang it) and checked with `fstat`, so a link planted
/// anywhere is copied as a link, never read through; a FIFO, a socket or a device is passed over
/// and named (``passedOver``). Temporary and lock files are left out
/// (``DataBackup/skipped(_:kind:size:)``), and so is what vanishes while it copies.
final class TreeCopier {
    private(set) var files = 0
    private(set) var bytes: Int64 = 0
    /// What was neither a file, a folder nor a link (its path relative to the source): not copied.
    private(set) var passedOver: [String] = []
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    /// The source folder, opened once (a link there is followed: the operator named it).
    private let root: FileDescriptor
    let source: String

    init(source: String) throws {
        self.source = source
        root = try FileDescriptor(path: source, flags: O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    }

    deinit { buffer.deallocate() }

    /// What a name is, as `fstatat(AT_SYMLINK_NOFOLLOW)` sees it.
    enum Kind: Equatable {
        case file(size: Int64), folder, link, other
    }

    /// The folder `relative` ("" for the source itself), each component opened without following
    /// a link; nil when one is missing or not a folder.
    private func openFolder(_ relative: String) -> FileDescriptor? {
        var current = Int32(-1)
        var fd = dup(root.rawValue)
        guard fd >= 0 else { return nil }
        for component in relative.split(separator: "/") where !component.isEmpty {
            current = fd
            fd = openat(current, String(component), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            Glibc.close(current)
            guard fd >= 0 else { return nil }
        }
        return FileDescriptor(adopting: fd, path: source + "/" + relative)
    }

    /// `relative`'s parent folder, opened, and its last component.
    private func parent(of relative: String) -> (folder: FileDescriptor, name: String)? {
        let parts = relative.split(separator: "/").map(String.init)
        guard let name = parts.last, let folder = openFolder(parts.dropLast().joined(separator: "/")) else { return nil }
        return (folder, name)
    }

    /// What `relative` is, never following a link; nil when it is missing.
    func kind(_ relative: String) -> Kind? {
        guard let (folder, name) = parent(of: relative) else { return nil }
        var info = stat()
        guard fstatat(folder.rawValue, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { return nil }
        switch info.st_mode & S_IFMT {
        case S_IFREG: return .file(size: Int64(info.st_size))
        case S_IFDIR: return .folder
        case S_IFLNK: return .link
        default: return .other
        }
    }

    /// The names in the folder `relative` (none when it is not a folder), sorted.
    func entries(_ relative: String) -> [String] {
        guard let folder = openFolder(relative) else { return [] }
        let fd = dup(folder.rawValue)
        guard fd >= 0, let dir = fdopendir(fd) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: MemoryLayout.size(ofValue: entry.pointee.d_name)) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// Makes `path` (if missing) with `mode`.
    func makeFolder(_ path: String, mode: mode_t) throws {
        if !FileSystem.isDirectory(path) { try FileSystem.createDirectory(path, mode: mode) }
        FileSystem.setMode(path, mode)
    }

    /// Makes `path` (if missing) with the permission bits of the source folder `relative`.
    func makeFolder(_ path: String, like relative: String) throws {
        var info = stat()
        let mode = openFolder(relative).flatMap { fstat($0.rawValue, &info) == 0 ? info.st_mode & 0o7777 : nil } ?? 0o755
        try makeFolder(path, mode: mode)
    }

    /// Copies `relative` (a file, a link, or a folder and everything in it; "" for the whole
    /// source) to `to`, leaving out the relative paths in `excluding`, temporary files and lock
    /// files. Something that vanished is left out.
    func copy(_ relative: String, to: String, excluding: Set<String> = []) throws {
        guard relative.isEmpty || !excluding.contains(relative) else { return }
        switch relative.isEmpty ? .folder : kind(relative) {
        case nil:
            return
        case .file?:
            _ = try copyFile(relative, to: to)
        case .link?:
            try copyLink(relative, to: to)
        case .other?:
            passedOver.append(relative)
        case .folder?:
            try makeFolder(to, like: relative)
            for name in entries(relative) {
                let child = relative.isEmpty ? name : relative + "/" + name
                if let kind = kind(child), DataBackup.skipped(name, kind: kind) { continue }
                try copy(child, to: to + "/" + name, excluding: excluding)
            }
            try FileSystem.syncDirectory(to)
        }
    }

    /// A link copied as a link (its target as written, never read through).
    private func copyLink(_ relative: String, to: String) throws {
        guard let (folder, name) = parent(of: relative) else { return }
        var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlinkat(folder.rawValue, name, &target, target.count - 1)
        guard length >= 0 else {
            if errno == ENOENT { return }
            throw SystemError(call: "readlinkat", errno: errno, path: source + "/" + relative)
        }
        target[length] = 0
        guard symlink(target, to) == 0 else { throw SystemError(call: "symlink", errno: errno, path: to) }
        files += 1
    }

    /// Copies one file (a plain file: a link or FIFO put in its place meanwhile is passed over)
    /// with its permission bits and fsyncs it; false if it was gone or not a plain file.
    @discardableResult
    func copyFile(_ relative: String, to: String) throws -> Bool {
        guard let (folder, name) = parent(of: relative) else { return false }
        let fd = openat(folder.rawValue, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return false }
            if errno == ELOOP {
                // A link put in its place since it was listed: copied as a link, like any other.
                try copyLink(relative, to: to)
                return true
            }
            throw SystemError(call: "open", errno: errno, path: source + "/" + relative)
        }
        let input = FileDescriptor(adopting: fd, path: source + "/" + relative)
        var info = stat()
        guard fstat(input.rawValue, &info) == 0 else { throw SystemError(call: "fstat", errno: errno, path: input.path) }
        guard info.st_mode & S_IFMT == S_IFREG else {
            passedOver.append(relative)
            return false
        }
        let mode = info.st_mode & 0o7777
        let output = try FileDescriptor(path: to, flags: O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode: mode)
        // The exact bits, whatever the umask (keys stay 0600).
        guard fchmod(output.rawValue, mode) == 0 else { throw SystemError(call: "fchmod", errno: errno, path: to) }
        while true {
            let n = try input.read(into: buffer)
            if n == 0 { break }
            try output.write(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            bytes += Int64(n)
        }
        try output.sync()
        try output.close()
        files += 1
        return true
    }
}
