import ArgumentParser
import DepotCore
import DepotServer
import Foundation

struct Backup: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Copy a data folder into a new folder, consistently, while `depot serve` runs on it.",
        discussion: """
            The copy takes every app's release pointers first, then the rest of apps/, keys/ and tokens.json,
            and blobs/ last, so whatever a copied file names is in the copy; the origin removes no blob
            while it runs. Left out: temporary files, lock files and uploads/ (uploads in flight start
            again after a restore). It is made in DEST.partial-… and renamed to DEST once whole, with
            DEST/backup.json written last: a folder without backup.json is not a backup. Run by root, it
            stays root (it only reads the data folder) and DEST belongs to root, modes kept; run by another
            user, DEST is that user's. With --storage s3 the blobs are in the bucket and are not copied:
            the backup leaves a hold there (holds/…json) that keeps every blob it needs for --keep-days
            days (the origin's sweep honours it), and checks they are there now. Give the bucket
            versioning or replication of its own against its loss. Restore with `depot restore`.
            """
    )

    @OptionGroup var data: DataOptions
    @OptionGroup var store: ObjectStoreOptions
    @Option(name: .customLong("keep-days"), help: "With --storage s3: how long the bucket keeps the blobs this backup needs (keep backups no longer than this).")
    var keepDays: Int = 35
    @Option(name: .customLong("previous"), help: "An earlier backup of this folder (on the same volume as DEST): blobs it holds, and release records whose bytes equal its copies, are hard-linked from it instead of copied, so the backup costs what changed since. Each backup stays a whole folder; removing an old one removes nothing from the others.")
    var previous: String?
    @Argument(help: "The new folder to copy into (must not exist, or be empty).") var destination: String

    func validate() throws {
        guard (1...3650).contains(keepDays) else { throw ValidationError("--keep-days takes 1 to 3650") }
    }

    func run() throws {
        let summary = try DataBackup.take(data: data.data, to: destination, objectStore: store.objectStore(), keepDays: keepDays, previous: previous)
        let apps = summary.record.apps.sorted { $0.key < $1.key }.map { "\($0.key) (release \($0.value))" }
        let linked = previous == nil ? "" : " copied, \(summary.linked - summary.linkedRecords) blobs and \(summary.linkedRecords) release records (\(summary.linkedBytes) bytes) linked from \(previous!)"
        print("backed up \(data.data) to \(destination): \(summary.files) files, \(summary.bytes) bytes\(linked); \(apps.isEmpty ? "no apps" : apps.joined(separator: ", "))")
        if let hold = summary.record.hold, let until = summary.record.blobsKeptUntil {
            print("the bucket keeps the blobs it needs until \(DataRestore.Outcome.format(until)) (\(hold))")
        }
        for line in summary.incomplete {
            FileHandle.standardError.write(Data("warning: the data folder names what it does not hold: \(line)\n".utf8))
        }
        if !summary.incomplete.isEmpty && store.storage != "s3" {
            FileHandle.standardError.write(Data("warning: if this origin keeps its blobs in a bucket, give --storage s3 and the bucket's options\n".utf8))
        }
        for what in summary.passedOver {
            FileHandle.standardError.write(Data("warning: not copied from \(data.data): \(what); depot makes none there\n".utf8))
        }
    }
}

struct Restore: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Restore a data folder from a backup, or mark one restored by other means; the origin must be stopped.",
        discussion: """
            With BACKUP (a folder `depot backup` made), copies it into the data folder (which must not exist
            or be empty; --replace moves a folder that is there aside to DIR.before-restore-<time>, never
            deleting it). Without BACKUP, marks the data folder, restored some other way (a volume snapshot,
            cp -a), as restored. Either way release numbers and changed pack revisions continue from the
            Unix time in seconds (above every number the origin issued before, at fewer than one release a
            second on average, on a host whose clock is right): the next publish reaches every device, and
            no release number an edge cached is used again. The copy is checked before it takes the folder's
            place: every pointer and running rollout names a release it holds, and every blob their releases
            and the drafts name is there (with --storage s3, in the bucket; its release numbers count toward
            the floor too). Run by root, the restored files are given to
            --owner, by default the owner of the folder that was there (or, restoring into a new folder,
            of the backup): the user the origin runs as must own them.
            """
    )

    @OptionGroup var data: DataOptions
    @OptionGroup var store: ObjectStoreOptions
    @Argument(help: "A backup made by `depot backup`; omitted: the data folder was restored by other means.") var backup: String?
    @Flag(name: .customLong("replace"), help: "Move a non-empty data folder aside (DIR.before-restore-<time>) instead of refusing.") var replace = false
    @Option(help: ArgumentHelp("Run by root: the user (and its group) the restored files are given to. Default: the owner of the folder at --data, else of the backup.", valueName: "user"))
    var owner: String?
    @Option(help: ArgumentHelp(
        "Release numbers continue from at least N: above a release a signer signed that the backup does not hold (depot release sign names it when it refuses a number the origin issued again).",
        valueName: "N"
    ))
    var floor: Int?
    @Flag(name: .customLong("accept-missing"), help: "Restore a backup whose releases or drafts name blobs it (or the bucket) lacks, naming them: those packs answer 404 until published again. For a disaster with no better backup.")
    var acceptMissing = false
    @Flag(name: .customLong("take-over-bucket"), help: "With --storage s3, for a real restore (the old writer stopped): the restored origin's first start replaces the bucket's channel pointers with its own. Never for a drill on the live bucket.")
    var takeOverBucket = false

    /// Who the restored files belong to when root restores: --owner, else the folder there, else the backup's owner.
    func restoredOwner(backup: String) throws -> (uid: uid_t, gid: gid_t)? {
        guard geteuid() == 0 else {
            if owner != nil { throw CLIError("--owner is for root: files a user restores are that user's") }
            return nil
        }
        if let owner {
            guard let entry = getpwnam(owner) else { throw CLIError("--owner \(owner): no such user") }
            return (entry.pointee.pw_uid, entry.pointee.pw_gid)
        }
        var info = stat()
        guard stat(data.data, &info) == 0 || stat(backup, &info) == 0 else { return nil }
        return (info.st_uid, info.st_gid)
    }

    func run() throws {
        // A restore's floor comes from the time: never from a test's clock file.
        if let clock = WallClock.file { throw CLIError("DEPOT_CLOCK_FILE is set (\(clock)): it is for tests only; unset it to restore") }
        if let floor, !(1..<ReleaseStatement.maximumRelease).contains(floor) {
            throw ValidationError("--floor takes a release number from 1 to 2^52 − 1")
        }
        let outcome: DataRestore.Outcome
        if let backup {
            // Root stays root here: the copy goes beside the data folder, under folders only root
            // can change (checked), or inside a mount point root takes first; it is given to the
            // owner before it takes the folder's place.
            let owner = try restoredOwner(backup: backup)
            if owner?.uid == 0 {
                print("warning: the restored folder belongs to root; an origin that runs as another user cannot read it: give --owner assetdepot (or the user depot serve runs as)")
            }
            outcome = try DataRestore.restore(backup: backup, into: data.data, replace: replace, owner: owner, floor: floor, objectStore: store.objectStore(), takeOverBucket: takeOverBucket, acceptMissing: acceptMissing)
            if let aside = outcome.setAside { print("moved the folder that was at \(data.data) to \(aside)") }
        } else {
            guard owner == nil, !takeOverBucket, !acceptMissing else { throw CLIError("--owner, --take-over-bucket and --accept-missing are for restoring a backup") }
            try DataFolderOwner.adopt(data.data)
            outcome = try DataRestore.markRestored(data: data.data, floor: floor)
        }
        print("\(data.data): \(outcome.description)")
        for warning in outcome.warnings { print("warning: \(warning)") }
    }
}
