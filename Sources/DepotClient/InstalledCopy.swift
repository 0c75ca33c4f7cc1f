import DepotCore
import Foundation

/// What an install switched in, measured before the switch: the state records it, and each plan
/// compares it with what is on disk (``isWhole(at:recorded:)``), so that a copy the system partly
/// purged (`Library/Caches`), a file truncated in place, or a copy switched in by an install
/// killed before it recorded it (another inode than the record's) is planned again.
///
/// The check is `stat` only — the copy's inode, the number of files and their sizes — never a
/// hash: it runs for every installed pack at every event, in an extension with seconds to spare.
public struct InstalledCopy: Hashable, Sendable {
    /// A zip pack unpacked as a folder of its entries.
    public var unpacked: Bool
    /// Regular files (1 for a file).
    public var files: Int
    /// Their sizes added up.
    public var bytes: Int64
    /// The inode of the file or folder: a rename keeps it, so the installed copy has the staged one's.
    public var inode: UInt64

    public init(unpacked: Bool, files: Int, bytes: Int64, inode: UInt64) {
        (self.unpacked, self.files, self.bytes, self.inode) = (unpacked, files, bytes, inode)
    }

    /// What is at `path` now: a file, or a folder's regular files (anything else counts as a
    /// file of size -1, which matches no record); nil when nothing is there.
    public static func measure(_ path: String) -> InstalledCopy? {
        guard let identity = System.identity(path) else { return nil }
        guard FileSystem.isDirectory(path) else { return InstalledCopy(unpacked: false, files: 1, bytes: FileSystem.fileSize(path) ?? -1, inode: identity.inode) }
        var copy = InstalledCopy(unpacked: true, files: 0, bytes: 0, inode: identity.inode)
        var folders = [path]
        while let folder = folders.popLast() {
            for name in FileSystem.contents(of: folder) {
                let child = folder + "/" + name
                if FileSystem.isDirectory(child) {
                    folders.append(child)
                } else {
                    copy.files += 1
                    copy.bytes += FileSystem.fileSize(child) ?? -1
                }
            }
        }
        return copy
    }

    /// Whether the copy at `path` is still the one `recorded` describes: there, the same inode,
    /// of the same kind, with as many files and bytes. A record written before copies were
    /// measured has only the manifest's install size to go by (a file's size; a tree's files
    /// added up).
    public static func isWhole(at path: String, recorded: InstalledState.Pack) -> Bool {
        guard let now = measure(path), now.unpacked == recorded.unpacked else { return false }
        if let inode = recorded.inode, now.inode != inode { return false }
        if let files = recorded.files, now.files != files { return false }
        return now.bytes == (recorded.bytes ?? recorded.installSize)
    }
}

/// A staging folder this process created: its device and inode are taken at creation and checked
/// before its tree is measured and switched in, so that a folder removed and created again under
/// the same name (by another process, or by an extractor recreating a missing parent) is never
/// installed as if it were whole.
struct StagedTree {
    let path: String
    let identity: FileIdentity

    /// Creates the folder (it must not exist).
    init(_ path: String) throws {
        guard System.makeFolder(path) else { throw SystemError(call: "mkdir", errno: System.errno, path: path) }
        guard let identity = System.identity(path) else { throw SystemError(call: "lstat", errno: System.errno, path: path) }
        (self.path, self.identity) = (path, identity)
    }

    /// The tree, measured, if the folder is still the one created; else an install failure.
    func measured(pack: String) throws -> InstalledCopy {
        guard System.identity(path) == identity, let copy = InstalledCopy.measure(path), copy.unpacked else {
            throw ClientError.install(pack, SystemError(call: "stat", errno: ENOENT, path: path + " (the staging folder was removed while it was built)"))
        }
        return copy
    }
}
