import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Restores where the data folder is a dedicated volume's mount point (a bind mount here) or a
/// link to a folder elsewhere, as production hosts have it; and a restore whose moves were cut
/// short. Runs as root (mount).
@Suite("End to end: restores onto a dedicated volume and through a linked data folder", .enabled(if: geteuid() == 0, "needs root to mount"), .blocking)
struct RestoreVolumeTests {
    /// A data folder with a release of `com.example.dev` published through a real origin; returns its tree.
    /// The first call makes the folder (`token` nil) and keeps its token in `token`.
    static func populate(_ data: String, work: TemporaryDirectory, seed: UInt64, token: inout String) throws -> [String: [UInt8]] {
        let server = try ServeProcess(data: data, environment: [:], bootstrap: token.isEmpty)
        if token.isEmpty { token = server.token }
        let file = try work.file("level-\(seed).bin", size: 30_000, seed: seed)
        let run = try Processes.run(Processes.depotBinary, ["publish", file, "--pack", "level", "--release", "--quiet", "--app", "com.example.dev", "--server", server.url, "--token", token])
        #expect(run.status == 0, "\(run.stderr)")
        server.process.terminate()
        server.process.waitUntilExit()
        return RootBackupTests.tree(data)
    }

    static func mode(_ path: String) -> mode_t {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_mode & 0o7777 : 0
    }

    /// `tree` without what a restore adds beside the restored files.
    static func restored(_ data: String) -> [String: [UInt8]] {
        RootBackupTests.tree(data).filter { !$0.key.hasPrefix(".before-restore-") && $0.key != "release-floor" }
    }

    @Test("A data folder that is a mount point is restored inside it (the mount stays, the old files are set aside on the volume); a linked one where it points (the link stays); a restore cut between its moves leaves a marker the origin refuses to start on, and a restore run again mends it")
    func mountPointAndLink() throws {
        let work = TemporaryDirectory("depot-restore-volume")
        defer { work.remove() }
        chmod(work.path, 0o755)  // the service user enters it, as /var/lib
        let volume = work.path + "/volume", data = work.path + "/data"
        try FileSystem.createDirectory(volume)
        try FileSystem.createDirectory(data)
        let mount = try Processes.run("/bin/mount", ["--bind", volume, data])
        try #require(mount.status == 0, "\(mount.stderr)")
        defer { _ = try? Processes.run("/bin/umount", ["-l", data]) }
        #expect(DataRestore.isMountPoint(data) && !DataRestore.isMountPoint(volume))

        var token = ""
        let backedUp = try Self.populate(data, work: work, seed: 1, token: &token)
        let depot = Processes.depotBinary
        let backup = try Processes.run(depot, ["backup", "--data", data, work.path + "/backup"])
        #expect(backup.status == 0, "\(backup.stderr)")
        // Changed since: a second pack, which the restore sets aside.
        let changed = try Self.populate(data, work: work, seed: 2, token: &token)
        #expect(changed != backedUp)

        // As in production: the volume's top is the service user's (nobody here), 0700.
        #expect(try Processes.run("/bin/chown", ["-R", "65534:65534", data]).status == 0 && chmod(data, 0o700) == 0)
        // A restore that fails gives the mount point back as it was (root took it while it worked).
        let incomplete = work.path + "/incomplete"
        #expect(try Processes.run("/bin/cp", ["-a", work.path + "/backup", incomplete]).status == 0)
        for prefix in FileSystem.contents(of: incomplete + "/blobs") { FileSystem.removeTree(incomplete + "/blobs/" + prefix) }
        let notWhole = try Processes.run(depot, ["restore", "--data", data, incomplete, "--replace"])
        #expect(notWhole.status != 0 && notWhole.stderr.contains("does not hold"), "\(notWhole.stderr)")
        #expect(RootBackupTests.owner(data) == 65534 && Self.mode(data) == 0o700 && RootBackupTests.tree(data) == changed)
        let restore = try Processes.run(depot, ["restore", "--data", data, work.path + "/backup", "--replace", "--owner", "nobody"])
        #expect(restore.status == 0, "\(restore.stdout) \(restore.stderr)")
        #expect(RootBackupTests.owner(data) == 65534, "the restored folder is the service user's again")
        #expect(DataRestore.isMountPoint(data), "the volume is still mounted there")
        #expect(Self.restored(data) == backedUp)
        let aside = try #require(FileSystem.contents(of: data).first { $0.hasPrefix(".before-restore-") })
        #expect(RootBackupTests.tree(data + "/" + aside) == changed, "the folder that was there is kept, on the volume")
        #expect(!FileSystem.contents(of: data).contains { $0.hasPrefix(".partial-restore-") } && !FileSystem.exists(data + "/.restoring"))
        #expect(!FileSystem.contents(of: work.path).contains { $0.contains("restore") }, "nothing made beside the mount point, on the root volume")
        // The origin starts on it and serves the restored release; a backup leaves the set-aside folder out.
        let server = try ServeProcess(data: data, environment: [:], bootstrap: false)
        try #require(server.banner.contains("public URL"), "\(server.banner) \(server.errorOutputSoFar())")
        let manifest = try RawHTTP.send(port: UInt16(server.port)!, "GET /v1/apps/com.example.dev/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        #expect(manifest?.status == 200)
        // What the restore set aside (root's, 0700) is not the origin's state: healthy.
        let health = try RawHTTP.send(port: UInt16(server.port)!, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        #expect(health?.status == 200, "\(health?.bodyText ?? "")")
        server.process.terminate()
        server.process.waitUntilExit()
        #expect(try Processes.run(depot, ["backup", "--data", data, work.path + "/second"]).status == 0)
        #expect(!FileSystem.contents(of: work.path + "/second").contains { $0.hasPrefix(".before-restore-") })

        // Cut between its moves (the marker there, a mix of files): refused until restored again.
        try FileSystem.writeAtomically(Array("x\n".utf8), to: data + "/" + DataRestore.marker)
        let refused = try Processes.run(depot, ["serve", "--data", data, "--listen", "127.0.0.1:0"])
        #expect(refused.status != 0 && refused.stderr.contains("did not finish moving"), "\(refused.stderr)")
        let again = try Processes.run(depot, ["restore", "--data", data, work.path + "/backup", "--replace"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(Self.restored(data) == backedUp && !FileSystem.exists(data + "/" + DataRestore.marker))

        // A data folder that is a link to a folder on another volume: restored there, the link kept.
        let target = work.path + "/elsewhere"
        try FileSystem.createDirectory(target)
        let link = work.path + "/linked"
        #expect(symlink(target, link) == 0)
        let throughLink = try Processes.run(depot, ["restore", "--data", link, work.path + "/backup"])
        #expect(throughLink.status == 0, "\(throughLink.stderr)")
        var info = stat()
        #expect(lstat(link, &info) == 0 && (info.st_mode & S_IFMT) == S_IFLNK, "the link stays a link")
        #expect(Self.restored(target) == backedUp)
    }

    @Test("Root restores only under folders root alone can change: a data folder whose parent the service user owns, or a link the service user made, is refused before anything is made")
    func unsafeParents() throws {
        let work = TemporaryDirectory("depot-restore-parent")
        defer { work.remove() }
        chmod(work.path, 0o755)
        var token = ""
        _ = try Self.populate(work.path + "/data", work: work, seed: 3, token: &token)
        let depot = Processes.depotBinary
        #expect(try Processes.run(depot, ["backup", "--data", work.path + "/data", work.path + "/backup"]).status == 0)
        let owned = work.path + "/service"
        try FileSystem.createDirectory(owned)
        #expect(chown(owned, 65534, 65534) == 0)
        let under = try Processes.run(depot, ["restore", "--data", owned + "/data", work.path + "/backup"])
        #expect(under.status != 0 && under.stderr.contains("not root's"), "\(under.stderr)")
        #expect(FileSystem.contents(of: owned).isEmpty, "nothing made there")
        // A link the service user made, pointing at a folder root would never restore into.
        let target = work.path + "/elsewhere"
        try FileSystem.createDirectory(target)
        let link = work.path + "/linked"
        #expect(symlink(target, link) == 0 && lchown(link, 65534, 65534) == 0)
        let through = try Processes.run(depot, ["restore", "--data", link, work.path + "/backup"])
        #expect(through.status != 0 && through.stderr.contains("link another user owns"), "\(through.stderr)")
        #expect(FileSystem.contents(of: target).isEmpty)
    }

    @Test("A rollout started while a backup copies the app: the backup's rollout never names a release it lacks (rollouts are copied before releases), and the backup checks it")
    func rolloutDuringBackup() throws {
        let work = TemporaryDirectory("depot-backup-rollout")
        defer { work.remove() }
        let data = work.path + "/data"
        var token = ""
        _ = try Self.populate(data, work: work, seed: 1, token: &token)
        let folder = DataFolder(data)
        let app = "com.example.dev"
        let releases = ReleaseStore(folder: folder, apps: AppStore(folder: folder), manifestLifetime: 86_400)
        // Made by hand as a publish and a rollout start would: the release, then the record naming it.
        func startRollout() throws {
            let live = try #require(try releases.current(app, channel: ReleaseStore.production))
            let next = live.version + 1000
            try FileSystem.writeAtomically(try FileSystem.readFile(folder.release(app, live.version)), to: folder.release(app, next))
            try FileSystem.writeAtomically(Array("\(next)\n".utf8), to: folder.head(app))
            let record = RolloutRecord(app: app, channel: ReleaseStore.production, release: next, baseRelease: live.version, state: .running, fraction: 0.1,
                                       salt: "s", candidates: [], removed: [], steps: [])
            try FileSystem.createDirectory(folder.app(app) + "/rollouts")
            try StoredJSON.write(record, to: folder.rollout(app, channel: ReleaseStore.production))
        }
        var started = false
        let summary = try DataBackup.take(data: data, to: work.path + "/backup", objectStore: nil, keepDays: 35, retention: 30 * 86_400, afterCopying: { relative in
            // Just after the app's releases were copied: a new release and a rollout naming it.
            if relative == "apps/\(app)/releases" && !started {
                started = true
                try? startRollout()
            }
        })
        #expect(started)
        let copy = DataFolder(work.path + "/backup")
        let findings = try DataRestore.check(copy, stored: DataRestore.storedBlobs(copy, bucket: nil), takenAt: summary.record.takenAt)
        #expect(findings.whole, "\(findings.dangling) \(findings.missingLive)")
    }
}
