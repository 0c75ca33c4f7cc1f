import DepotClient
import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

extension ObjectStorageTests {
    @Test("A backup with object storage holds its blobs in the bucket past the sweep; the restore checks them there and numbers above the bucket; a drill started as a writer on the live bucket is refused, a restore with --take-over-bucket takes it over at its first start, and a device syncs the restored release byte-identical")
    func backupAndRestoreWithBucket() throws {
        let engine = try S3Engine()
        defer { engine.remove() }
        let store = try Self.bucket(engine, "live")
        let work = TemporaryDirectory("depot-s3-restore")
        defer { work.remove() }
        // One address for production and the restored origin: the releases name it.
        let port = try NginxEdge.freePort()
        let s3 = Self.environment(engine, bucket: "live").merging(["DEPOT_LISTEN": "127.0.0.1:\(port)", "DEPOT_PUBLIC_URL": "http://127.0.0.1:\(port)"]) { $1 }
        let data = work.path + "/data"
        // Sweeps every second, keeping no release for its age: only live state and holds keep blobs.
        let sweeping = s3.merging(["DEPOT_REFRESH_INTERVAL": "1", "DEPOT_RETENTION_DAYS": "0", "DEPOT_GRACE_SECONDS": "1"]) { $1 }
        var writer: ServeProcess? = try ServeProcess(data: data, environment: sweeping)
        defer { if let writer, writer.process.isRunning { writer.process.terminate(); writer.process.waitUntilExit() } }
        let depot = Processes.depotBinary
        let environment = ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": writer!.token]
        let common = ["--server", writer!.url, "--app", "com.example.dev"]
        func publish(_ seed: UInt64) throws -> String {
            let file = try work.file("level-\(seed).bin", size: 200_000, seed: seed)
            let run = try Processes.run(depot, ["publish", file, "--pack", "level", "--release", "--quiet"] + common, environment: environment)
            #expect(run.status == 0, "\(run.stderr)")
            return file
        }
        func blobs() throws -> Set<String> { Set(try store.list(prefix: "blobs/").map { String($0.key.dropFirst(6)) }) }
        let first = try publish(1)
        let held = try blobs()
        #expect(held.count == 1)
        Eventually.wait { (try? store.list(prefix: "apps/com.example.dev/channels/").isEmpty == false) ?? false }

        // Without the bucket's options the backup would not know where the blobs are: it is
        // taken with them (as the unit's environment gives them), and leaves a hold.
        let backup = try Processes.run(depot, ["backup", "--data", data, work.path + "/backup", "--keep-days", "2"], environment: s3)
        #expect(backup.status == 0 && backup.stdout.contains("the bucket keeps the blobs it needs until"), "\(backup.stdout) \(backup.stderr)")
        let holds = try store.list(prefix: "holds/")
        #expect(holds.count == 1, "\(holds.map(\.key))")
        let record = try StoredJSON.read(BackupRecord.self, from: work.path + "/backup/backup.json")
        #expect(record.hold == holds.first?.key && record.objectStore?.contains("bucket live") == true)

        // Two more revisions: the middle one is neither live nor held, and is swept; the first,
        // no longer live either, is held by the backup and stays.
        _ = try publish(2)
        let middle = try #require(try blobs().subtracting(held).first)
        _ = try publish(3)
        #expect(Eventually.wait(every: .milliseconds(200)) { (try? blobs().contains(middle)) == false }, "the sweep ran")
        #expect(try blobs().isSuperset(of: held), "the backup's blob is kept by its hold")
        let releasesInBucket = try #require(try BucketState(client: store.client, bucket: store).highestReleases()["com.example.dev"])

        // A drill: restored into another folder, checked against the bucket.
        let drill = work.path + "/drill"
        let noBucket = try Processes.run(depot, ["restore", "--data", drill, work.path + "/backup"])
        #expect(noBucket.status != 0 && noBucket.stderr.contains("give --storage s3"), "\(noBucket.stderr)")
        #expect(!FileSystem.exists(drill))
        let restored = try Processes.run(depot, ["restore", "--data", drill, work.path + "/backup"], environment: s3)
        #expect(restored.status == 0, "\(restored.stderr)")
        let floor = try #require(ReleaseStore.readNumber(drill + "/release-floor"))
        #expect(floor > releasesInBucket, "the floor \(floor) lies above the bucket's release \(releasesInBucket)")

        // Started as a writer while production runs on the bucket: refused, nothing written.
        // (Production pushes its pointers again at every pass: compared by what they name.)
        let pointersBefore = try BucketState(client: store.client, bucket: store).pointers()
        let refused = try Processes.run(depot, ["serve", "--data", drill], environment: s3.merging(["DEPOT_LISTEN": "127.0.0.1:0"]) { $1 })
        #expect(refused.status != 0 && refused.stderr.contains("a bucket has one writer"), "\(refused.stdout) \(refused.stderr)")
        #expect(try BucketState(client: store.client, bucket: store).pointers() == pointersBefore)
        #expect(try store.list(prefix: "holds/").count == 1, "the refused drill wrote nothing")

        // Production stopped, its lease fresh: the drill is still refused, now for its pointers
        // (the lease is not waited out here: what the bucket is ahead by refuses it as well).
        writer!.process.terminate()
        writer!.process.waitUntilExit()
        writer = nil
        let lease = try #require(try BucketState(client: store.client, bucket: store).lease())
        let expired = WriterLease(writer: lease.writer, host: lease.host, data: lease.data, seen: lease.seen.addingTimeInterval(-86_400), interval: lease.interval)
        let bytes = Array(try StoredJSON.compact.encode(expired))
        try S3Client.check(store.client.call("PUT", key: WriterLease.key, body: .bytes(bytes), payloadSHA256: Hex.encode(SHA256Hasher.hash(bytes))), "ageing the lease")
        let behind = try Processes.run(depot, ["serve", "--data", drill], environment: s3.merging(["DEPOT_LISTEN": "127.0.0.1:0"]) { $1 })
        #expect(behind.status != 0 && behind.stderr.contains("ahead of this data folder"), "\(behind.stderr)")
        #expect(try BucketState(client: store.client, bucket: store).pointers() == pointersBefore)

        // The real restore: production stopped, restored with --take-over-bucket; its first
        // start replaces the bucket's pointers, and later starts need nothing.
        let real = work.path + "/restored"
        let again = try Processes.run(depot, ["restore", "--data", real, work.path + "/backup", "--take-over-bucket"], environment: s3)
        #expect(again.status == 0, "\(again.stderr)")
        let firstStart = try ServeProcess(data: real, environment: s3, bootstrap: false)
        #expect(firstStart.banner.contains("public URL"), "\(firstStart.banner) \(firstStart.errorOutputSoFar())")
        firstStart.process.terminate()
        firstStart.process.waitUntilExit()
        #expect(firstStart.errorOutput().contains("taking over the bucket"))
        #expect(!FileSystem.exists(real + "/take-over-bucket"))
        let takeOver = try ServeProcess(data: real, environment: s3, bootstrap: false)
        defer { takeOver.process.terminate(); takeOver.process.waitUntilExit() }
        #expect(takeOver.banner.contains("public URL"), "\(takeOver.banner) \(takeOver.errorOutputSoFar())")
        let keys = try Processes.run(depot, ["keys", "export", "--data", real, "--app", "com.example.dev"])
        try FileSystem.writeAtomically(Array(keys.stdout.utf8), to: work.path + "/client.json")
        let sync = try Processes.run(depot, ["sync", "--config", work.path + "/client.json", "--dest", work.path + "/device", "--quiet", "--server", takeOver.url, "--app", "com.example.dev"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(try FileSystem.readFile(work.path + "/device/packs/level") == FileSystem.readFile(first))
    }

    @Test("A restore whose blobs the bucket no longer holds is refused, naming them, and changes nothing")
    func restoreRefusedForMissingBlobs() throws {
        let engine = try S3Engine()
        defer { engine.remove() }
        let store = try Self.bucket(engine, "gone")
        let work = TemporaryDirectory("depot-s3-gone")
        defer { work.remove() }
        let s3 = Self.environment(engine, bucket: "gone")
        let data = work.path + "/data"
        let writer = try ServeProcess(data: data, environment: s3)
        let file = try work.file("level.bin", size: 100_000, seed: 7)
        let depot = Processes.depotBinary
        let run = try Processes.run(depot, ["publish", file, "--pack", "level", "--release", "--quiet", "--server", writer.url, "--app", "com.example.dev"],
                                    environment: ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": writer.token])
        #expect(run.status == 0, "\(run.stderr)")
        let backup = try Processes.run(depot, ["backup", "--data", data, work.path + "/backup"], environment: s3)
        #expect(backup.status == 0, "\(backup.stderr)")
        writer.process.terminate()
        writer.process.waitUntilExit()
        // What a sweep that knew no hold would have done (an older depot, a hold expired).
        for blob in store.enumerate() { store.remove(blob.sha256) }
        let target = work.path + "/restored"
        let refused = try Processes.run(depot, ["restore", "--data", target, work.path + "/backup"], environment: s3)
        #expect(refused.status != 0 && refused.stderr.contains("does not hold"), "\(refused.stderr)")
        #expect(refused.stderr.contains("channels/production") || refused.stderr.contains("pack level"), "\(refused.stderr)")
        #expect(!FileSystem.exists(target) && FileSystem.contents(of: work.path).filter { $0.contains("partial-restore") }.isEmpty)
    }
}
