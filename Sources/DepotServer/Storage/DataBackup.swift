import DepotCore
import Foundation

/// What `backup.json` in a backup says: written last, just before the backup gets its name.
public struct BackupRecord: Codable, Sendable {
    /// This record's format (1).
    public var format: Int
    /// The `depot` that took it (``AssetDepotVersion``).
    public var depotVersion: String
    /// When the copy began.
    public var takenAt: Date
    /// Each app's highest release in the copy (the highest number its pointers name).
    public var apps: [String: Int]
    /// With object storage: the bucket the blobs are in (endpoint, bucket and prefix), the
    /// hold that keeps them there (``BackupHold``'s key) and until when. nil: the blobs are in
    /// the backup's `blobs/`.
    public var objectStore: String? = nil
    public var hold: String? = nil
    public var blobsKeptUntil: Date? = nil

    public static let currentFormat = 1
    /// The record's name in a backup (and in a data folder a backup was copied back into by hand).
    public static let fileName = "backup.json"
}

/// A consistent copy of a data folder into a new folder, safe while `depot serve` runs on it and
/// publishes: `depot backup`.
///
/// Consistency comes from the order, not from stopping writers. Every file of the folder is
/// written once and renamed into place, and a record is written only after what it names is
/// durable: a release before the pointer (`head`, `current`, `channels/*`) that names it, a key
/// before anything signed or encrypted with it, a blob before any release or draft that names
/// it. So the copy takes the pointers of every app first, then the rest of `apps/` (signed
/// copies, drafts, rollouts, statements, settings, reports, trust rules, attested keys; each
/// app's `releases/` after the rest of it), then `keys/`, `tokens.json`
/// and the other files of the root, and `blobs/` last: whatever a copied file names was on disk
/// before it, and is copied after it. Blobs are never removed meanwhile: the copy holds
/// `backup.lock` shared (``BackupLock``), and the origin's sweep and `depot gc` skip their
/// removals while it does. Left out: temporary files (`.tmp-…`), lock files (empty `*.lock`,
/// made again when needed) and `uploads/` (uploads in flight: a client resuming one against a
/// restored origin is answered 404 and starts again). Run by root over the service user's
/// folder, it follows and copies no link inside it (``TreeCopier``): a link, a FIFO, a socket, a
/// device or a hard link to another owner's file is passed over and named.
///
/// Every file copied and every folder is fsynced; the copy is made in `DEST.partial-…` and
/// renamed to `DEST` once whole, with `backup.json` (``BackupRecord``) its last file, so a
/// backup that crashed is never taken for a good one.
public enum DataBackup {
    /// What a backup copied.
    public struct Summary: Sendable {
        public var record: BackupRecord
        /// Files and bytes copied.
        public var files: Int
        public var bytes: Int64
        /// Files (blobs, and release records equal to the previous backup's) and bytes
        /// hard-linked from the previous backup (`--previous`); the records among them.
        public var linked = 0
        public var linkedBytes: Int64 = 0
        public var linkedRecords = 0
        /// What was there and not copied, relative to the data folder, each with why (a link, a
        /// FIFO, a socket, a device, a hard link to another owner's file: the origin makes none).
        public var passedOver: [String]
        /// What the copy names and does not hold (``DataRestore/Findings``): the data folder's
        /// own state was so (a blob missing from the store); a restore of it refuses unless told.
        public var incomplete: [String] = []
    }

    /// Copies the data folder at `data` into the new folder `destination` (which must not exist,
    /// or be empty).
    ///
    /// With `objectStore` (the origin keeps blobs in a bucket), no blob is copied: the backup
    /// leaves a hold in the bucket (``BackupHold``) that keeps, until `keepDays` days on, every
    /// blob its live state names and those of releases published within `retention` before it,
    /// and checks that the bucket holds them now.
    ///
    /// With `previous` (an earlier backup's folder, `--previous`), a blob that backup holds is
    /// hard-linked from it instead of copied (``TreeCopier``): a backup costs what changed since,
    /// and is still a whole folder a restore uses alone (removing the earlier one removes nothing
    /// from it). Blobs only: every other file is copied, so nothing else is shared.
    public static func take(
        data: String, to destination: String, objectStore: S3Location? = nil, keepDays: Int = 35, retention: TimeInterval = 30 * 86_400, previous: String? = nil
    ) throws -> Summary {
        try take(data: data, to: destination, objectStore: objectStore, keepDays: keepDays, retention: retention, previous: previous, afterCopying: nil)
    }

    /// `afterCopying`: called with each app's `releases` once copied (tests: what a publish
    /// right then does to the copy).
    static func take(
        data: String, to destination: String, objectStore: S3Location?, keepDays: Int, retention: TimeInterval, previous: String? = nil, afterCopying: ((String) -> Void)?
    ) throws -> Summary {
        let folder = DataFolder(data)
        guard folder.exists else { throw DepotError.notFound("a data folder at \(data)") }
        let destination = destination.count > 1 && destination.hasSuffix("/") ? String(destination.dropLast()) : destination
        if FileSystem.isDirectory(destination) {
            guard FileSystem.contents(of: destination).isEmpty else {
                throw DepotError.conflict("destination_not_empty", "\(destination) exists and is not empty: a backup goes into a new folder")
            }
        } else if FileSystem.exists(destination) {
            throw DepotError.conflict("destination_not_empty", "\(destination) exists and is not a folder")
        }
        let source = URL(fileURLWithPath: folder.root).standardizedFileURL.path + "/"
        let target = URL(fileURLWithPath: destination).standardizedFileURL.path + "/"
        guard !target.hasPrefix(source), !source.hasPrefix(target) else {
            throw DepotError.badRequest("the backup \(destination) must lie outside the data folder \(data)")
        }
        let lock = try BackupLock.shared(folder)
        defer { try? lock.close() }
        let takenAt = WallClock.now()
        let partial = destination + ".partial-" + Hex.encode(SecureRandom.bytes(6))
        // Inside the folder nothing is followed: root backs up what the service user controls.
        let copier = try TreeCopier(source: folder.root)
        if let previous {
            // A backup `depot backup` made (its record is its last file), outside the data folder.
            guard FileSystem.isDirectory(previous), FileSystem.exists(previous + "/" + BackupRecord.fileName) else {
                throw DepotError.badRequest("--previous \(previous) is not a backup depot backup made (no \(BackupRecord.fileName))")
            }
            let earlier = URL(fileURLWithPath: previous).standardizedFileURL.path + "/"
            guard !earlier.hasPrefix(source), !source.hasPrefix(earlier) else { throw DepotError.badRequest("--previous must lie outside the data folder \(data)") }
            copier.previous = URL(fileURLWithPath: previous).standardizedFileURL.path
        }
        try copier.makeFolder(partial, like: "")
        do {
            // 1. Every app's pointers, before anything they may name.
            try copier.makeFolder(partial + "/apps", like: "apps")
            var pointed = Set<String>()
            let apps = copier.entries("apps").filter { isApp(copier, $0) }
            for app in apps { try copyPointers(app, into: partial, copier: copier, copied: &pointed) }
            // 2. The rest of apps/ (an app made meanwhile: its pointers first, too), each app's
            //    releases/ after the rest of it: rollouts, signed copies and statements name
            //    releases, so a release one of them names was on disk before it was copied.
            for name in copier.entries("apps") {
                guard let kind = copier.kind("apps/" + name), !skipped(name, kind: kind) else { continue }
                let releases = "apps/" + name + "/releases"
                if isApp(copier, name) && !apps.contains(name) { try copyPointers(name, into: partial, copier: copier, copied: &pointed) }
                try copier.copy("apps/" + name, to: partial + "/apps/" + name, excluding: pointed.union([releases]))
                if isApp(copier, name), copier.kind(releases) == .folder {
                    try copier.copy(releases, to: partial + "/" + releases)
                    afterCopying?(releases)
                }
            }
            try FileSystem.syncDirectory(partial + "/apps")
            // 3. Keys, then tokens.json and whatever else the root holds.
            try copier.copy("keys", to: partial + "/keys")
            // Not what a restore into a mount point keeps there (the folder it set aside, its copy, its marker).
            for name in copier.entries("") where !["apps", "blobs", "keys", "uploads", BackupRecord.fileName, "lost+found", WriterLease.idFile, "take-over-bucket"].contains(name) && !DataRestore.keptInPlace(name) {
                guard let kind = copier.kind(name), !skipped(name, kind: kind) else { continue }
                try copier.copy(name, to: partial + "/" + name)
            }
            // 4. Blobs last: every blob a copied release or draft names is on disk by now.
            try copier.copy("blobs", to: partial + "/blobs")
            var record = BackupRecord(
                format: BackupRecord.currentFormat, depotVersion: AssetDepotVersion.current, takenAt: takenAt,
                apps: ReleaseFloor.highestReleases(DataFolder(partial), pointersOnly: true)
            )
            // 5. What the copy names, held (a bucket) and checked: a copy that would restore
            //    into manifests naming missing files is no backup.
            let copy = DataFolder(partial)
            let bucket = try objectStore.map(BucketState.init)
            if let bucket, let objectStore {
                let named = try DataRestore.named(copy, takenAt: takenAt, retention: retention)
                let keepUntil = takenAt.addingTimeInterval(TimeInterval(keepDays) * 86_400)
                record.hold = try bucket.hold(Set(named.live.map(\.blob)).union(named.recent), takenAt: takenAt, keepUntil: keepUntil)
                (record.objectStore, record.blobsKeptUntil) = (DataRestore.describe(objectStore), keepUntil)
            }
            // Not whole: still a backup (a nightly backup that stops for good is worse), said loudly.
            let findings = try DataRestore.check(copy, stored: DataRestore.storedBlobs(copy, bucket: bucket), takenAt: takenAt, retention: retention)
            try StoredJSON.write(record, to: partial + "/" + BackupRecord.fileName, mode: 0o600)
            try copier.applyFolderModes()
            try FileSystem.syncDirectory(partial)
            try FileSystem.durableRename(partial, to: destination)
            return Summary(record: record, files: copier.files, bytes: copier.bytes, linked: copier.linked, linkedBytes: copier.linkedBytes, linkedRecords: copier.linkedRecords, passedOver: copier.passedOver.map { "\($0.path) (\($0.why))" }, incomplete: findings.lines)
        } catch {
            // Nothing half made is left under a name that looks like a backup.
            try? FileManager.default.removeItem(atPath: partial)
            throw error
        }
    }

    /// Names never copied, by what the code itself makes: temporary files (`.tmp-…`) and lock
    /// files — empty plain files whose name ends in `.lock` (`flock` targets, made again when
    /// needed). A folder or a file with content of such a name (an app `com.acme.lock`, a
    /// channel `beta.lock`'s pointer) is copied.
    static func skipped(_ name: String, kind: TreeCopier.Kind) -> Bool {
        if name.hasPrefix(".tmp-") { return true }
        if name.hasSuffix(".lock"), case .file(size: 0) = kind { return true }
        return false
    }

    private static func isApp(_ copier: TreeCopier, _ name: String) -> Bool {
        !name.hasPrefix(".tmp-") && copier.kind("apps/" + name) == .folder
    }

    /// Copies `current`, `head` and `channels/*` of `app`, recording their relative paths in `copied`.
    private static func copyPointers(_ app: String, into partial: String, copier: TreeCopier, copied: inout Set<String>) throws {
        let from = "apps/" + app
        let into = partial + "/" + from
        try copier.makeFolder(into, like: from)
        // Only plain files: anything else there is the next step's to copy or pass over.
        for pointer in ["current", "head"] where isFile(copier.kind(from + "/" + pointer)) {
            if try copier.copyFile(from + "/" + pointer, to: into + "/" + pointer) { copied.insert(from + "/" + pointer) }
        }
        guard copier.kind(from + "/channels") == .folder else { return }
        try copier.makeFolder(into + "/channels", like: from + "/channels")
        for name in copier.entries(from + "/channels") {
            let pointer = from + "/channels/" + name
            guard let kind = copier.kind(pointer), isFile(kind), !skipped(name, kind: kind) else { continue }
            if try copier.copyFile(pointer, to: into + "/channels/" + name) { copied.insert(pointer) }
        }
    }

    private static func isFile(_ kind: TreeCopier.Kind?) -> Bool {
        if case .file? = kind { return true }
        return false
    }
}
