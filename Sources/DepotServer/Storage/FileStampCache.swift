import DepotCore
import Foundation
import Synchronization

/// Decoded small files, re-read only when the file changes (inode, size or mtime), so that a
/// CLI writing the data folder takes effect on a running server without a read per request.
final class FileStampCache<Value: Sendable>: Sendable {
    private let entries = Mutex<[String: (stamp: String, value: Value?)]>([:])

    /// The decoded value of the file at `path`, nil if it is missing or unreadable.
    func value(at path: String, load: (String) throws -> Value) -> Value? {
        let stamp = Self.stamp(path)
        if let hit = entries.withLock({ $0[path].flatMap { $0.stamp == stamp ? $0 : nil } }) { return hit.value }
        let value = stamp == "missing" ? nil : try? load(path)
        entries.withLock { $0[path] = (stamp, value) }
        return value
    }

    static func stamp(_ path: String) -> String {
        var info = stat()
        guard stat(path, &info) == 0 else { return "missing" }
        return "\(info.st_ino).\(info.st_size).\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
    }
}
