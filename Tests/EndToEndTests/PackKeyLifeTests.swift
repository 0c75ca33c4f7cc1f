import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// Pack keys through their life (issue 52): a key is staged (handed out in builds) before it is
/// used, retired when the builds that lack it are few, and a leaked one retired at once — with
/// the real `depot serve`, `depot keys`, `depot publish` and `depot sync --config` of a build.
@Suite("End to end: pack keys rotate without stranding builds")
struct PackKeyLifeTests {
    static let depot = Processes.depotBinary
    static let app = "com.example.dev"

    /// The origin's data folder and what a test runs against it.
    struct Rig {
        let work: TemporaryDirectory
        var server: ServeProcess
        /// The publisher token the first start printed (a restart prints none).
        let token: String
        var data: String { work.path + "/data" }
        var keyFile: String { data + "/keys/\(PackKeyLifeTests.app).json" }

        init(_ label: String) throws {
            work = TemporaryDirectory(label)
            server = try ServeProcess(data: work.path + "/data", environment: [:])
            token = server.token
        }

        /// `depot ARGS --data DATA`.
        func admin(_ arguments: [String]) throws -> Processes.Result {
            try Processes.run(PackKeyLifeTests.depot, arguments + ["--data", data])
        }

        /// Publishes `size` seeded bytes as `pack`, in a release of its own; returns the file.
        func publish(_ pack: String, size: Int, seed: UInt64) throws -> String {
            let file = try work.file("\(pack)-\(seed)", size: size, seed: seed)
            let result = try Processes.run(PackKeyLifeTests.depot, [
                "publish", file, "--server", server.url, "--app", PackKeyLifeTests.app, "--pack", pack, "--token", token, "--release", "--quiet",
            ])
            #expect(result.status == 0, "\(result.stderr)")
            return file
        }

        /// `depot keys export` into `name`; returns the configuration.
        func export(_ name: String) throws -> ClientConfiguration {
            let exported = try admin(["keys", "export", "--app", PackKeyLifeTests.app])
            #expect(exported.status == 0, "\(exported.stderr)")
            try FileSystem.writeAtomically(Array(exported.stdout.utf8), to: work.path + "/" + name)
            return try ClientConfiguration.decode(Array(exported.stdout.utf8))
        }

        /// `depot sync --config NAME --dest DEVICE` as a build with that configuration does.
        func sync(_ config: String, device: String, report: Bool = false) throws -> Processes.Result {
            try Processes.run(PackKeyLifeTests.depot, [
                "sync", "--server", server.url, "--app", PackKeyLifeTests.app, "--config", work.path + "/" + config, "--dest", work.path + "/" + device, "--quiet",
            ] + (report ? ["--report"] : []))
        }

        func installed(_ device: String, _ pack: String) throws -> [UInt8] { try FileSystem.readFile(work.path + "/" + device + "/packs/" + pack) }

        /// Stops the origin (it writes its report counts as it stops) and starts it again on the
        /// same port (the URLs of the packs it published name it).
        mutating func restart() throws {
            let port = server.port
            server.process.terminate()
            server.process.waitUntilExit()
            server = try ServeProcess(data: data, environment: ["DEPOT_LISTEN": "127.0.0.1:\(port)"], bootstrap: false)
            #expect(server.port == port, "\(server.banner)")
        }
    }

    /// The first key id (`k` and 8 hex digits) in `text`.
    static func keyID(in text: String) -> String? {
        text.range(of: "k[0-9a-f]{8}\\b", options: .regularExpression).map { String(text[$0]) }
    }

    @Test("A build's configuration through rotate, publish and retire: build A (exported before the rotation) reads packs published after it until its key is retired, then is refused clearly and keeps what it has; build B (exported after the rotation) reads everything; depot fleet counts the builds without the staged key")
    func rotatePublishRetire() throws {
        let rig = try Rig("depot-keys-life")
        defer {
            rig.server.process.terminate()
            rig.work.remove()
        }
        let intro = try rig.publish("intro", size: 40_000, seed: 1)
        let a = try rig.export("a.json")
        let k1 = try #require(a.packKeys.keys.first)
        #expect(a.packKeys.count == 1)

        // Rotate: the next key is staged, not used yet, and the command says what comes next.
        let rotated = try rig.admin(["keys", "rotate", "--app", Self.app])
        #expect(rotated.status == 0, "\(rotated.stderr)")
        let k2 = try #require(Self.keyID(in: rotated.stdout), "\(rotated.stdout)")
        #expect(k2 != k1)
        #expect(rotated.stdout.contains("staged key \(k2)") && rotated.stdout.contains("depot keys export") && rotated.stdout.contains("depot fleet")
                    && rotated.stdout.contains("depot keys retire --app \(Self.app) \(k1)"), "\(rotated.stdout)")

        // P2, published after the rotation: build A reads it (before: it had no key for it).
        let levels2 = try rig.publish("levels", size: 70_000, seed: 2)
        let first = try rig.sync("a.json", device: "device-a", report: true)
        #expect(first.status == 0, "build A reads packs published after the rotation: \(first.stderr)")
        #expect(try rig.installed("device-a", "levels") == FileSystem.readFile(levels2))

        // Build B carries both keys.
        let b = try rig.export("b.json")
        #expect(Set(b.packKeys.keys) == [k1, k2])
        let fromB = try rig.sync("b.json", device: "device-b", report: true)
        #expect(fromB.status == 0, "\(fromB.stderr)")
        #expect(try rig.installed("device-b", "levels") == FileSystem.readFile(levels2) && rig.installed("device-b", "intro") == FileSystem.readFile(intro))

        // The fleet: of the two reports, one comes from a build without the staged key.
        let fleet = try Processes.run(Self.depot, ["fleet", "--server", rig.server.url, "--app", Self.app, "--token", rig.token, "--days", "7"])
        #expect(fleet.status == 0, "\(fleet.stderr)")
        #expect(fleet.stdout.contains("key \(k2) (staged): 1 of 2 reports in 7 days come from builds without it"), "\(fleet.stdout)")
        #expect(fleet.stdout.contains("key \(k1) (current): 0 of 2 reports in 7 days come from builds without it"), "\(fleet.stdout)")

        // Retire k1 (the origin running): k2 becomes current, and the command says what it means.
        let retired = try rig.admin(["keys", "retire", "--app", Self.app, k1])
        #expect(retired.status == 0, "\(retired.stderr)")
        #expect(retired.stdout.contains("new packs of \(Self.app) are encrypted with key \(k2)"), "\(retired.stdout)")
        #expect(retired.stdout.contains("2 packs of the live releases stay encrypted under \(k1)"), "\(retired.stdout)")

        // P3: a new revision of levels, under k2. Build A is refused with what to do, and keeps P2.
        let levels3 = try rig.publish("levels", size: 70_001, seed: 3)
        let refused = try rig.sync("a.json", device: "device-a")
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("pack levels") && refused.stderr.contains("\"\(k2)\"") && refused.stderr.contains(k1)
                    && refused.stderr.contains("this build's keys were retired: ship a build with the current configuration (`depot keys export`)"), "\(refused.stderr)")
        #expect(try rig.installed("device-a", "levels") == FileSystem.readFile(levels2), "build A keeps its installed copy")
        #expect(try rig.installed("device-a", "intro") == FileSystem.readFile(intro))

        // Build B reads P3, and the older pack still under k1.
        let again = try rig.sync("b.json", device: "device-b")
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try rig.installed("device-b", "levels") == FileSystem.readFile(levels3) && rig.installed("device-b", "intro") == FileSystem.readFile(intro))
        // A configuration exported now still carries k1: the live pack intro is encrypted under it.
        let c = try rig.export("c.json")
        #expect(Set(c.packKeys.keys) == [k1, k2])
        let fromC = try rig.sync("c.json", device: "device-c")
        #expect(fromC.status == 0, "\(fromC.stderr)")
        #expect(try rig.installed("device-c", "levels") == FileSystem.readFile(levels3) && rig.installed("device-c", "intro") == FileSystem.readFile(intro))
    }

    @Test("A leaked key with none staged: retire refuses without --yes and changes nothing; with it a fresh key is current at once and the consequence is stated with figures; a configuration exported after it reads the older live packs")
    func leakedKey() throws {
        var rig = try Rig("depot-keys-leak")
        defer {
            rig.server.process.terminate()
            rig.work.remove()
        }
        let intro = try rig.publish("intro", size: 30_000, seed: 4)
        let a = try rig.export("a.json")
        let k1 = try #require(a.packKeys.keys.first)
        #expect(try rig.sync("a.json", device: "device-a", report: true).status == 0)
        // Stopped, the origin has written its counts: retire reads them from the data folder.
        try rig.restart()

        let before = try FileSystem.readFile(rig.keyFile)
        let refused = try rig.admin(["keys", "retire", "--app", Self.app, k1])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("--yes") && refused.stderr.contains("no key is staged"), "\(refused.stderr)")
        #expect(try FileSystem.readFile(rig.keyFile) == before, "nothing changed")

        let retired = try rig.admin(["keys", "retire", "--app", Self.app, k1, "--yes"])
        #expect(retired.status == 0, "\(retired.stderr)")
        let k2 = try #require(Self.keyID(in: retired.stdout.replacingOccurrences(of: k1, with: "")), "\(retired.stdout)")
        #expect(retired.stdout.contains("new packs of \(Self.app) are encrypted with key \(k2)"), "\(retired.stdout)")
        #expect(retired.stdout.contains("1 of 1 reports in the last 7 days come from builds without \(k2)"), "\(retired.stdout)")
        #expect(retired.stdout.contains("1 packs of the live releases stay encrypted under \(k1)"), "\(retired.stdout)")

        // Published now: under the fresh key. A configuration exported now reads it and the older pack.
        let levels = try rig.publish("levels", size: 50_000, seed: 5)
        let c = try rig.export("c.json")
        #expect(Set(c.packKeys.keys) == [k1, k2], "k1 stays exported while the live pack intro uses it")
        let fromC = try rig.sync("c.json", device: "device-c")
        #expect(fromC.status == 0, "\(fromC.stderr)")
        #expect(try rig.installed("device-c", "levels") == FileSystem.readFile(levels) && rig.installed("device-c", "intro") == FileSystem.readFile(intro))
        // Build A cannot read what is published from now on.
        let stranded = try rig.sync("a.json", device: "device-a")
        #expect(stranded.status != 0 && stranded.stderr.contains("this build's keys were retired"), "\(stranded.stderr)")

        // intro republished, the same bytes: encrypted under k2 now (a new revision), and k1 is
        // no longer exported.
        _ = try rig.publish("intro", size: 30_000, seed: 4)
        #expect(Set(try rig.export("d.json").packKeys.keys) == [k2])
        let fromD = try rig.sync("d.json", device: "device-d")
        #expect(fromD.status == 0, "\(fromD.stderr)")
        #expect(try rig.installed("device-d", "intro") == FileSystem.readFile(intro))

        // Release 1 (intro under k1, which no live release uses now) promoted to a channel: refused
        // before anything moves, naming the pack and the key; accepted only when asked.
        func promote(_ extra: [String]) throws -> Processes.Result {
            try Processes.run(Self.depot, [
                "channels", "promote", "--server", rig.server.url, "--app", Self.app, "--token", rig.token, "--channel", "beta", "--release", "1",
            ] + extra)
        }
        let refusedPromotion = try promote([])
        #expect(refusedPromotion.status != 0 && refusedPromotion.stderr.contains("409: retired_pack_key"), "\(refusedPromotion.stderr)")
        #expect(refusedPromotion.stderr.contains("release 1's pack intro is encrypted under pack key \(k1), retired on ") && refusedPromotion.stderr.contains("--accept-retired-keys"), "\(refusedPromotion.stderr)")
        func betaStatus() throws -> Int? {
            try RawHTTP.send(port: UInt16(rig.server.port)!, "GET /v1/apps/\(Self.app)/channels/beta/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first?.status
        }
        #expect(try betaStatus() == 404, "nothing moved")
        let accepted = try promote(["--accept-retired-keys"])
        #expect(accepted.status == 0 && accepted.stdout.contains("beta now serves release 1"), "\(accepted.stdout)\(accepted.stderr)")
        #expect(try betaStatus() == 200)
        #expect(Set(try rig.export("e.json").packKeys.keys) == [k1, k2], "k1 is exported again while beta serves intro under it")
    }

    @Test("Retiring a staged key drops it; an unknown or already retired key is refused with exit 1 and the key file unchanged byte for byte")
    func retireStagedAndUnknown() throws {
        let work = TemporaryDirectory("depot-keys-retire")
        defer { work.remove() }
        let data = work.path + "/data"
        func admin(_ arguments: [String]) throws -> Processes.Result { try Processes.run(Self.depot, arguments + ["--data", data]) }
        #expect(try admin(["apps", "create", "com.example.game"]).status == 0)
        let keyFile = data + "/keys/com.example.game.json"
        let k1 = try #require(try ClientConfiguration.decode(Array(admin(["keys", "export", "--app", "com.example.game"]).stdout.utf8)).packKeys.keys.first)
        let k2 = try #require(Self.keyID(in: try admin(["keys", "rotate", "--app", "com.example.game"]).stdout))
        let k3 = try #require(Self.keyID(in: try admin(["keys", "rotate", "--app", "com.example.game"]).stdout))
        #expect(Set([k1, k2, k3]).count == 3)

        let dropped = try admin(["keys", "retire", "--app", "com.example.game", k2])
        #expect(dropped.status == 0, "\(dropped.stderr)")
        #expect(dropped.stdout.contains("staged key \(k2) of com.example.game dropped"), "\(dropped.stdout)")
        #expect(Set(try ClientConfiguration.decode(Array(admin(["keys", "export", "--app", "com.example.game"]).stdout.utf8)).packKeys.keys) == [k1, k3])

        let before = try FileSystem.readFile(keyFile)
        for (id, why) in [("k00000000", "has no pack key k00000000"), (k2, "has no pack key \(k2)"), ("not_a_key", "has no pack key not_a_key")] {
            let refused = try admin(["keys", "retire", "--app", "com.example.game", id])
            #expect(refused.status == 1 && refused.stderr.contains(why), "\(id): \(refused.stderr)")
            #expect(try FileSystem.readFile(keyFile) == before, "\(id): nothing changed")
        }
        // k1 retired (k3 becomes current); retiring it again is refused.
        #expect(try admin(["keys", "retire", "--app", "com.example.game", k1]).status == 0)
        let settled = try FileSystem.readFile(keyFile)
        let again = try admin(["keys", "retire", "--app", "com.example.game", k1])
        #expect(again.status == 1 && again.stderr.contains("pack key \(k1) of app com.example.game is already retired"), "\(again.stderr)")
        #expect(try FileSystem.readFile(keyFile) == settled)
        // An app that does not exist.
        let none = try admin(["keys", "retire", "--app", "com.example.none", k1])
        #expect(none.status == 1 && none.stderr.contains("com.example.none"), "\(none.stderr)")
    }
}
