import DepotCore
import Foundation
import Synchronization

/// Decoded small files, re-read only when the file changes (device, inode, size, mtime or ctime), so that a
/// CLI writing the data folder takes effect on a running server without a read per request:
/// one `stat` per lookup (an `fstatat` from an open folder, when given one), compared as integers.
final class FileStampCache<Value: Sendable>: Sendable {
    /// What identifies one version of a file.
    typealias Stamp = FileStamp

    /// One file's version and value; immutable, so a lookup copies one reference.
    private final class Entry: Sendable {
        let path: String
        /// The path from `folder`, when the file is under it.
        let relative: String?
        let stamp: Stamp?
        let value: Value?
        init(path: String, relative: String?, stamp: Stamp?, value: Value?) { (self.path, self.relative, self.stamp, self.value) = (path, relative, stamp, value) }
    }

    private let entries = Mutex<[String: Entry]>([:])
    /// A folder the files live under, open: a file under it is looked at with `fstatat` by its
    /// path from there (a shorter walk than from `/`, on every lookup); -1: by the whole path.
    private let folder: Int32
    private let folderPrefix: String
    /// The entries kept at most; past it one goes for each new one.
    private let limit: Int

    /// Files anywhere, or (faster) under `folder`.
    init(relativeTo folder: String? = nil, limit: Int = 4096) {
        self.limit = limit
        self.folder = folder.map { open($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC) } ?? -1
        folderPrefix = folder.map { $0 + "/" } ?? ""
    }

    deinit { if folder >= 0 { close(folder) } }

    /// The decoded value of the file at `path`, nil if it is missing or unreadable.
    func value(at path: String, load: (String) throws -> Value) -> Value? {
        value(for: path, path: { path }, load: load)
    }

    /// The decoded value of the file named by `key` (an app id, say), whose path is made only
    /// the first time: a lookup is then one hash of the key and one `stat`.
    func value(for key: String, path: () -> String, load: (String) throws -> Value) -> Value? {
        if let known = entries.withLock({ $0[key] }) {
            let stamp = known.relative.map { Self.stamp(folder, $0) } ?? Self.stamp(known.path)
            if known.stamp == stamp { return known.value }
            return reload(key, path: known.path, relative: known.relative, stamp: stamp, load: load)
        }
        let path = path()
        let relative = folder >= 0 && path.hasPrefix(folderPrefix) ? String(path.dropFirst(folderPrefix.count)) : nil
        return reload(key, path: path, relative: relative, stamp: relative.map { Self.stamp(folder, $0) } ?? Self.stamp(path), load: load)
    }

    private func reload(_ key: String, path: String, relative: String?, stamp: Stamp?, load: (String) throws -> Value) -> Value? {
        var value: Value? = nil
        if stamp != nil {
            // A file that is there but cannot be read (its owner or mode, a damaged write) is a
            // problem the operator must hear of: logged and on /healthz (``StateHealth``).
            do {
                value = try load(path)
                StateHealth.shared.succeeded(path)
            } catch {
                StateHealth.shared.failed(path, error)
            }
        }
        let entry = Entry(path: path, relative: relative, stamp: stamp, value: value)
        entries.withLock { entries in
            // Names come from requests: a missing file is not kept (a flood of made-up names
            // adds nothing), and a full cache lets one entry go, never all of them.
            guard stamp != nil else {
                entries[key] = nil
                return
            }
            if entries.count >= limit && entries[key] == nil { entries.remove(at: entries.startIndex) }
            entries[key] = entry
        }
        return value
    }

    static func stamp(_ path: String) -> Stamp? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Stamp(info)
    }

    static func stamp(_ folder: Int32, _ relative: String) -> Stamp? {
        var info = stat()
        guard fstatat(folder, relative, &info, 0) == 0 else { return nil }
        return Stamp(info)
    }
}

/// What identifies one version of a file: its device and inode, size, modification time and
/// change time (which no one can set: any write, rename or `utimens` moves it, so a same-size
/// copy with its old time restored, `cp -p`, is seen too).
struct FileStamp: Equatable, Sendable {
    var device: UInt64
    var inode: UInt64
    var size: Int64
    var seconds: Int
    var nanoseconds: Int
    var changeSeconds: Int
    var changeNanoseconds: Int

    init(_ info: stat) {
        (device, inode, size) = (UInt64(info.st_dev), UInt64(info.st_ino), Int64(info.st_size))
        (seconds, nanoseconds, changeSeconds, changeNanoseconds) = (info.st_mtim.tv_sec, info.st_mtim.tv_nsec, info.st_ctim.tv_sec, info.st_ctim.tv_nsec)
    }
}
