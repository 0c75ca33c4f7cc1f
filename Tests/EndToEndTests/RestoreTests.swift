import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// Backups and restores that devices survive (issue 51): `depot backup` while the real origin
/// serves and publishes, `depot restore` (and a backup copied back by hand), then one publish that
/// reaches a device which had accepted newer releases than the backup held; no
/// `/releases/{n}` URL (immutable, cached by edges for a year) ever answers other bytes.
@Suite("End to end: backups and restores that devices survive")
struct RestoreTests {
    static let dev = "com.example.dev"
    static let managed = "com.example.managed"

    /// One origin's work folder, its CLI and its device.
    final class Lab {
        let work = TemporaryDirectory("depot-restore")
        var data: String { work.path + "/data" }
        let depot = Processes.depotBinary
        var server: ServeProcess
        let token: String
        var managedToken = ""
        var seed: UInt64 = 100

        init(environment: [String: String] = [:]) throws {
            server = try ServeProcess(data: work.path + "/data", environment: environment)
            token = server.token
        }

        func run(_ arguments: [String], environment: [String: String] = [:]) throws -> Processes.Result {
            try Processes.run(depot, arguments, environment: environment)
        }

        /// Publishes new bytes as the dev app's pack `content` and releases them; returns the file.
        @discardableResult
        func publish() throws -> String {
            seed += 1
            let file = try work.file("content-\(seed)", size: 30_000 + Int(seed), seed: seed)
            let run = try run(["publish", file, "--server", server.url, "--app", RestoreTests.dev, "--pack", "content", "--token", token, "--release"])
            #expect(run.status == 0, "\(run.stderr)")
            return file
        }

        /// A managed app with an admin token (before any backup: the backup holds both).
        func createManagedApp() throws {
            let create = try run(["apps", "create", RestoreTests.managed, "--data", data, "--mode", "managed", "--app-group", "group.com.example.managed"])
            #expect(create.status == 0, "\(create.stderr)")
            let tokens = try run(["tokens", "create", "--data", data, "--app", RestoreTests.managed, "--role", "admin"])
            managedToken = try #require(tokens.stdout.split(separator: "\n").last.map(String.init))
        }

        /// Publishes an Apple Archive of `byte`s as the managed app's essential pack; returns the archive.
        @discardableResult
        func publishManaged(_ byte: UInt8) throws -> String {
            let archive = work.path + "/essentials-\(byte).aar"
            try FileSystem.writeAtomically(ArchiveFixture.uncompressed([(path: "a.bin", bytes: Array(repeating: byte, count: 3000 + Int(byte)))]), to: archive)
            let manifest = work.path + "/essentials.json"
            let json = #"{"assetPackID":"essentials","downloadPolicy":{"essential":{"installationEventTypes":["firstInstallation","subsequentUpdate"]}},"fileSelectors":[{"directory":"x"}],"platforms":["iOS"]}"#
            try FileSystem.writeAtomically(Array(json.utf8), to: manifest)
            let run = try run(
                ["publish", archive, "--pack-manifest", manifest, "--release", "--quiet", "--server", server.url, "--app", RestoreTests.managed],
                environment: ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": managedToken]
            )
            #expect(run.status == 0, "\(run.stderr)")
            return archive
        }

        /// The dev app's device (`depot sync`, one state folder throughout).
        func sync() throws -> Processes.Result {
            if !FileSystem.exists(work.path + "/client.json") {
                let keys = try run(["keys", "export", "--data", data, "--app", RestoreTests.dev])
                try FileSystem.writeAtomically(Array(keys.stdout.utf8), to: work.path + "/client.json")
            }
            return try run(["sync", "--server", server.url, "--app", RestoreTests.dev, "--config", work.path + "/client.json", "--dest", work.path + "/device", "--quiet"])
        }

        /// The managed app's device (the AssetPackManager simulator).
        func syncManaged(_ event: String) throws -> String {
            let run = try run(
                ["sync", "--managed", "--event", event, "--dest", work.path + "/managed-device", "--allow-http", "--quiet", "--server", server.url, "--app", RestoreTests.managed],
                environment: ["XDG_CACHE_HOME": work.path + "/cache"]
            )
            #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
            return run.stdout
        }

        func get(_ path: String) throws -> RawHTTP.Response {
            try #require(try RawHTTP.send(port: UInt16(server.port)!, "GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
        }

        /// The release numbers `GET …/releases` lists.
        func releases(_ app: String) throws -> [Int] {
            let answer = try get("/v1/apps/\(app)/releases?limit=500")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any])
            return (json["releases"] as? [[String: Any]] ?? []).compactMap { $0["version"] as? Int }
        }

        /// The managed pack's version in the download manifest.
        func managedRevision() throws -> Int {
            let answer = try get("/v1/apps/\(RestoreTests.managed)/download-manifest")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any])
            let packs = try #require(json["assetPacks"] as? [[String: Any]])
            return try #require(packs.first { $0["id"] as? String == "essentials" }?["version"] as? Int)
        }

        /// Every `/releases/{n}` URL of `apps` as it answers now: status, bytes, Cache-Control.
        func releaseURLs(_ apps: [String]) throws -> [String: RawHTTP.Response] {
            var out: [String: RawHTTP.Response] = [:]
            for app in apps {
                for version in try releases(app) { out["/v1/apps/\(app)/releases/\(version)"] = try get("/v1/apps/\(app)/releases/\(version)") }
            }
            return out
        }

        func stop() {
            server.process.terminate()
            server.process.waitUntilExit()
        }

        func start() throws {
            server = try ServeProcess(data: data, environment: [:], bootstrap: false)
        }

        deinit {
            if server.process.isRunning { stop() }
            work.remove()
        }
    }

    /// Each URL fetched before answers the same bytes now, or 404.
    static func checkUnchanged(_ before: [String: RawHTTP.Response], lab: Lab) throws {
        for (path, old) in before {
            #expect(old.status == 200 && old.header("Cache-Control")?.contains("immutable") == true, "\(path): \(old.status) \(old.header("Cache-Control") ?? "")")
            let now = try lab.get(path)
            #expect(now.status == 404 || (now.status == 200 && now.body == old.body), "\(path) was answered immutable before the restore and now answers \(now.status) with other bytes")
        }
    }

    @Test("Backup while the origin serves and a publish runs; restore; one publish reaches the device that had newer releases; no immutable URL changes; the managed pack's version rises")
    func backupRestorePublishOnce() throws {
        let lab = try Lab()
        try lab.createManagedApp()
        try lab.publish()
        try lab.publishManaged(1)
        let backup = lab.work.path + "/backup"

        // Where the copy enters the dev app's releases folder (after every pointer): learned from a
        // traced run, then the backup is stopped there while a publish runs.
        let trace = lab.work.path + "/trace"
        let traced = try lab.run(["backup", "--data", lab.data, lab.work.path + "/traced"], environment: ["DEPOT_CRASH_TRACE": trace])
        #expect(traced.status == 0, "\(traced.stderr)")
        let mkdirs = CrashSeam.trace(trace).filter { $0.split(separator: " ").dropFirst().first == "mkdir" }
        let stop = try #require(mkdirs.firstIndex { $0.hasSuffix("/apps/\(Self.dev)/releases") }) + 1
        let paused = try AdminPairTests.Started(lab.depot, ["backup", "--data", lab.data, backup], environment: ["DEPOT_CRASH_AT": "mkdir:\(stop)", "DEPOT_CRASH_STOP": "1"])
        paused.waitUntilStoppedOrEnded()
        try lab.publish()  // release 2, published while the backup copies
        paused.continue()
        let done = paused.finish()
        #expect(done.status == 0 && done.text.contains("backed up"), "\(done.text)")
        let record = try JSONSerialization.jsonObject(with: Data(FileSystem.readFile(backup + "/backup.json"))) as? [String: Any]
        #expect((record?["apps"] as? [String: Int])?[Self.dev] == 1, "the pointers were copied before the publish: \(String(describing: record))")
        // The publish ran inside the copy: its release file came along (above `head`: start-up
        // removes it), and so did its blob.
        #expect(FileSystem.exists(backup + "/apps/\(Self.dev)/releases/000002.json"))
        #expect(record?["format"] as? Int == 1 && record?["depotVersion"] as? String == AssetDepotVersion.current)
        #expect(TreeMode.of(backup + "/keys") == 0o700 && TreeMode.of(backup + "/keys/manifest-signing.json") == 0o600)
        #expect(!FileSystem.exists(backup + "/serve.lock") && !FileSystem.exists(backup + "/uploads"))

        // Releases 3 and 4 after the backup; devices take 4 (and the managed pack's version 3).
        try lab.publish()
        let fourth = try lab.publish()
        try lab.publishManaged(2)
        try lab.publishManaged(3)
        let synced = try lab.sync()
        #expect(synced.status == 0, "\(synced.stderr)")
        #expect(try FileSystem.readFile(lab.work.path + "/device/packs/content") == FileSystem.readFile(fourth))
        #expect(try lab.releases(Self.dev) == [1, 2, 3, 4])
        #expect(try lab.syncManaged("install").contains("downloaded essentials version 3 ("))
        let seenRevision = try lab.managedRevision()
        let before = try lab.releaseURLs([Self.dev, Self.managed])
        let numbersBefore = Set(try lab.releases(Self.dev))

        lab.stop()
        let restored = try lab.run(["restore", "--data", lab.data, "--replace", backup])
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(restored.stdout.contains("restored from a backup taken") && restored.stdout.contains("moved the folder that was at"), "\(restored.stdout)")
        let floor = try #require(restored.stdout.split(separator: " ").last.flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
        #expect(FileSystem.contents(of: lab.work.path).contains { $0.hasPrefix("data.before-restore-") }, "the folder replaced is kept")
        try lab.start()

        // One publish: above every number devices and edges saw.
        let fifth = try lab.publish()
        let after = try lab.releases(Self.dev)
        let new = Set(after).subtracting([1])
        #expect(new == [floor], "the publish after the restore is release \(floor): \(after)")
        #expect(new.isDisjoint(with: numbersBefore) && new.allSatisfy { $0 > numbersBefore.max()! })
        let resynced = try lab.sync()
        #expect(resynced.status == 0, "the device installs the release after the restore: \(resynced.stdout)\(resynced.stderr)")
        #expect(try FileSystem.readFile(lab.work.path + "/device/packs/content") == FileSystem.readFile(fifth))
        let newRelease = try lab.get("/v1/apps/\(Self.dev)/releases/\(floor)")
        #expect(newRelease.status == 200 && newRelease.header("Cache-Control")?.contains("immutable") == true, "release \(floor) is served: \(newRelease.status)")
        let page = try lab.get("/v1/apps/\(Self.dev)/releases?before=\(floor + 1)&limit=1")
        #expect(page.status == 200 && page.bodyText.contains("\"version\":\(floor)"), "\(page.bodyText)")

        // The managed pack: new bytes get a version above every one devices saw.
        let archive = try lab.publishManaged(4)
        #expect(try lab.managedRevision() > seenRevision)
        #expect(try lab.syncManaged("periodic").contains("downloaded essentials version \(try lab.managedRevision()) ("))
        #expect(try FileSystem.readFile(lab.work.path + "/managed-device/packs/essentials.aar") == FileSystem.readFile(archive))

        try Self.checkUnchanged(before, lab: lab)
    }

    @Test("A backup copied back by hand (cp -a) is a restored folder: the origin raises the floor at start; a second restore from the same backup later still gets new numbers")
    func handCopiedBackupAndSecondRestore() throws {
        let lab = try Lab()
        try lab.publish()
        let backup = lab.work.path + "/backup"
        let taken = try lab.run(["backup", "--data", lab.data, backup])
        #expect(taken.status == 0, "\(taken.stderr)")
        let refused = try lab.run(["backup", "--data", lab.data, backup])
        #expect(refused.status != 0 && refused.stderr.contains("not empty"), "\(refused.stderr)")
        try lab.publish()
        try lab.publish()
        #expect(try lab.sync().status == 0)
        let before = try lab.releaseURLs([Self.dev])

        // By hand, as an operator following a plain file copy.
        lab.stop()
        #expect(try Processes.run("/bin/rm", ["-rf", lab.data]).status == 0)
        #expect(try Processes.run("/bin/cp", ["-a", backup, lab.data]).status == 0)
        try lab.start()
        let marker = "release numbers continue from"
        let said = lab.server.banner.contains(marker) ? lab.server.banner : lab.server.banner + lab.server.waitForOutput(marker)
        #expect(said.contains("restored from a backup taken"), "\(said)")
        #expect(!FileSystem.exists(lab.data + "/backup.json") && FileSystem.exists(lab.data + "/release-floor"))
        let first = try lab.publish()
        let firstNumber = try #require(try lab.releases(Self.dev).last)
        #expect(firstNumber > 3)
        let synced = try lab.sync()
        #expect(synced.status == 0, "\(synced.stdout)\(synced.stderr)")
        #expect(try FileSystem.readFile(lab.work.path + "/device/packs/content") == FileSystem.readFile(first))
        try Self.checkUnchanged(before, lab: lab)
        let between = try lab.releaseURLs([Self.dev])

        // Later (the clock past every number issued: fewer than one release a second), the same
        // backup again, through depot restore.
        #expect(Eventually.wait { Int(Date().timeIntervalSince1970) > firstNumber })
        lab.stop()
        let again = try lab.run(["restore", "--data", lab.data, "--replace", backup])
        #expect(again.status == 0, "\(again.stderr)")
        try lab.start()
        let second = try lab.publish()
        let secondNumber = try #require(try lab.releases(Self.dev).last)
        #expect(secondNumber > firstNumber)
        let resynced = try lab.sync()
        #expect(resynced.status == 0, "\(resynced.stdout)\(resynced.stderr)")
        #expect(try FileSystem.readFile(lab.work.path + "/device/packs/content") == FileSystem.readFile(second))
        try Self.checkUnchanged(before.merging(between) { a, _ in a }, lab: lab)

        // Marking a folder restored by other means raises the floor again, above the last.
        lab.stop()
        let marked = try lab.run(["restore", "--data", lab.data])
        #expect(marked.status == 0 && marked.stdout.contains("marked as restored"), "\(marked.stdout)\(marked.stderr)")
        let floor = try #require(marked.stdout.split(separator: " ").last.flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
        #expect(floor > secondNumber)
    }

    @Test("A backup killed midway or at its last step leaves no DEST; what it left is refused by depot restore; the next backup succeeds")
    func crashedBackup() throws {
        let lab = try Lab()
        try lab.publish()
        let backup = lab.work.path + "/backup"
        let trace = lab.work.path + "/trace"
        #expect(try lab.run(["backup", "--data", lab.data, backup], environment: ["DEPOT_CRASH_TRACE": trace]).status == 0)
        #expect(try Processes.run("/bin/rm", ["-rf", backup]).status == 0)
        // Points named by their call's ordinal (a lock file made once shifts the overall count).
        let points = CrashSeam.trace(trace)
        let renames = points.filter { $0.split(separator: " ").dropFirst().first == "rename" }
        let fsyncs = points.filter { $0.split(separator: " ").dropFirst().first == "fsync" }
        #expect(renames.last?.hasSuffix(" " + backup) == true, "the backup's last rename names it: \(renames)")
        for point in ["fsync:\(fsyncs.count / 2)", "rename:\(renames.count)"] {
            let killed = try lab.run(["backup", "--data", lab.data, backup], environment: ["DEPOT_CRASH_AT": point])
            #expect(killed.status != 0)
            #expect(!FileSystem.exists(backup), "crash point \(point) of \(points.count): \(backup) exists")
            let partials = FileSystem.contents(of: lab.work.path).filter { $0.hasPrefix("backup.partial-") }
            #expect(partials.count == 1)
            for partial in partials {
                let path = lab.work.path + "/" + partial
                if !FileSystem.exists(path + "/backup.json") {
                    let refused = try lab.run(["restore", "--data", lab.work.path + "/elsewhere", path])
                    #expect(refused.status != 0 && refused.stderr.contains("not a finished backup"), "\(refused.stderr)")
                    #expect(!FileSystem.exists(lab.work.path + "/elsewhere"))
                }
                #expect(try Processes.run("/bin/rm", ["-rf", path]).status == 0)
            }
        }
        let good = try lab.run(["backup", "--data", lab.data, backup])
        #expect(good.status == 0 && FileSystem.exists(backup + "/backup.json"), "\(good.stderr)")
    }

    @Test("Blobs are not removed while a backup holds backup.lock: the origin's sweep and depot gc skip their pass and say so")
    func sweepSkipsDuringBackup() throws {
        let lab = try Lab(environment: ["DEPOT_REFRESH_INTERVAL": "1", "DEPOT_RETENTION_DAYS": "0", "DEPOT_GRACE_SECONDS": "1"])
        // Hold the lock as depot backup does, shared.
        let lock = open(lab.data + "/backup.lock", O_RDONLY | O_CREAT, 0o600)
        #expect(lock >= 0 && flock(lock, LOCK_SH) == 0)
        try lab.publish()
        let blobs = { FileSystem.contents(of: lab.data + "/blobs").flatMap { prefix in FileSystem.contents(of: lab.data + "/blobs/" + prefix).map { lab.data + "/blobs/\(prefix)/\($0)" } } }
        let first = try #require(blobs().first)
        try lab.publish()  // the first blob is now unneeded
        #expect(Eventually.wait { lab.server.errorOutputSoFar().contains("skipped removing unneeded blobs: a backup") })
        #expect(FileSystem.exists(first))
        lab.stop()
        let gc = try lab.run(["gc", "--data", lab.data, "--retention-days", "0", "--grace-minutes", "0"])
        #expect(gc.status == 0 && gc.stdout.contains("removed no blobs") && FileSystem.exists(first), "\(gc.stdout)\(gc.stderr)")
        close(lock)
        let swept = try lab.run(["gc", "--data", lab.data, "--retention-days", "0", "--grace-minutes", "0"])
        #expect(swept.status == 0 && swept.stdout.contains("removed 1 blobs") && !FileSystem.exists(first), "\(swept.stdout)\(swept.stderr)")
    }
}

/// A path's permission bits.
enum TreeMode {
    static func of(_ path: String) -> mode_t? {
        var info = stat()
        return stat(path, &info) == 0 ? info.st_mode & 0o7777 : nil
    }
}
