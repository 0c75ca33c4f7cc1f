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
            DEST/backup.json written last: a folder without backup.json is not a backup. Run it as the
            user the origin runs as (sudo -u assetdepot depot backup …). With --storage s3 the blobs are
            in the bucket and are not copied: give the bucket versioning or replication of its own.
            Restore with `depot restore`.
            """
    )

    @OptionGroup var data: DataOptions
    @Argument(help: "The new folder to copy into (must not exist, or be empty).") var destination: String

    func run() throws {
        let summary = try DataBackup.take(data: data.data, to: destination)
        let apps = summary.record.apps.sorted { $0.key < $1.key }.map { "\($0.key) (release \($0.value))" }
        print("backed up \(data.data) to \(destination): \(summary.files) files, \(summary.bytes) bytes; \(apps.isEmpty ? "no apps" : apps.joined(separator: ", "))")
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
            no release number an edge cached is used again. Files are made as the user who runs it: run it
            as the user the origin runs as (sudo -u assetdepot depot restore …).
            """
    )

    @OptionGroup var data: DataOptions
    @Argument(help: "A backup made by `depot backup`; omitted: the data folder was restored by other means.") var backup: String?
    @Flag(name: .customLong("replace"), help: "Move a non-empty data folder aside (DIR.before-restore-<time>) instead of refusing.") var replace = false

    func run() throws {
        let outcome: DataRestore.Outcome
        if let backup {
            outcome = try DataRestore.restore(backup: backup, into: data.data, replace: replace)
            if let aside = outcome.setAside { print("moved the folder that was at \(data.data) to \(aside)") }
        } else {
            outcome = try DataRestore.markRestored(data: data.data)
        }
        print("\(data.data): \(outcome.description)")
    }
}
