import DepotCore
import Foundation

/// `backup.lock` at the data folder's root, across processes (`flock`): `depot backup` holds it
/// shared for its whole copy; removing blobs (the origin's sweep, `depot gc`) takes it exclusive
/// without waiting, and skips its pass while a backup holds it, so that a long copy never
/// misses a blob a copied release names.
enum BackupLock {
    static func path(_ folder: DataFolder) -> String { folder.root + "/backup.lock" }

    /// Holds the lock shared (a backup); fails if it cannot be opened. Closing the descriptor releases it.
    static func shared(_ folder: DataFolder) throws -> FileDescriptor {
        // Root backing up the service's folder: never through a link the service user planted;
        // a lock root makes is given to the service, which takes it too.
        let lock = try folder.openLock("backup.lock", flags: O_RDONLY, mode: 0o644)
        // A removal holds it exclusively for one pass (seconds); whoever holds it longer (the
        // service user can take it too) does not hang the nightly backup for ever.
        let deadline = Date().addingTimeInterval(maximumWait)
        while flock(lock.rawValue, LOCK_SH | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR else { throw SystemError(call: "flock", errno: errno, path: path(folder)) }
            guard Date() < deadline else {
                throw DepotError.conflict("backup_lock_held", "\(path(folder)) has been held exclusively for \(Int(maximumWait)) s (a removal pass takes seconds): no backup was taken. Find the process holding it (fuser \(path(folder))) and run the backup again")
            }
            usleep(100_000)
        }
        return lock
    }

    /// How long a backup waits for removals to finish before it gives up: 600 s
    /// (`DEPOT_BACKUP_LOCK_WAIT` seconds, for tests).
    static var maximumWait: TimeInterval {
        ProcessInfo.processInfo.environment["DEPOT_BACKUP_LOCK_WAIT"].flatMap(TimeInterval.init).map { max(0, $0) } ?? 600
    }

    /// Runs `body` holding the lock exclusively; nil without running it when a backup holds it.
    static func exclusively<T>(_ folder: DataFolder, _ body: () throws -> T) throws -> T? {
        let lock: FileDescriptor
        do {
            lock = try folder.openLock("backup.lock", flags: O_RDONLY, mode: 0o644)
        } catch let error as SystemError where error.errno == EROFS {
            // A read-only folder (an operator's copy) has nothing a backup could miss.
            return try body()
        }
        // Any other failure (a lock this user cannot open) removes nothing: a backup may hold it.
        guard try System.tryLock(lock.rawValue) else { return nil }
        defer { try? lock.close() }
        return try body()
    }

    /// What a removal that found a backup running says.
    static func busy(_ folder: DataFolder) -> DepotError {
        DepotError.conflict("backup_running", "a backup of \(folder.root) is running (depot backup holds backup.lock): no blob was removed this time; the next pass removes them")
    }
}
