import Foundation

/// Removes blobs that nothing needs any more: not in any channel's live release, not in a
/// release published within `retention`, not in a draft, not being stored and staged right now
/// (`inFlight`: a blob is stored a moment before it is staged, whatever the machine's load), and
/// stored longer ago than `grace`. Runs under the publish lock, with the in-flight counts held
/// while it removes, so no publish or rollback can pick a blob up while it goes.
struct GarbageCollector: Sendable {
    let releases: ReleaseStore
    let blobs: any BlobStore
    /// The blobs publishes are storing and staging (none, offline).
    var inFlight = BlobsInFlight()
    /// The blobs of resumable uploads being finished (recorded before the move into the store,
    /// staged after it; a crash between leaves one for start-up to stage).
    var finishing: @Sendable () -> Set<String> = { [] }
    /// The blobs backups hold (with object storage: ``BackupHold``s in the bucket, kept until
    /// their `keepUntil`); read before the publish lock. A failure to read them removes nothing.
    var held: @Sendable (_ now: Date, _ removingExpired: Bool) throws -> Set<String> = { _, _ in [] }

    /// Returns the blobs removed (or, with `dryRun`, that would be) and their bytes. Throws
    /// `backup_running` (409), removing nothing, while `depot backup` copies the folder
    /// (``BackupLock``): a blob of a release it copied must still be there when it copies `blobs/`.
    @discardableResult
    func collect(retention: TimeInterval, grace: TimeInterval, now: Date = WallClock.now(), dryRun: Bool = false) throws -> (blobs: [String], bytes: Int64) {
        if dryRun { return try collectHoldingBackupLock(retention: retention, grace: grace, now: now, dryRun: true) }
        let folder = releases.folder
        guard let swept = try BackupLock.exclusively(folder, { try collectHoldingBackupLock(retention: retention, grace: grace, now: now, dryRun: false) }) else {
            throw BackupLock.busy(folder)
        }
        return swept
    }

    private func collectHoldingBackupLock(retention: TimeInterval, grace: TimeInterval, now: Date, dryRun: Bool) throws -> (blobs: [String], bytes: Int64) {
        // Read before the lock (reading every upload's state under it would hold up publishes);
        // a record written meanwhile names a blob being stored, which `inFlight` holds.
        let recorded = finishing().union(try held(now, !dryRun))
        return try releases.exclusively {
            let needed = try releases.neededBlobs(retention: retention, now: now).union(recorded)
            let stored = blobs.enumerate()
            return inFlight.holding { storing in
                var removed: [String] = []
                var bytes: Int64 = 0
                for blob in stored where !needed.contains(blob.sha256) && storing[blob.sha256] == nil && blob.modified < now.addingTimeInterval(-grace) {
                    if !dryRun { blobs.remove(blob.sha256) }
                    removed.append(blob.sha256)
                    bytes += blob.size
                }
                return (removed, bytes)
            }
        }
    }
}
