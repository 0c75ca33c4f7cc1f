import ArgumentParser
import DepotServer
import Foundation

struct GC: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gc",
        abstract: "Remove blobs that no live release, recent release or draft needs, and expired resumable uploads, from a data folder no server is using.",
        discussion: "A running `depot serve` sweeps by itself every --refresh-interval; this command refuses to run beside it. While `depot backup` copies the folder no blob is removed (the pass is skipped and says so). Blobs of releases published within --retention-days stay, so those releases stay restorable by rollback."
    )

    @OptionGroup var data: DataOptions
    @Option(name: .customLong("retention-days"), help: "Keep the blobs of releases published within this many days.") var retentionDays: Int = 30
    @Option(name: .customLong("grace-minutes"), help: "Never remove a blob younger than this.") var graceMinutes: Int = 60
    @Flag(name: .customLong("dry-run"), help: "List what would go, remove nothing.") var dryRun = false

    func validate() throws {
        guard retentionDays >= 0, graceMinutes >= 0 else { throw ValidationError("--retention-days and --grace-minutes must not be negative") }
    }

    func run() throws {
        let maintenance = try OfflineMaintenance(dataPath: data.data)
        do {
            let swept = try maintenance.collectGarbage(
                retention: TimeInterval(retentionDays) * 86_400, grace: TimeInterval(graceMinutes) * 60, dryRun: dryRun
            )
            for blob in swept.blobs { print(blob) }
            print("\(dryRun ? "would remove" : "removed") \(swept.blobs.count) blobs, \(swept.bytes) bytes")
        } catch let error as DepotError where error.code == "backup_running" {
            // The pass is skipped, not failed: the next one removes them.
            print("removed no blobs: \(error.message)")
        }
        if !dryRun {
            let leftovers = maintenance.removeLeftovers()
            if leftovers > 0 { print("removed \(leftovers) files that interrupted writes left") }
            let expired = maintenance.removeExpiredUploads()
            if expired > 0 { print("removed \(expired) expired resumable uploads") }
        }
    }
}
