import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Issue 62's first findings: `depot backup` and `depot restore` keep root's rights (as the
/// operator's book runs them), over a folder the service user controls. Links and FIFOs planted
/// where root opens files (the locks, pointers, releases, keys, blobs) are refused or copied as
/// links, and nothing outside the folder is read, created or given away; names ending in `.lock`
/// that are not lock files (an app, a channel) are backed up and restored. Runs as root.
@Suite("End to end: root backs up and restores what the service user controls", .enabled(if: geteuid() == 0, "needs root, as the operator's backup runs"), .blocking)
struct RootBackupTests {
    /// The service user the folder is given to (nobody).
    static let service: (uid: uid_t, gid: gid_t) = (65534, 65534)

    /// A file only root may read, outside the folder: what a link would give away.
    static func victim(_ work: TemporaryDirectory, _ name: String) throws -> String {
        let path = work.path + "/" + name
        try FileSystem.writeAtomically(Array("secret \(name) \(UUID().uuidString)".utf8), to: path, mode: 0o600)
        return path
    }

    static func owner(_ path: String) -> uid_t {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_uid : 4_242
    }

    /// Every plain file under `root` with its bytes, by relative path (links as `-> target`),
    /// leaving out lock files, temporary files and what a backup does not carry.
    static func tree(_ root: String, _ relative: String = "") -> [String: [UInt8]] {
        var out: [String: [UInt8]] = [:]
        for name in FileSystem.contents(of: root + "/" + relative) {
            let path = relative.isEmpty ? name : relative + "/" + name
            var info = stat()
            guard lstat(root + "/" + path, &info) == 0 else { continue }
            switch info.st_mode & S_IFMT {
            case S_IFDIR where !["uploads"].contains(path):
                out.merge(tree(root, path)) { a, _ in a }
            case S_IFREG where !(name.hasSuffix(".lock") && info.st_size == 0) && !name.hasPrefix(".tmp-")
                && ![BackupRecord.fileName, "release-floor"].contains(path):
                out[path] = (try? FileSystem.readFile(root + "/" + path)) ?? []
            case S_IFLNK:
                out[path] = Array("-> \((try? FileManager.default.destinationOfSymbolicLink(atPath: root + "/" + path)) ?? "?")".utf8)
            default:
                break
            }
        }
        return out
    }

    @Test("Links at backup.lock and serve.lock are refused (nothing opened or chowned through them); links inside apps/, keys/ and blobs/ are copied as links and never read through; FIFOs are passed over and named, never waited on; an app `com.acme.lock` and a channel `beta.lock` are backed up; the restored tree is the folder's, and the origin serves both")
    func linksFIFOsAndLockNames() throws {
        let work = TemporaryDirectory("depot-root-backup")
        defer { work.remove() }
        chmod(work.path, 0o755)  // the service user enters it, as /var/lib
        let data = work.path + "/data"
        let server = try ServeProcess(data: data, environment: [:])
        let depot = Processes.depotBinary
        let file = try work.file("level.bin", size: 20_000, seed: 7)
        let common = ["--server", server.url, "--token", server.token]
        #expect(try Processes.run(depot, ["publish", file, "--pack", "level", "--release", "--quiet", "--app", "com.example.dev"] + common).status == 0)
        let beta = try work.file("beta.bin", size: 9_000, seed: 8)
        let onBeta = try Processes.run(depot, ["publish", beta, "--pack", "level", "--release", "--quiet", "--app", "com.example.dev", "--channel", "beta.lock"] + common)
        #expect(onBeta.status == 0, "\(onBeta.stderr)")
        #expect(try Processes.run(depot, ["apps", "create", "com.acme.lock", "--data", data]).status == 0)
        let acme = try Processes.run(depot, ["tokens", "create", "--app", "com.acme.lock", "--role", "publisher", "--data", data])
        let acmeToken = String(acme.stdout.split(separator: "\n").last ?? "")
        #expect(acme.status == 0 && !acmeToken.isEmpty, "\(acme.stdout)\(acme.stderr)")
        let published = try Processes.run(depot, ["publish", file, "--pack", "level", "--release", "--quiet", "--app", "com.acme.lock", "--server", server.url, "--token", acmeToken])
        #expect(published.status == 0, "\(published.stderr)")
        // Ids and channels at the grammar's edges (the longest, ending in .lock), a root of
        // trust with its statement, and a draft: each must come back.
        let longest = "com." + String(repeating: "x", count: 119) + ".lock"
        let longestChannel = String(repeating: "c", count: 59) + ".lock"
        #expect(Identifier.isValidApp(longest) && longest.count == 128 && Identifier.isValidChannel(longestChannel) && longestChannel.count == 64)
        #expect(try Processes.run(depot, ["apps", "create", longest, "--data", data]).status == 0)
        let longToken = String(try Processes.run(depot, ["tokens", "create", "--app", longest, "--role", "publisher", "--data", data]).stdout.split(separator: "\n").last ?? "")
        let onLongest = try Processes.run(depot, ["publish", file, "--pack", "level", "--release", "--quiet", "--app", longest, "--channel", longestChannel, "--server", server.url, "--token", longToken])
        #expect(onLongest.status == 0, "\(onLongest.stderr)")
        let trust = TrustFixture(app: "com.acme.lock")
        _ = try trust.addRoot(dataPath: data, protect: ["beta"])
        let draft = try work.file("draft.bin", size: 3_000, seed: 9)
        #expect(try Processes.run(depot, ["publish", draft, "--pack", "draft", "--quiet", "--app", "com.example.dev"] + common).status == 0, "staged, not released")
        server.process.terminate()
        server.process.waitUntilExit()
        #expect(FileSystem.exists(data + "/apps/com.acme.lock/roots/000001.json"))

        // The folder is the service user's; it plants links to root's files and FIFOs.
        #expect(try Processes.run("/bin/chown", ["-R", "\(Self.service.uid):\(Self.service.gid)", data]).status == 0)
        let backupLockVictim = try Self.victim(work, "backup-lock-victim")
        let serveLockVictim = try Self.victim(work, "serve-lock-victim")
        let readVictims = try ["release", "key", "blob", "channel"].map { try Self.victim(work, "\($0)-victim") }
        let app = data + "/apps/com.example.dev"
        let planted = [
            app + "/releases/999999.json": readVictims[0], data + "/keys/planted.json": readVictims[1],
            data + "/blobs/planted": readVictims[2], app + "/channels/planted": readVictims[3],
        ]
        for (link, target) in planted { #expect(symlink(target, link) == 0, "\(link)") }
        let fifos = [app + "/fifo", app + "/channels/fifo", data + "/fifo"]
        for fifo in fifos { #expect(mkfifo(fifo, 0o644) == 0, "\(fifo)") }
        // A socket at a channel's pointer, a hard link to root's file, a setuid file, an open folder.
        let socket = app + "/channels/socket"
        #expect(try Processes.run("/usr/bin/python3", ["-c", "import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])", socket]).status == 0)
        let hardVictim = try Self.victim(work, "hard-victim")
        #expect(link(hardVictim, app + "/hard") == 0)
        try FileSystem.writeAtomically(Array("a setuid file".utf8), to: app + "/setuid")
        #expect(chmod(app + "/setuid", 0o4755) == 0 && chown(app + "/setuid", Self.service.uid, Self.service.gid) == 0)
        try FileSystem.createDirectory(app + "/open")
        #expect(chmod(app + "/open", 0o777) == 0 && chown(app + "/open", Self.service.uid, Self.service.gid) == 0)
        _ = unlink(data + "/backup.lock")
        #expect(symlink(backupLockVictim, data + "/backup.lock") == 0)

        let backup = work.path + "/backup"
        let refused = try Processes.run(depot, ["backup", "--data", data, backup])
        #expect(refused.status != 0 && refused.stderr.contains("backup.lock is a symbolic link"), "\(refused.stdout)\(refused.stderr)")
        #expect(Self.owner(backupLockVictim) == 0 && !FileSystem.exists(backup), "nothing given away, no backup")
        #expect(unlink(data + "/backup.lock") == 0)

        let taken = try Processes.run(depot, ["backup", "--data", data, backup])
        #expect(taken.status == 0, "\(taken.stdout)\(taken.stderr)")
        func relative(_ path: String) -> String { String(path.dropFirst(data.count + 1)) }
        for fifo in fifos + [socket] {
            #expect(taken.stderr.contains("warning: not copied from \(data): \(relative(fifo)) (a FIFO, a socket or a device)"), "\(taken.stderr)")
        }
        for link in planted.keys {
            #expect(taken.stderr.contains("warning: not copied from \(data): \(relative(link)) (a symbolic link)"), "\(taken.stderr)")
        }
        #expect(taken.stderr.contains("warning: not copied from \(data): \(relative(app + "/hard")) (a hard link to a file its owner (uid 0) did not make)"), "\(taken.stderr)")
        #expect(taken.stdout.contains("com.acme.lock (release"), "\(taken.stdout)")
        #expect(Self.owner(data + "/backup.lock") == Self.service.uid, "the lock root made is the service's")
        // Nothing planted is in the backup, no victim's bytes were read into it, and no mode keeps a setuid bit.
        for path in Array(planted.keys) + fifos + [socket, app + "/hard"] {
            var info = stat()
            #expect(lstat(backup + "/" + relative(path), &info) != 0, "\(relative(path)) is in the backup")
        }
        var setuid = stat()
        #expect(lstat(backup + "/apps/com.example.dev/setuid", &setuid) == 0 && setuid.st_mode & 0o7777 == 0o755)
        var open = stat()
        #expect(lstat(backup + "/apps/com.example.dev/open", &open) == 0 && open.st_mode & 0o777 == 0o777, "the folder's own mode, once the copy was whole")
        let victims = try (readVictims + [backupLockVictim, serveLockVictim, hardVictim]).map { try FileSystem.readFile($0) }
        for (path, bytes) in Self.tree(backup) {
            #expect(!victims.contains(bytes), "\(path) holds a victim's bytes")
        }
        #expect(FileSystem.isDirectory(backup + "/apps/com.acme.lock/releases") && FileSystem.exists(backup + "/apps/com.example.dev/channels/beta.lock"))
        #expect(FileSystem.exists(backup + "/apps/\(longest)/channels/\(longestChannel)") && FileSystem.exists(backup + "/apps/com.acme.lock/roots/000001.json"))
        #expect(Self.tree(backup).keys.contains { $0.hasPrefix("apps/com.example.dev/staging/") }, "the draft: \(Self.tree(backup).keys.sorted())")

        // The restore: serve.lock planted as a link is refused the same way.
        _ = unlink(data + "/serve.lock")
        #expect(symlink(serveLockVictim, data + "/serve.lock") == 0)
        let refusedRestore = try Processes.run(depot, ["restore", "--data", data, "--replace", backup])
        #expect(refusedRestore.status != 0 && refusedRestore.stderr.contains("serve.lock is a symbolic link"), "\(refusedRestore.stdout)\(refusedRestore.stderr)")
        let serveLockBytes = try FileSystem.readFile(serveLockVictim)
        #expect(Self.owner(serveLockVictim) == 0 && serveLockBytes == victims[5])
        #expect(unlink(data + "/serve.lock") == 0)
        // What the restored folder must hold: the folder's own files (what was planted is not among them).
        for path in Array(planted.keys) + fifos + [socket, app + "/hard"] { #expect(unlink(path) == 0, "\(path)") }
        let before = Self.tree(data)
        let restored = try Processes.run(depot, ["restore", "--data", data, "--replace", backup])
        #expect(restored.status == 0, "\(restored.stdout)\(restored.stderr)")
        let after = Self.tree(data)
        #expect(Set(after.keys) == Set(before.keys), "only in the folder: \(Set(before.keys).subtracting(after.keys).sorted()); only restored: \(Set(after.keys).subtracting(before.keys).sorted())")
        #expect(after.keys.allSatisfy { after[$0] == before[$0] }, "the same bytes")
        #expect(Self.owner(data + "/apps/com.acme.lock") == Self.service.uid, "given to the folder's owner")

        let again = try ServeProcess(data: data, environment: [:], bootstrap: false)
        defer { again.process.terminate() }
        let port = UInt16(again.port)!
        for path in ["/v1/apps/com.acme.lock/manifest", "/v1/apps/com.example.dev/channels/beta.lock/manifest", "/v1/apps/\(longest)/channels/\(longestChannel)/manifest"] {
            #expect(try RawHTTP.send(port: port, "GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first?.status == 200, "\(path)")
        }
    }
}

/// Issue 62: a draft's blob dropped while a backup runs stays until the sweep (the backup may
/// have copied the draft that named it).
@Suite("End to end: draft blobs and a running backup", .blocking)
struct DraftBlobBackupTests {
    @Test("A staged pack dropped while a backup holds backup.lock keeps its blob (a restore of that backup names it); dropped with no backup running, its blob goes at once")
    func droppedDraftBlobsWaitForTheBackup() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-draft-backup")
            defer { work.remove() }
            let folder = DataFolder(origin.data.path)
            func blobs() -> Set<String> {
                Set(FileSystem.contents(of: folder.blobs).flatMap { FileSystem.contents(of: folder.blobs + "/" + $0) })
            }
            let common = ["--server", origin.baseURL.absoluteString, "--app", origin.app, "--token", origin.token]
            func stageAndDrop(_ seed: UInt64) throws -> String {
                let before = blobs()
                let file = try work.file("draft-\(seed).bin", size: 4_000, seed: seed)
                #expect(try Processes.run(Processes.depotBinary, ["publish", file, "--pack", "draft", "--quiet"] + common).status == 0)
                let staged = try #require(blobs().subtracting(before).first)
                let dropped = try Processes.run(Processes.depotBinary, ["unstage", "--pack", "draft"] + common)
                #expect(dropped.status == 0, "\(dropped.stderr)")
                return staged
            }
            let lock = try BackupLock.shared(folder)
            let kept = try stageAndDrop(1)
            #expect(blobs().contains(kept), "a backup holds the lock: the blob stays")
            try lock.close()
            let gone = try stageAndDrop(2)
            #expect(!blobs().contains(gone), "no backup: removed at once")
        }
    }

    @Test("backup.lock held exclusively (a removal pass, or someone holding it for ever): the backup waits, then fails saying so, with no backup made; it does not hang")
    func aHeldLockDoesNotHangTheBackup() throws {
        let work = TemporaryDirectory("depot-backup-held")
        defer { work.remove() }
        let data = work.path + "/data"
        #expect(try Processes.run(Processes.depotBinary, ["init", "--data", data]).status == 0)
        let lock = try FileDescriptor(path: data + "/backup.lock", flags: O_RDONLY | O_CREAT, mode: 0o644)
        #expect(flock(lock.rawValue, LOCK_EX) == 0)
        let held = try Processes.run(Processes.depotBinary, ["backup", "--data", data, work.path + "/backup"], environment: ["DEPOT_BACKUP_LOCK_WAIT": "1"])
        #expect(held.status != 0 && held.stderr.contains("has been held exclusively for 1 s"), "\(held.stderr)")
        #expect(!FileSystem.exists(work.path + "/backup"))
        try lock.close()
        #expect(try Processes.run(Processes.depotBinary, ["backup", "--data", data, work.path + "/backup"]).status == 0)
    }
}
