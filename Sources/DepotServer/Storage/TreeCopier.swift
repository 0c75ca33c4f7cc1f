import DepotCore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Copies a folder's tree (or parts of it, named relative to it) with permission bits, each file
/// fsynced, each folder fsynced once its entries are in — as root may copy a folder another user
/// controls (`depot backup` and `depot restore` keep root's rights): it never follows a link
/// inside the tree, and never copies one. Every name is opened relative to its folder's
/// descriptor with `O_NOFOLLOW` (and `O_NONBLOCK`, so that a FIFO cannot hang it) and checked with
/// `fstat`; a link, a FIFO, a socket, a device, a hard link to a file of another owner, or what
/// cannot be read is passed over and named (``passedOver``): the origin makes none of them. The
/// copy is root's alone while it is made: its folders are made 0700 and given their modes by
/// ``applyFolderModes(keepingTop:)``, and no mode keeps a setuid, setgid or sticky bit.
/// Temporary and lock files are left out (``DataBackup/skipped(_:kind:)``), and so is what
/// vanishes while it copies.
final class TreeCopier {
    private(set) var files = 0
    private(set) var bytes: Int64 = 0
    /// Files hard-linked from ``previous`` rather than copied, and their bytes.
    private(set) var linked = 0
    private(set) var linkedBytes: Int64 = 0
    /// Release records among them (``isRecord(_:)``).
    private(set) var linkedRecords = 0
    /// A previous copy (a backup's folder) whose blobs a new copy links instead of copying
    /// (``copyFile(_:to:)``): content-addressed, they never change; so are its release
    /// records whose bytes are the same (``isRecord(_:)``).
    var previous: String?
    /// What was not copied though it was there, relative to the source, each with why.
    private(set) var passedOver: [(path: String, why: String)] = []
    /// The folders made, with the modes they get at the end.
    private var folderModes: [(path: String, mode: mode_t)] = []
    /// The source folder's owner: a hard link to a file of another owner is not copied.
    private let owner: uid_t
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    /// The source folder, opened once (a link there is followed: the operator named it).
    private let root: FileDescriptor
    let source: String

    init(source: String) throws {
        self.source = source
        root = try FileDescriptor(path: source, flags: O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        var info = stat()
        owner = fstat(root.rawValue, &info) == 0 ? info.st_uid : 0
    }

    deinit { buffer.deallocate() }

    /// What a name is, as `fstatat(AT_SYMLINK_NOFOLLOW)` sees it.
    enum Kind: Equatable {
        case file(size: Int64), folder, link, other
    }

    private static func describe(_ errno: Int32) -> String { String(cString: strerror(errno)) }

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

    /// What `relative` is, never following a link; nil when it is missing (or cannot be looked
    /// at: then named in ``passedOver``).
    func kind(_ relative: String) -> Kind? {
        guard let (folder, name) = parent(of: relative) else { return nil }
        var info = stat()
        guard fstatat(folder.rawValue, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
            if errno != ENOENT { passedOver.append((relative, Self.describe(errno))) }
            return nil
        }
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
        guard fd >= 0 else { return [] }
        guard let dir = fdopendir(fd) else {
            Glibc.close(fd)
            return []
        }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = System.entryName(entry)
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// The number in the small plain file `relative` (a pointer, `release-floor`), read without
    /// following a link or waiting on a FIFO; nil for anything else.
    func number(_ relative: String) -> Int? {
        guard let (folder, name) = parent(of: relative) else { return nil }
        let fd = openat(folder.rawValue, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        let file = FileDescriptor(adopting: fd, path: source + "/" + relative)
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size <= 64 else { return nil }
        var bytes = [UInt8](repeating: 0, count: 64)
        guard let count = try? bytes.withUnsafeMutableBytes({ try file.read(into: $0) }) else { return nil }
        return Int(String(decoding: bytes.prefix(count), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// The highest release number the source data folder shows — any app's pointers and release
    /// files, and its release floor − 1 — read as ``number(_:)`` reads: what a restore that sets
    /// this folder aside must number above.
    func highestRelease() -> Int {
        // (A floor below 1 is no floor: nothing the origin wrote.)
        var highest = number("release-floor").map { $0 > 1 ? $0 - 1 : 0 } ?? 0
        for app in entries("apps") where kind("apps/" + app) == .folder {
            let base = "apps/" + app
            for name in entries(base + "/releases") where name.hasSuffix(".json") {
                if let version = Int(name.dropLast(5)) { highest = max(highest, version) }
            }
            for pointer in ["head", "current"].map({ base + "/" + $0 }) + entries(base + "/channels").map({ base + "/channels/" + $0 }) {
                if let value = number(pointer) { highest = max(highest, value) }
            }
        }
        return max(0, highest)
    }

    /// Makes `path` (if missing) 0700, and records `mode` for ``applyFolderModes(keepingTop:)``.
    func makeFolder(_ path: String, mode: mode_t) throws {
        if !FileSystem.isDirectory(path) { try FileSystem.createDirectory(path, mode: 0o700) }
        folderModes.append((path, mode & 0o777))
    }

    /// Makes `path` (if missing) for the source folder `relative`, whose permission bits it gets at the end.
    func makeFolder(_ path: String, like relative: String) throws {
        var info = stat()
        let mode = openFolder(relative).flatMap { fstat($0.rawValue, &info) == 0 ? info.st_mode : nil } ?? 0o755
        try makeFolder(path, mode: mode)
    }

    /// Gives every folder made its mode, deepest first; the first one made (the copy's top) only
    /// unless `keepingTop` (a restore gives it its mode once the tree is the owner's).
    /// Returns the top's mode.
    @discardableResult
    func applyFolderModes(keepingTop: Bool = false) throws -> mode_t {
        for (index, folder) in folderModes.enumerated().reversed() where !(keepingTop && index == 0) {
            guard chmod(folder.path, folder.mode) == 0 else { throw SystemError(call: "chmod", errno: errno, path: folder.path) }
        }
        return folderModes.first?.mode ?? 0o755
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
            passedOver.append((relative, "a symbolic link"))
        case .other?:
            passedOver.append((relative, "a FIFO, a socket or a device"))
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

    /// Copies one plain file with its permission bits (no setuid, setgid or sticky bit) and
    /// fsyncs it; false if it was gone or not copied (a link, FIFO, socket or device put in its
    /// place since it was listed, or a hard link to another owner's file: named in ``passedOver``).
    @discardableResult
    func copyFile(_ relative: String, to: String) throws -> Bool {
        guard let (folder, name) = parent(of: relative) else { return false }
        let fd = openat(folder.rawValue, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return false }
            passedOver.append((relative, errno == ELOOP ? "a symbolic link" : Self.describe(errno)))
            return false
        }
        let input = FileDescriptor(adopting: fd, path: source + "/" + relative)
        var info = stat()
        guard fstat(input.rawValue, &info) == 0 else { throw SystemError(call: "fstat", errno: errno, path: input.path) }
        guard info.st_mode & S_IFMT == S_IFREG else {
            passedOver.append((relative, "a FIFO, a socket or a device"))
            return false
        }
        // A hard link the folder's owner made to a file it does not own (another user's, root's).
        guard info.st_nlink <= 1 || info.st_uid == owner else {
            passedOver.append((relative, "a hard link to a file its owner (uid \(info.st_uid)) did not make"))
            return false
        }
        let mode = info.st_mode & 0o777
        if let previous, relative.hasPrefix("blobs/"), link(previous + "/" + relative, to: to, size: Int64(info.st_size), mode: mode) {
            linked += 1
            linkedBytes += Int64(info.st_size)
            return true
        }
        if let previous, Self.isRecord(relative), Int64(info.st_size) <= Self.recordLimit,
           let compared = sameContent(input, size: Int(info.st_size), as: previous + "/" + relative),
           link(previous + "/" + relative, to: to, size: Int64(info.st_size), mode: mode, file: compared) {
            linked += 1
            linkedRecords += 1
            linkedBytes += Int64(info.st_size)
            return true
        }
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

    /// Release records (a release, its signed copy for a channel, a statement, a root document:
    /// `apps/<app>/{releases,signed/<channel>,statements/<channel>,roots}/NNNNNN.json`, the number
    /// as ``DataFolder/releaseName(_:)`` writes it, six digits or more): a year of them is tens of
    /// thousands of small files, each a write and an fsync per backup. Most never change (a
    /// statement or a signed copy may be replaced whole, by a rename). With ``previous``, one
    /// whose bytes equal the previous copy's file of that path is linked from it instead
    /// (compared in full: a number is not a content's name, and a previous copy of another
    /// folder may hold other bytes).
    static func isRecord(_ relative: String) -> Bool {
        let parts = relative.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count >= 4, parts[0] == "apps", let last = parts.last, last.hasSuffix(".json") else { return false }
        let digits = last.dropLast(5)
        guard digits.count >= 6, digits.count <= 18, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
              let number = Int(digits), DataFolder.releaseName(number) == String(last) else { return false }
        switch (parts.count, parts[2]) {
        case (4, "releases"), (4, "roots"), (5, "signed"), (5, "statements"): return true
        default: return false
        }
    }

    /// Records larger than this are copied (a record is a few KiB; a manifest of 10,000 packs, megabytes).
    static let recordLimit: Int64 = 16 << 20

    /// The device and inode of `earlier` (a plain file, not reached through a link at its last
    /// name) if it holds exactly the `size` bytes `input` holds, else nil; `input` is read from
    /// its start and left there. The link made next must be that very file.
    private func sameContent(_ input: FileDescriptor, size: Int, as earlier: String) -> (device: UInt64, inode: UInt64)? {
        let fd = open(earlier, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, Int(info.st_size) == size else { return nil }
        var mine = [UInt8](repeating: 0, count: size), theirs = [UInt8](repeating: 0, count: size)
        func readAll(_ descriptor: Int32, into bytes: inout [UInt8]) -> Bool {
            bytes.withUnsafeMutableBytes { buffer in
                var done = 0
                while done < size {
                    let n = pread(descriptor, buffer.baseAddress! + done, size - done, off_t(done))
                    if n < 0 && errno == EINTR { continue }
                    guard n > 0 else { return false }
                    done += n
                }
                return true
            }
        }
        guard size == 0 || (readAll(input.rawValue, into: &mine) && readAll(fd, into: &theirs)), mine == theirs else { return nil }
        return (UInt64(info.st_dev), UInt64(info.st_ino))
    }

    /// Hard-links `earlier` (a blob or a record of the previous copy) at `to`, if it is what a
    /// copy would make: a plain file of this process's user (never the service user's: a previous backup
    /// root took is root's), of the blob's size and mode, in a folder not reached through a link
    /// (the link itself is checked after it is made, so a name swapped meanwhile is caught). A
    /// blob's name is its content's SHA-256, so the same name and size is the same content unless
    /// the previous copy was altered by its own owner (a record was compared before). False (nothing left at `to`): copy it.
    private func link(_ earlier: String, to: String, size: Int64, mode: mode_t, file: (device: UInt64, inode: UInt64)? = nil) -> Bool {
        let slash = earlier.lastIndex(of: "/")!
        let folder = open(String(earlier[..<slash]), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard folder >= 0 else { return false }
        defer { Glibc.close(folder) }
        guard linkat(folder, String(earlier[earlier.index(after: slash)...]), AT_FDCWD, to, 0) == 0 else { return false }
        var info = stat()
        let made = open(to, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        let fine = made >= 0 && fstat(made, &info) == 0 && info.st_mode & S_IFMT == S_IFREG && info.st_uid == geteuid() && Int64(info.st_size) == size
            && info.st_mode & 0o7777 == mode && file.map { $0.device == UInt64(info.st_dev) && $0.inode == UInt64(info.st_ino) } ?? true
        if made >= 0 { Glibc.close(made) }
        if !fine { unlink(to) }
        return fine
    }
}
