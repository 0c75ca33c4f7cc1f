import DepotCore
import Foundation

/// Restores a data folder from a backup (`depot restore`), or marks one restored by other means
/// (a volume snapshot, `cp -a`), so that the origin never reuses a release number or a pack
/// revision that devices and edges saw before the restore: it raises the folder's
/// ``ReleaseFloor``. A folder holding a backup's `backup.json` (a backup copied back by hand) is
/// a restored folder too: the origin marks it at start (``adoptIfRestored(_:)``).
public enum DataRestore {
    /// What a restore did.
    public struct Outcome: Sendable {
        /// When the backup restored was taken (nil: not known, a folder restored by other means).
        public var takenAt: Date?
        /// The lowest release number the origin issues next.
        public var floor: Int
        /// Where the folder that was there before went (`--replace`).
        public var setAside: String?
        /// A release number the folder set aside shows above the Unix time plus a day (no honest
        /// origin issues one: an attacker's), not taken into the floor.
        public var notTaken: Int?
        /// What the check found and let pass (blobs of recent releases the store lacks; a
        /// bucket's release numbers it did not take).
        public var warnings: [String] = []

        /// One line for the operator (and the origin's log).
        public var description: String {
            let when = takenAt.map { "restored from a backup taken \(Self.format($0))" } ?? "marked as restored"
            let note = notTaken.map { shown in
                let hint = shown < ReleaseStatement.maximumRelease - 1 ? "give --floor \(shown + 1) if devices took it" : "beyond any floor a restore sets"
                return "; the folder set aside shows release \(shown), above the Unix time plus a day, which no honest origin issues: not taken (\(hint))"
            } ?? ""
            return "\(when): release numbers continue from \(floor)" + note
        }

        public static func format(_ date: Date) -> String {
            let formatter = ISO8601DateFormatter()
            return formatter.string(from: date)
        }
    }

    /// Reads a backup's record; refuses a folder that is not a whole backup, or one a newer
    /// `depot` wrote in a format this one does not know.
    public static func record(of backup: String) throws -> BackupRecord {
        let path = backup + "/" + BackupRecord.fileName
        guard FileSystem.exists(path) else {
            throw DepotError.badRequest("\(backup) is not a finished backup: it has no \(BackupRecord.fileName) (every backup `depot backup` finished has one; a DEST.partial-… folder is one that did not finish). A copy made another way: put it in place and run depot restore --data DIR without a backup")
        }
        // The folder's own format first (a backup of a newer depot's folder), then the record's.
        try DataFolder(backup).checkFormat(record: false)
        let record = try StoredJSON.read(BackupRecord.self, from: path)
        guard record.format <= BackupRecord.currentFormat else {
            throw DepotError.conflict("backup_format", "\(backup) is a backup of format \(record.format), taken by depot \(record.depotVersion); this depot (\(AssetDepotVersion.current)) knows format \(BackupRecord.currentFormat): restore it with that version or newer")
        }
        return record
    }

    /// Copies the backup at `backup` into the data folder at `data`, with no origin running on
    /// it. `data` must not exist or be empty, unless `replace`: then the folder there is moved
    /// aside to `DATA.before-restore-<time>` (never deleted). The copy is made beside `data` and
    /// renamed into place whole, its floor already set.
    ///
    /// `owner`: who the copy is given to (every file and folder, before it takes the folder's
    /// place), when root restores for the user the origin runs as.
    ///
    /// With `objectStore`, the blobs are in that bucket: the restore checks there that every
    /// blob the backup's live state names is held (``check(_:stored:takenAt:retention:)``), and
    /// its floor goes above every release number the bucket holds. A backup taken with a bucket
    /// is refused without one.
    ///
    /// `takeOverBucket` (with `objectStore`): the restored writer's first start replaces the
    /// bucket's channel pointers with its own (a real restore; never a drill on the live bucket).
    ///
    /// `acceptMissing`: a copy that is not whole is restored all the same, what it lacks named
    /// in the outcome's warnings (a disaster restore with nothing better).
    public static func restore(backup: String, into data: String, replace: Bool, owner: (uid: uid_t, gid: gid_t)? = nil, floor asked: Int? = nil, objectStore: S3Location? = nil, takeOverBucket: Bool = false, acceptMissing: Bool = false, now: Date = WallClock.now()) throws -> Outcome {
        let record = try record(of: backup)
        if let named = record.objectStore, objectStore == nil {
            throw DepotError.badRequest("\(backup) is a backup of an origin whose blobs are in a bucket (\(named)): give --storage s3 and the bucket's options, so that the restore checks the blobs it names are there; nothing was changed")
        }
        if takeOverBucket && objectStore == nil {
            throw DepotError.badRequest("--take-over-bucket is for a restore with the bucket's options (--storage s3); nothing was changed")
        }
        let bucket = try objectStore.map(BucketState.init)
        var warnings: [String] = []
        let given = data.count > 1 && data.hasSuffix("/") ? String(data.dropLast()) : data
        // A data folder that is a link (to a volume's folder): restored where it points, the
        // link kept. One that is a mount point (a dedicated volume): restored inside it, since
        // a mount point cannot be renamed and the copy belongs on that volume.
        let data = Self.resolvedLink(given)
        // Root works by path beside the folder (or inside a mount point): every folder above it
        // must be root's, so that the service user can swap nothing on the way.
        if geteuid() == 0 {
            // The path given (a link there must be root's) and where it leads.
            try Self.checkAncestors(of: given)
            var link = stat()
            if lstat(given, &link) == 0, (link.st_mode & S_IFMT) == S_IFLNK, link.st_uid != 0 {
                throw DepotError.conflict("data_folder_parent_unsafe", "\(given) is a link another user owns: root restores only through links root made; nothing was changed")
            }
            if data != given { try Self.checkAncestors(of: data) }
        }
        let existing = FileSystem.isDirectory(data)
        let inside = existing && Self.isMountPoint(data)
        let empty = !existing || FileSystem.contents(of: data).allSatisfy { Self.keptInPlace($0) || $0 == "lost+found" }
        if !empty && !replace {
            throw DepotError.conflict("data_folder_not_empty", "\(given) is not empty: give --replace to move it aside to \(inside ? data + "/.before-restore-…" : data + ".before-restore-…") (it is kept), or restore into a new folder")
        }
        // Held until the swap: no origin starts on the old folder meanwhile.
        let lock = existing ? try DataFolder(data).lockExclusively() : nil
        defer { try? lock?.close() }
        // Inside a mount point the copy is made in the service user's folder: root takes it
        // first (root's, 0700), so that no one else can rename or link anything in it while
        // root works there by path; the copy's owner and mode are its at the end, the folder's
        // own again if the restore fails.
        let taken = inside && geteuid() == 0 ? try Self.takeMountPoint(data) : nil
        var swapped = false
        defer { if let taken, !swapped { Self.giveBack(taken) } }
        let partial = (inside ? data + "/.partial-restore-" : data + ".partial-restore-") + Hex.encode(SecureRandom.bytes(6))
        // Every number the folder set aside shows (releases published since the backup, a floor
        // a restore already raised), read as root may read the service user's files.
        let shown = existing && !empty ? try TreeCopier(source: data).highestRelease() : 0
        let copier = try TreeCopier(source: backup)
        do {
            try copier.copy("", to: partial)
            FileSystem.remove(partial + "/" + BackupRecord.fileName)
            // Above what the folder set aside shows, and at least the backup's own time (a clock
            // set back below it would otherwise number below releases issued after it).
            let ceiling = Int(now.timeIntervalSince1970) + 86_400
            let findings = try check(DataFolder(partial), stored: storedBlobs(DataFolder(partial), bucket: bucket), takenAt: record.takenAt)
            guard findings.whole || acceptMissing else { throw findings.refusal(where: bucket == nil ? "the backup's blobs/" : "the bucket") }
            warnings += findings.lines
            // The bucket's numbers too: a writer's mirror never uploads a number the bucket holds.
            var inBucket = 0
            if let bucket {
                let highest = try bucket.highestReleases()
                inBucket = highest.values.filter { $0 < ceiling }.max() ?? 0
                if let inflated = highest.values.filter({ $0 >= ceiling }).max() {
                    warnings.append("the bucket holds release \(inflated), above the Unix time plus a day, which no honest origin issues: not taken into the floor")
                }
            }
            let evidence = max(asked ?? 0, shown < ceiling ? shown + 1 : 0, Self.afterBackup(record.takenAt, ceiling: ceiling), inBucket + 1)
            let floor = try ReleaseFloor.raiseForRestore(DataFolder(partial), atLeast: evidence, now: now)
            if takeOverBucket {
                try FileSystem.writeAtomically(Array("the first writer start on this folder replaces the bucket's channel pointers (depot restore --take-over-bucket)\n".utf8), to: takeOverPath(DataFolder(partial)))
            }
            // Root's alone (0700) until here; the folders get their modes, the top last of all.
            let top = try copier.applyFolderModes(keepingTop: true)
            if let owner {
                try giveAway(partial, to: owner, mode: top)
            } else {
                guard chmod(partial, top) == 0 else { throw SystemError(call: "chmod", errno: errno, path: partial) }
            }
            try FileSystem.syncDirectory(partial)
            var aside: String?
            if inside {
                aside = try swapInside(data, partial: partial, setAside: !empty, now: now)
                swapped = true
            } else if existing && !empty {
                let path = try asidePath(data + ".before-restore-", now: now)
                try FileSystem.durableRename(data, to: path)
                aside = path
            } else if existing {
                FileSystem.remove(data + "/serve.lock")
                FileSystem.removeDirectory(data)
            }
            if !inside { try FileSystem.durableRename(partial, to: data) }
            return Outcome(takenAt: record.takenAt, floor: floor, setAside: aside, notTaken: shown < ceiling ? nil : shown, warnings: warnings)
        } catch {
            try? FileManager.default.removeItem(atPath: partial)
            throw error
        }
    }

    /// Where a restore sets the old folder aside: `prefix` and the time (UTC), with `-2`, `-3`, …
    /// for a second restore within the second, so that no folder set aside is replaced.
    static func asidePath(_ prefix: String, now: Date) throws -> String {
        let stamp = DateFormatter()
        stamp.locale = Locale(identifier: "en_US_POSIX")
        stamp.timeZone = TimeZone(identifier: "UTC")
        stamp.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        let base = prefix + stamp.string(from: now)
        guard let path = ([base] + (2...99).map { base + "-\($0)" }).first(where: { !FileSystem.exists($0) }) else {
            throw DepotError.conflict("data_folder_busy", "\(base) and 98 more like it exist already: move them away first")
        }
        return path
    }

    /// A bucket as a backup's record names it: endpoint, bucket and prefix (no credentials).
    static func describe(_ location: S3Location) -> String {
        location.endpoint.absoluteString + " bucket " + location.bucket + (location.prefix.isEmpty ? "" : " prefix " + location.prefix)
    }

    /// Gives every file and folder under `root` (itself included) to `owner`, links not followed,
    /// deepest first and `root` last, which then gets `mode`: until then `root` is root's with mode 0700, so no other user
    /// can reach inside it and swap a folder for a link while the walk runs (the race of
    /// `chown -R` run by root on a tree another user can already write).
    static func giveAway(_ root: String, to owner: (uid: uid_t, gid: gid_t), mode: mode_t) throws {
        var top = stat()
        guard lstat(root, &top) == 0, (top.st_mode & S_IFMT) == S_IFDIR else { throw SystemError(call: "lstat", errno: errno, path: root) }
        guard chmod(root, 0o700) == 0 else { throw SystemError(call: "chmod", errno: errno, path: root) }
        func give(_ path: String) throws {
            var info = stat()
            guard lstat(path, &info) == 0 else { throw SystemError(call: "lstat", errno: errno, path: path) }
            if (info.st_mode & S_IFMT) == S_IFDIR {
                for name in FileSystem.contents(of: path) { try give(path + "/" + name) }
            }
            guard lchown(path, owner.uid, owner.gid) == 0 else { throw SystemError(call: "lchown", errno: errno, path: path) }
        }
        for name in FileSystem.contents(of: root) { try give(root + "/" + name) }
        guard lchown(root, owner.uid, owner.gid) == 0 else { throw SystemError(call: "lchown", errno: errno, path: root) }
        guard chmod(root, mode & 0o777) == 0 else { throw SystemError(call: "chmod", errno: errno, path: root) }
    }

    /// Marks the data folder at `data`, restored by other means (a volume snapshot, a copy), as
    /// restored: raises its floor, with no origin running on it.
    public static func markRestored(data: String, floor asked: Int? = nil, now: Date = WallClock.now()) throws -> Outcome {
        let folder = DataFolder(data)
        guard folder.exists else { throw DepotError.notFound("a data folder at \(data)") }
        let lock = try folder.lockExclusively()
        defer { try? lock.close() }
        return try mark(folder, atLeast: asked, now: now)
    }

    /// At the origin's start (holding the folder's lock): a folder with a backup's
    /// `backup.json` in it was restored by copying a backup back by hand. Its floor is raised
    /// (durably) before the record is removed; a crash between leaves the record, and the next
    /// start raises the floor once more, which is harmless. nil when there is no record.
    static func adoptIfRestored(_ folder: DataFolder, now: Date = WallClock.now()) throws -> Outcome? {
        guard FileSystem.exists(folder.root + "/" + BackupRecord.fileName) else { return nil }
        return try mark(folder, now: now)
    }

    /// One above the second a backup was taken (a clock set back below it would otherwise number
    /// below releases issued after it), at most `ceiling` (the Unix time plus a day: what a
    /// signer takes without confirming); 0 for a time that is no time.
    static func afterBackup(_ takenAt: Date, ceiling: Int) -> Int {
        let seconds = takenAt.timeIntervalSince1970
        guard seconds.isFinite, seconds > 0, seconds < Double(ceiling) else { return seconds.isFinite && seconds >= Double(ceiling) ? ceiling : 0 }
        return min(Int(seconds) + 1, ceiling)
    }

    private static func mark(_ folder: DataFolder, atLeast asked: Int? = nil, now: Date) throws -> Outcome {
        let recordPath = folder.root + "/" + BackupRecord.fileName
        let takenAt = FileSystem.exists(recordPath) ? try StoredJSON.read(BackupRecord.self, from: recordPath).takenAt : nil
        let ceiling = Int(now.timeIntervalSince1970) + 86_400
        let floor = try ReleaseFloor.raiseForRestore(folder, atLeast: max(asked ?? 0, takenAt.map { afterBackup($0, ceiling: ceiling) } ?? 0), now: now)
        if takenAt != nil {
            FileSystem.remove(recordPath)
            try FileSystem.syncDirectory(folder.root)
        }
        return Outcome(takenAt: takenAt, floor: floor, setAside: nil)
    }
}
