import DepotCore
import Foundation

/// Where a restore puts its copy, and what root checks and takes before it works there by path:
/// the folders above the data folder, a link to it, a mount point (restored inside), and the
/// markers a restore leaves for the origin's start.
extension DataRestore {
    /// What `depot restore --take-over-bucket` leaves for the restored writer's first start.
    static func takeOverPath(_ folder: DataFolder) -> String { folder.root + "/take-over-bucket" }

    /// The marker a restore inside a mount point leaves while it moves the folder's entries;
    /// the origin refuses to start on a folder that has it (``unfinished(_:)``).
    static let marker = ".restoring"

    /// Names at a data folder's top that a restore inside it leaves where they are: its lock,
    /// what earlier restores set aside there, its own copy and marker.
    static func keptInPlace(_ name: String) -> Bool {
        name == "serve.lock" || name == marker || name.hasPrefix(".before-restore-") || name.hasPrefix(".partial-restore-")
    }

    /// The mount point as root took it: its descriptor, and its owner and mode before.
    struct TakenFolder {
        let descriptor: FileDescriptor
        let owner: uid_t, group: gid_t, mode: mode_t
    }

    /// Opens `path` (no link followed) and makes it root's with mode 0700.
    static func takeMountPoint(_ path: String) throws -> TakenFolder {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw SystemError(call: "open", errno: errno, path: path) }
        let descriptor = FileDescriptor(adopting: fd, path: path)
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw SystemError(call: "fstat", errno: errno, path: path) }
        guard fchown(fd, 0, 0) == 0, fchmod(fd, 0o700) == 0 else { throw SystemError(call: "fchown", errno: errno, path: path) }
        return TakenFolder(descriptor: descriptor, owner: info.st_uid, group: info.st_gid, mode: info.st_mode & 0o7777)
    }

    /// Gives a taken mount point its owner and mode back (a restore that failed).
    static func giveBack(_ taken: TakenFolder) {
        _ = fchown(taken.descriptor.rawValue, taken.owner, taken.group)
        _ = fchmod(taken.descriptor.rawValue, taken.mode)
    }

    /// Refuses a data folder some folder above which is not root's, or is writable by others
    /// without the sticky bit (`/tmp` is fine): root restoring there would work by path where
    /// the service user could swap a folder for a link.
    static func checkAncestors(of path: String) throws {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        var components = absolute.split(separator: "/").map(String.init)
        guard !components.isEmpty else {
            throw DepotError.badRequest("the data folder cannot be /")
        }
        components.removeLast()
        var current = ""
        for component in [""] + components {
            current = component.isEmpty ? "/" : (current == "/" ? "/" : current + "/") + component
            var info = stat()
            guard lstat(current, &info) == 0 else { throw SystemError(call: "lstat", errno: errno, path: current) }
            let kind = info.st_mode & S_IFMT
            // A link root owns is root's to change (its target is checked as the resolved path).
            let unsafeWrite = kind != S_IFLNK && (info.st_mode & 0o022) != 0 && (info.st_mode & S_ISVTX) == 0
            guard kind == S_IFDIR || kind == S_IFLNK, info.st_uid == 0, !unsafeWrite else {
                throw DepotError.conflict("data_folder_parent_unsafe", "\(current), above the data folder \(path), is \(info.st_uid != 0 ? "not root's" : kind != S_IFDIR ? "not a folder" : "writable by others"): root restoring there works by path where another user could swap a folder for a link. Put the data folder under folders only root can change (as /var/lib), or run depot restore as the user that owns it; nothing was changed")
            }
        }
    }

    /// `path` itself, or where it points when it is a symbolic link (absolute, resolved).
    static func resolvedLink(_ path: String) -> String {
        var info = stat()
        guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFLNK, let resolved = realpath(path, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// True when `path` is a mount point: on another device than its parent, the same inode as
    /// its parent (`/`), or named in `/proc/self/mountinfo` (a bind mount of a folder on the
    /// same device).
    static func isMountPoint(_ path: String) -> Bool {
        var own = stat(), parent = stat()
        guard stat(path, &own) == 0, stat(path + "/..", &parent) == 0 else { return false }
        if own.st_dev != parent.st_dev || own.st_ino == parent.st_ino { return true }
        guard let resolved = realpath(path, nil) else { return false }
        defer { free(resolved) }
        let absolute = String(cString: resolved)
        // A /proc file says its size is 0: read to its end.
        guard let table = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return false }
        // Field 5 is the mount point, with space, tab, newline and backslash as octal escapes.
        for line in table.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: false)
            guard fields.count > 4 else { continue }
            let point = fields[4].replacingOccurrences(of: "\\040", with: " ").replacingOccurrences(of: "\\011", with: "\t")
                .replacingOccurrences(of: "\\012", with: "\n").replacingOccurrences(of: "\\134", with: "\\")
            if point == absolute { return true }
        }
        return false
    }

    /// A restore into a mount point: the copy was made at `partial` inside it. With `setAside`,
    /// the folder's entries (but those ``keptInPlace(_:)`` and `lost+found`) move into
    /// `.before-restore-<time>` inside it; then the copy's entries move up, and the copy's
    /// folder goes. A marker (``marker``) is there from before the first move until after the
    /// last: a crash between leaves it, and the origin refuses to start until a restore runs
    /// again with --replace. Returns where the old entries went.
    static func swapInside(_ data: String, partial: String, setAside: Bool, now: Date) throws -> String? {
        let markerPath = data + "/" + marker
        try FileSystem.writeAtomically(Array("a restore into this folder did not finish: run depot restore again with --replace\n".utf8), to: markerPath)
        var aside: String?
        if setAside {
            let path = try asidePath(data + "/.before-restore-", now: now)
            guard mkdir(path, 0o700) == 0 else { throw SystemError(call: "mkdir", errno: errno, path: path) }
            for name in FileSystem.contents(of: data) where !keptInPlace(name) && name != "lost+found" {
                guard rename(data + "/" + name, path + "/" + name) == 0 else { throw SystemError(call: "rename", errno: errno, path: data + "/" + name) }
            }
            try FileSystem.syncDirectory(path)
            aside = path
        }
        for name in FileSystem.contents(of: partial) {
            guard rename(partial + "/" + name, data + "/" + name) == 0 else { throw SystemError(call: "rename", errno: errno, path: partial + "/" + name) }
        }
        // The copy's top folder's mode and owner go to the mount point, as its own would have.
        var top = stat()
        if stat(partial, &top) == 0 {
            _ = chmod(data, top.st_mode & 0o7777)
            _ = chown(data, top.st_uid, top.st_gid)
        }
        FileSystem.removeDirectory(partial)
        try FileSystem.syncDirectory(data)
        FileSystem.remove(markerPath)
        try FileSystem.syncDirectory(data)
        return aside
    }

    /// Refuses a folder a restore inside a mount point did not finish moving (``marker``).
    static func unfinished(_ folder: DataFolder) throws {
        guard FileSystem.exists(folder.root + "/" + marker) else { return }
        throw DepotError.conflict("restore_unfinished", "\(folder.root) holds \(marker): a restore into it did not finish moving its files, and what is there is a mix. Run depot restore --replace with the backup again (the mix is set aside, not deleted); nothing was started")
    }
}
