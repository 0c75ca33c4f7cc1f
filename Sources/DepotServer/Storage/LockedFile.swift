import DepotCore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The one way a data-folder file is read, changed and written back: under an exclusive `flock`
/// on `<file>.lock` beside it. The origin and every admin command (`depot apps`, `tokens`, `keys`,
/// `apps trust`) are separate processes that change the same small files; without the lock, two
/// of them reading the same version would each write back their own change and lose the other's
/// (a pack key that already encrypted a published pack, a password the origin already enforced).
///
/// A lock file is never removed (start-up cleanup keeps it: a process holding the lock on an
/// unlinked file would exclude no one). It is opened read-only, so a user that can read the
/// folder can take it; the lock is released when the descriptor closes, a killed process's too.
enum LockedFile {
    /// Runs `body` holding `path`'s lock, waiting for it as long as another process holds it.
    static func withLock<Result>(_ path: String, _ body: () throws -> Result) throws -> Result {
        // Never through a link (with O_CREAT a dangling one would make its target), never a FIFO.
        let lock = try FileDescriptor(path: path + ".lock", flags: O_RDONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode: 0o644)
        try systemCall("flock", path: lock.path) { flock(lock.rawValue, LOCK_EX) }
        defer { flock(lock.rawValue, LOCK_UN) }
        return try body()
    }

    /// Reads `path`'s JSON (nil when there is no file), lets `change` change it, and writes it
    /// back atomically when `change` left a value, all under the file's lock. Returns what
    /// `change` returns.
    static func update<Value: Codable, Result>(
        _ type: Value.Type, at path: String, mode: mode_t = 0o644, _ change: (inout Value?) throws -> Result
    ) throws -> Result {
        try withLock(path) {
            var value: Value? = FileSystem.exists(path) ? try StoredJSON.read(type, from: path) : nil
            let before = value.map { try? StoredJSON.encoder.encode($0) } ?? nil
            let result = try change(&value)
            if let value {
                let after = try StoredJSON.encoder.encode(value)
                if after != before { try FileSystem.writeAtomically(Array(after) + [10], to: path, mode: mode) }
            }
            return result
        }
    }
}
