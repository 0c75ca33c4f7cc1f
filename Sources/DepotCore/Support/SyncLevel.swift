/// How far an fsync reaches. On Apple platforms `fsync` stops at the drive's cache and
/// `F_FULLFSYNC` asks the drive to flush *all* it holds (Apple's fsync(2)), which costs the same
/// for one file as for thousands: a tree is made durable with `.ordered` per file and folder and
/// one `.full` at its root (as SQLite's `fullfsync` does one per commit). On Linux both are `fsync`.
public enum SyncLevel: Sendable, Hashable {
    /// To the medium: `F_FULLFSYNC` on Apple platforms.
    case full
    /// Out of the system's cache and ordered before later writes (`F_BARRIERFSYNC` on Apple
    /// platforms); durable once a later `.full` sync on the device returns.
    case ordered
}

/// The syncs the calling task makes, by level: the counting seam through which tests check
/// that an install flushes the drive once, not once per file. Counted only inside
/// ``measure(_:)``; elsewhere a sync reads one task-local value.
package final class SyncTally: Sendable {
    @TaskLocal package static var current: SyncTally?

    private let counts = Locked<[SyncLevel: Int]>([:])

    package init() {}

    func count(_ level: SyncLevel) { counts.withLock { $0[level, default: 0] += 1 } }

    /// How many syncs of `level` were made.
    package subscript(level: SyncLevel) -> Int { counts.withLock { $0[level] ?? 0 } }

    /// Runs `body`, counting the syncs it makes on this task (and the synchronous code it calls).
    package static func measure<Result>(_ body: () throws -> Result) rethrows -> (Result, SyncTally) {
        let tally = SyncTally()
        let result = try $current.withValue(tally) { try body() }
        return (result, tally)
    }
}
