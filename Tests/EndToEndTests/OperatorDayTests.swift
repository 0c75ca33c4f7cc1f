import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// An operator's real day (issue 51): `sudo` in front of admin commands, a production first start
/// with no dev app and no secret in the log, versions that say what runs, a data folder of a
/// newer format, an app removed, failures that say what failed.
@Suite("End to end: an operator's day — root, first start, versions, formats")
struct OperatorDayTests {
    /// The user a packaged origin would run as; here `nobody`, which exists on every Debian.
    static let serviceUID: uid_t = 65534
    static let depot = Processes.depotBinary

    static func run(_ arguments: [String], environment: [String: String] = [:]) throws -> Processes.Result {
        try Processes.run(depot, arguments, environment: environment)
    }

    /// `curl` for one request: the status and the body.
    static func get(_ url: String, token: String? = nil) throws -> (status: Int, body: String) {
        var arguments = ["-s", "-o", "-", "-w", "\n%{http_code}", url]
        if let token { arguments += ["-H", "Authorization: Bearer \(token)"] }
        let result = try Processes.run("/usr/bin/curl", arguments)
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n").trimmingCharacters(in: .whitespacesAndNewlines))
    }

    static func owner(_ path: String) -> uid_t {
        var info = stat()
        return stat(path, &info) == 0 ? info.st_uid : uid_t.max
    }

    /// What under `folder` (itself included) the service user does not own.
    static func notTheService(_ folder: String) -> [String] {
        var found = owner(folder) == serviceUID ? [] : ["."]
        if let walk = FileManager.default.enumerator(atPath: folder) {
            for case let name as String in walk where owner(folder + "/" + name) != serviceUID { found.append(name) }
        }
        return found
    }

    /// A folder every user may enter, holding a data folder `nobody` owns (as the package makes it).
    static func serviceFolder(_ label: String) throws -> (work: TemporaryDirectory, data: String) {
        let work = TemporaryDirectory(label)
        chmod(work.path, 0o755)
        let data = work.path + "/data"
        try FileSystem.createDirectory(data, mode: 0o700)
        chown(data, serviceUID, serviceUID)
        return (work, data)
    }

    @Test("`sudo depot …` on the service user's data folder acts as that user: every file it writes is the service's, and the origin keeps accepting every token")
    func rootActsAsTheOwner() throws {
        try #require(geteuid() == 0, "runs as root (CI does): it is about what root does")
        let (work, data) = try Self.serviceFolder("depot-root")
        defer { work.remove() }
        // Everything below runs as root, as `sudo depot …` would.
        #expect(try Self.run(["init", "--data", data]).status == 0)
        #expect(try Self.run(["apps", "create", "com.example.game", "--data", data]).status == 0)
        let first = try Self.run(["tokens", "create", "--data", data, "--app", "com.example.game"])
        #expect(first.status == 0)
        let second = try Self.run(["tokens", "create", "--data", data, "--app", "com.example.game", "--role", "admin"])
        #expect(try Self.run(["keys", "rotate", "--data", data, "--app", "com.example.game"]).status == 0)
        // Nothing in the folder belongs to root (before: tokens.json root:root 0600, and more).
        #expect(Self.notTheService(data).isEmpty, "owned by someone else than the service user: \(Self.notTheService(data))")

        // The origin, started by root too, runs as the owner and accepts both tokens.
        let server = try ServeProcess(data: data, environment: [:], bootstrap: false)
        defer { server.process.terminate() }
        for token in [first.stdout, second.stdout].map({ String($0.split(separator: "\n").last ?? "") }) {
            #expect(try Self.get(server.url + "/v1/session", token: token).status == 200)
        }
        #expect(try Self.get(server.url + "/healthz").status == 200)
        #expect(server.process.isRunning)
        let status = try String(contentsOfFile: "/proc/\(server.process.processIdentifier)/status", encoding: .utf8)
        #expect(status.split(separator: "\n").contains { $0.hasPrefix("Uid:") && $0.split(separator: "\t").dropFirst().allSatisfy { $0 == "\(Self.serviceUID)" } },
                "the origin runs as the data folder's owner")

        // A backup and a restore by root: the backup is root's, the restored folder the service's.
        let backup = work.path + "/backup"
        #expect(try Self.run(["backup", "--data", data, backup]).status == 0)
        #expect(Self.owner(backup + "/tokens.json") == 0)
        // The backup's lock stays the service's (before: root:root 0600, and the origin's next
        // start answered /healthz 503 for it while its sweep ran without the lock).
        #expect(Self.notTheService(data).isEmpty, "after a root backup, owned by someone else than the service user: \(Self.notTheService(data))")
        server.process.terminate()
        server.process.waitUntilExit()
        let restored = try Self.run(["restore", "--data", data, backup, "--replace"])
        #expect(restored.status == 0, "\(restored.stdout)\(restored.stderr)")
        #expect(!restored.stdout.contains("warning"), "\(restored.stdout)")
        #expect(Self.notTheService(data).isEmpty, "after the restore, owned by someone else than the service user: \(Self.notTheService(data))")
        let again = try ServeProcess(data: data, environment: [:], bootstrap: false)
        defer { again.process.terminate() }
        for token in [first.stdout, second.stdout].map({ String($0.split(separator: "\n").last ?? "") }) {
            #expect(try Self.get(again.url + "/v1/session", token: token).status == 200)
        }
        #expect(try Self.get(again.url + "/healthz").status == 200)
    }

    @Test("A state file the origin cannot read is named in the log and on /healthz (503) and in /metrics, not a silent 401 for every token; fixed, it recovers")
    func unreadableStateIsReported() throws {
        try #require(geteuid() == 0, "runs as root (CI does): it makes a file the service user cannot read")
        let (work, data) = try Self.serviceFolder("depot-unreadable")
        defer { work.remove() }
        #expect(try Self.run(["apps", "create", "com.example.game", "--data", data]).status == 0)
        let created = try Self.run(["tokens", "create", "--data", data, "--app", "com.example.game"])
        let token = String(created.stdout.split(separator: "\n").last ?? "")
        let metricsToken = work.path + "/metrics.token"
        try FileSystem.writeAtomically(Array("0123456789abcdef0123456789abcdef\n".utf8), to: metricsToken)
        chmod(metricsToken, 0o644)
        // What an admin command as root did before: tokens.json rewritten root:root 0600.
        let tokens = data + "/tokens.json"
        chown(tokens, 0, 0)
        chmod(tokens, 0o600)

        let server = try ServeProcess(data: data, environment: ["DEPOT_METRICS_TOKEN_FILE": metricsToken], bootstrap: false)
        defer { server.process.terminate() }
        let health = try Self.get(server.url + "/healthz")
        #expect(health.status == 503)
        #expect(health.body.contains("\"status\":\"unreadable\"") && health.body.contains(tokens) && health.body.contains("Permission denied"), "\(health.body)")
        #expect(try Self.get(server.url + "/v1/session", token: token).status == 401)
        let metrics = try Self.get(server.url + "/metrics", token: "0123456789abcdef0123456789abcdef")
        #expect(metrics.body.contains("depot_state_unreadable_files 1"), "\(metrics.body.prefix(300))")

        // The operator gives the file back to the service user: healthy again, the token accepted.
        chown(tokens, Self.serviceUID, Self.serviceUID)
        #expect(try Self.get(server.url + "/v1/session", token: token).status == 200)
        let healed = try Self.get(server.url + "/healthz")
        #expect(healed.status == 200 && healed.body.contains("\"status\":\"ok\""), "\(healed.body)")
        server.process.terminate()
        server.process.waitUntilExit()
        let log = server.errorOutput()
        #expect(log.contains("cannot read \(tokens)") && log.contains("Permission denied"), "the log names the file and the error")
    }

    @Test("Production first start: `serve --bootstrap none` makes no app and prints no token; apps are created, given a token in a file, and removed with the origin stopped")
    func productionFirstStart() throws {
        let work = TemporaryDirectory("depot-first-start")
        defer { work.remove() }
        let data = work.path + "/data"
        var server: ServeProcess? = try ServeProcess(data: data, environment: ["DEPOT_BOOTSTRAP": "none"], bootstrap: false)
        let started = server!.banner.contains("no apps yet") ? "" : server!.waitForOutput("no apps yet")
        #expect((server!.banner + started).contains("no apps yet: create one"))
        #expect(!(server!.banner + started).contains("dpt_"), "no token is printed")
        #expect(!FileSystem.exists(data + "/apps/com.example.dev"), "no dev app")
        #expect(FileSystem.exists(data + "/format.json") && FileSystem.exists(data + "/keys/manifest-signing.json"))
        let url = server!.url

        // The first app and its admin token, written to a file only this user reads.
        #expect(try Self.run(["apps", "create", "com.example.game", "--data", data]).status == 0)
        let tokenFile = work.path + "/admin.token"
        let created = try Self.run(["tokens", "create", "--data", data, "--app", "com.example.game", "--role", "admin", "--expires", "7d", "--out", tokenFile])
        #expect(created.status == 0 && !created.stdout.contains("dpt_"), "\(created.stdout)")
        var info = stat()
        #expect(stat(tokenFile, &info) == 0 && info.st_mode & 0o777 == 0o600)
        let token = try String(contentsOfFile: tokenFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try Self.get(url + "/v1/session", token: token).status == 200)
        // An existing file is never overwritten.
        let again = try Self.run(["tokens", "create", "--data", data, "--app", "com.example.game", "--out", tokenFile])
        #expect(again.status != 0 && again.stderr.contains("new file"), "\(again.stderr)")
        #expect(try String(contentsOfFile: tokenFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines) == token)

        // Two releases, which edges and devices see.
        let pack = work.path + "/level.bin"
        try FileSystem.writeAtomically(Array("level one\n".utf8), to: pack)
        for _ in 0..<2 {
            try FileSystem.writeAtomically(Array("level \(SecureRandom.bytes(4))\n".utf8), to: pack)
            let published = try Self.run(["publish", pack, "--server", url, "--app", "com.example.game", "--pack", "level", "--release"], environment: ["DEPOT_TOKEN": token])
            #expect(published.status == 0, "\(published.stderr)")
        }

        // Removal needs --yes, and the origin stopped.
        let unconfirmed = try Self.run(["apps", "remove", "com.example.game", "--data", data])
        #expect(unconfirmed.status != 0 && unconfirmed.stderr.contains("--yes"))
        let busy = try Self.run(["apps", "remove", "com.example.game", "--data", data, "--yes"])
        #expect(busy.status != 0 && busy.stderr.contains("in use"), "\(busy.stderr)")
        #expect(FileSystem.exists(data + "/apps/com.example.game/app.json"))
        server!.process.terminate()
        server!.process.waitUntilExit()
        server = nil
        // Nor while a backup copies the folder (it holds backup.lock shared).
        let backupLock = try FileDescriptor(path: data + "/backup.lock", flags: O_RDONLY | O_CREAT, mode: 0o644)
        #expect(flock(backupLock.rawValue, LOCK_SH) == 0)
        let duringBackup = try Self.run(["apps", "remove", "com.example.game", "--data", data, "--yes"])
        #expect(duringBackup.status != 0 && duringBackup.stderr.contains("a backup of"), "\(duringBackup.stderr)")
        #expect(FileSystem.exists(data + "/apps/com.example.game/app.json") && FileSystem.exists(data + "/keys/com.example.game.json"))
        try backupLock.close()
        let removed = try Self.run(["apps", "remove", "com.example.game", "--data", data, "--yes"])
        #expect(removed.status == 0 && removed.stdout.contains("removed app com.example.game"), "\(removed.stdout)\(removed.stderr)")
        #expect(!FileSystem.exists(data + "/apps/com.example.game") && !FileSystem.exists(data + "/keys/com.example.game.json"))
        let restarted = try ServeProcess(data: data, environment: ["DEPOT_BOOTSTRAP": "none"], bootstrap: false)
        defer { restarted.process.terminate() }
        #expect(try Self.get(restarted.url + "/v1/session", token: token).status == 401, "its tokens went with it")
        #expect(try Self.get(restarted.url + "/v1/apps/com.example.game/manifest").status == 404)
        // The id made again continues above the numbers its edges and devices saw (2).
        #expect(try Self.run(["apps", "create", "com.example.game", "--data", data]).status == 0)
        let newFile = work.path + "/new.token"
        #expect(try Self.run(["tokens", "create", "--data", data, "--app", "com.example.game", "--out", newFile]).status == 0)
        let newToken = try String(contentsOfFile: newFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let republished = try Self.run(["publish", pack, "--server", restarted.url, "--app", "com.example.game", "--pack", "level", "--release"], environment: ["DEPOT_TOKEN": newToken])
        #expect(republished.status == 0 && republished.stdout.contains("revision 3 ") && republished.stdout.contains("in release 3 of com.example.game"), "\(republished.stdout)\(republished.stderr)")
        // `depot init` on an initialised folder changes nothing.
        let initAgain = try Self.run(["init", "--data", data])
        #expect(initAgain.status == 0 && initAgain.stdout.contains("already a data folder"))
    }

    @Test("Versions: `depot --version`, /healthz's body, depot_build_info on /metrics, and start and stop lines in the log")
    func versions() throws {
        let version = try Self.run(["--version"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(version == AssetDepotVersion.current)
        let work = TemporaryDirectory("depot-versions")
        defer { work.remove() }
        let metricsToken = work.path + "/metrics.token"
        try FileSystem.writeAtomically(Array("0123456789abcdef0123456789abcdef\n".utf8), to: metricsToken)
        let server = try ServeProcess(data: work.path + "/data", environment: ["DEPOT_METRICS_TOKEN_FILE": metricsToken])
        let health = try Self.get(server.url + "/healthz")
        #expect(health.status == 200 && health.body == "{\"status\":\"ok\",\"version\":\"\(version)\"}", "\(health.body)")
        let metrics = try Self.get(server.url + "/metrics", token: "0123456789abcdef0123456789abcdef")
        #expect(metrics.body.contains("depot_build_info{version=\"\(version)\"} 1"), "\(metrics.body.prefix(400))")
        server.process.terminate()
        server.process.waitUntilExit()
        let log = server.errorOutput()
        #expect(log.contains("started depot \(version) (pid \(server.process.processIdentifier)"), "\(log.prefix(600))")
        #expect(log.contains("stopped depot \(version)"))
    }

    @Test("A data folder of a newer format is refused by every command before anything is read or changed; one from before formats is recorded as format 1")
    func newerFormatRefused() throws {
        let work = TemporaryDirectory("depot-format")
        defer { work.remove() }
        let data = work.path + "/data"
        #expect(try Self.run(["apps", "create", "com.example.game", "--data", data]).status == 0)
        let record = try String(contentsOfFile: data + "/format.json", encoding: .utf8)
        #expect(record.contains("\"format\" : 1"), "\(record)")

        // A folder from before formats were recorded: the next command that writes it records format 1.
        FileSystem.remove(data + "/format.json")
        #expect(try Self.run(["tokens", "create", "--data", data, "--app", "com.example.game"]).status == 0)
        #expect(try Self.run(["apps", "create", "com.example.other", "--data", data]).status == 0)
        #expect(FileSystem.exists(data + "/format.json"))

        let backup = work.path + "/backup"
        #expect(try Self.run(["backup", "--data", data, backup]).status == 0)

        // Staging a pack key raises the folder to format 2 (an older depot would drop the staged key).
        #expect(try Self.run(["keys", "rotate", "--app", "com.example.game", "--data", data]).status == 0)
        #expect(try String(contentsOfFile: data + "/format.json", encoding: .utf8).contains("\"format\" : 2"))

        // App Attest settings raise it to 3 (an older depot rewriting app.json would drop them).
        #expect(try Self.run(["attest", "configure", "--app", "com.example.game", "--app-id", "ABCDE12345.com.example.game", "--environment", "production", "--data", data]).status == 0)
        #expect(try String(contentsOfFile: data + "/format.json", encoding: .utf8).contains("\"format\" : 3"))

        // A newer depot's folder.
        let newer = Array("{\"format\": 4, \"writtenBy\": \"9.0.0\"}\n".utf8)
        try FileSystem.writeAtomically(newer, to: data + "/format.json")
        let before = try FileManager.default.subpathsOfDirectory(atPath: data).sorted()
        let tokensBefore = try FileSystem.readFile(data + "/tokens.json")
        for arguments in [["serve", "--listen", "127.0.0.1:0"], ["tokens", "create", "--app", "com.example.game"], ["apps", "list"], ["keys", "export", "--app", "com.example.game"], ["gc"]] {
            let result = try Self.run(arguments + ["--data", data])
            #expect(result.status != 0, "\(arguments)")
            #expect(result.stderr.contains("format 4 (written by depot 9.0.0)") && result.stderr.contains("reads format 3 at most"), "\(arguments): \(result.stderr)")
            #expect(!result.stdout.contains("dpt_"))
        }
        #expect(try FileManager.default.subpathsOfDirectory(atPath: data).sorted() == before)
        #expect(try FileSystem.readFile(data + "/tokens.json") == tokensBefore)
        #expect(try FileSystem.readFile(data + "/format.json") == newer)

        // The rollback the book describes: the backup taken before the upgrade, restored over it.
        let rolledBack = try Self.run(["restore", "--data", data, backup, "--replace"])
        #expect(rolledBack.status == 0, "\(rolledBack.stdout)\(rolledBack.stderr)")
        #expect(try String(contentsOfFile: data + "/format.json", encoding: .utf8).contains("\"format\" : 1"))
        #expect(try Self.run(["apps", "list", "--data", data]).stdout.contains("com.example.game"))
        // A backup of a newer depot's folder is refused as a restore's source.
        try FileSystem.writeAtomically(newer, to: backup + "/format.json")
        let tooNew = try Self.run(["restore", "--data", work.path + "/elsewhere", backup])
        #expect(tooNew.status != 0 && tooNew.stderr.contains("format 3"), "\(tooNew.stderr)")
    }
}
