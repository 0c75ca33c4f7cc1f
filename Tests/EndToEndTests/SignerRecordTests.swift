import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// The signer's record against numbers the origin issues again (issue 61): a release below the
/// last one the record holds, or equal to it with other packs, is refused unless confirmed; a
/// record written before it kept what it signed still works; `depot restore --floor N`
/// continues numbering from N. Real `depot serve`, real CLI.
@Suite("End to end: the signer's record refuses a number it signed before", .blocking)
struct SignerRecordTests {
    static let app = PackKeyLifeTests.app

    @Test("Below the recorded release: refused naming both ways out (restore --floor, or --confirm-release when the later one never went live), nothing written; confirmed: signed. The same number with other packs: refused; a record from before digests were kept: signed as before")
    func belowOrEqualIsRefused() throws {
        let rig = try ReleaseSignerTests.rootedRig("depot-signer-behind")
        defer {
            rig.server.process.terminate()
            rig.work.remove()
        }
        let first = try CompromisedOriginTests.publish(rig, "levels", Array("levels v1".utf8), channel: "beta")
        try ReleaseSignerTests.signerFiles(rig, "one", ["intro": "intro v1", "levels": "levels v1"])
        let signedFirst = try ReleaseSignerTests.promote(rig, first, ["--config", "rooted.json", "--root", "root-1.json", "--record", "record.json", "--packs", "one"])
        #expect(signedFirst.status == 0, "\(signedFirst.stderr)")
        let second = try CompromisedOriginTests.publish(rig, "levels", Array("levels v2".utf8), channel: "beta")
        try ReleaseSignerTests.signerFiles(rig, "two", ["intro": "intro v1", "levels": "levels v2"])
        let signedSecond = try ReleaseSignerTests.promote(rig, second, ["--config", "rooted.json", "--record", "record.json", "--packs", "two"])
        #expect(signedSecond.status == 0, "\(signedSecond.stderr)")

        func sign(_ release: Int, _ files: String, _ extra: [String] = [], out: String) throws -> Processes.Result {
            try ReleaseSignerRootTests.sign(rig, release, ["--config", "rooted.json", "--record", "record.json", "--packs", files] + extra, out: out)
        }
        let below = try sign(first, "one", out: "below.json")
        #expect(below.status != 0, "\(below.stdout)")
        #expect(below.stderr.contains("release \(first) is below release \(second), which you signed for channel production (record.json)"), "\(below.stderr)")
        #expect(below.stderr.contains("depot restore --data DATA --floor \(second + 1)") && below.stderr.contains("sign with --confirm-release \(first)"), "\(below.stderr)")
        #expect(!FileSystem.exists(rig.work.path + "/below.json"))
        let confirmed = try sign(first, "one", ["--confirm-release", "\(first)"], out: "below.json")
        #expect(confirmed.status == 0 && FileSystem.exists(rig.work.path + "/below.json"), "\(confirmed.stderr)")

        // The record says release `second` bound other packs than it does now.
        let path = rig.work.path + "/record.json"
        var record = try #require(try JSONSerialization.jsonObject(with: Data(FileSystem.readFile(path))) as? [String: Any])
        #expect((record["digests"] as? [String: String])?["production"]?.hasSuffix("/2") == true, "\(record)")
        record["digests"] = ["production": String(repeating: "0", count: 64) + "/2"]
        try FileSystem.writeAtomically(Array(try JSONSerialization.data(withJSONObject: record)), to: path)
        let other = try sign(second, "two", out: "equal.json")
        #expect(other.status != 0 && other.stderr.contains("release \(second) of channel production holds other packs than the release \(second) you signed (record.json)"), "\(other.stderr)")
        #expect(!FileSystem.exists(rig.work.path + "/equal.json"))
        // A record written before digests were kept: the same number is signed again, as before.
        record["digests"] = nil
        try FileSystem.writeAtomically(Array(try JSONSerialization.data(withJSONObject: record)), to: path)
        let again = try sign(second, "two", out: "equal.json")
        #expect(again.status == 0, "\(again.stderr)")
        let rewritten = try #require(try JSONSerialization.jsonObject(with: Data(FileSystem.readFile(path))) as? [String: Any])
        #expect((rewritten["digests"] as? [String: String])?["production"] != nil, "the signature keeps what it bound")
    }

    @Test("depot restore --floor N: numbers continue from N (above the Unix time), a floor past 2^52 is refused; restored again, numbers continue above every release the folder set aside shows, but not above a floor no honest origin sets (said so); a clock before the backup's time numbers above that time; two restores within one second set the folders aside as …Z and …Z-2")
    func restoreWithAFloor() throws {
        let work = TemporaryDirectory("depot-restore-floor")
        defer { work.remove() }
        let data = work.path + "/data"
        let server = try ServeProcess(data: data, environment: [:])
        let file = try work.file("pack.bin", size: 5000, seed: 3)
        let common = ["--server", server.url, "--app", "com.example.dev", "--token", server.token]
        #expect(try Processes.run(Processes.depotBinary, ["publish", file, "--pack", "level", "--release", "--quiet"] + common).status == 0)
        let backup = work.path + "/backup"
        #expect(try Processes.run(Processes.depotBinary, ["backup", "--data", data, backup]).status == 0)
        let port = server.port
        server.process.terminate()
        server.process.waitUntilExit()

        let tooHigh = try Processes.run(Processes.depotBinary, ["restore", "--data", data, "--replace", backup, "--floor", "\(Int64(1) << 52)"])
        #expect(tooHigh.status != 0 && tooHigh.stderr.contains("--floor takes a release number from 1 to 2^52"), "\(tooHigh.stderr)")
        let floor = Int(Date().timeIntervalSince1970) + 3_600  // ahead of the clock, below the Unix time plus a day
        let restored = try Processes.run(Processes.depotBinary, ["restore", "--data", data, "--replace", backup, "--floor", "\(floor)"])
        #expect(restored.status == 0 && restored.stdout.contains("release numbers continue from \(floor)"), "\(restored.stdout)\(restored.stderr)")
        let again = try ServeProcess(data: data, environment: ["DEPOT_LISTEN": "127.0.0.1:\(port)"], bootstrap: false)
        defer { again.process.terminate() }
        let changed = try work.file("pack2.bin", size: 5000, seed: 4)
        let published = try Processes.run(Processes.depotBinary, ["publish", changed, "--pack", "level", "--release"] + common)
        #expect(published.status == 0 && published.stdout.contains("release \(floor) "), "\(published.stdout)\(published.stderr)")
        let third = try work.file("pack3.bin", size: 5000, seed: 5)
        #expect(try Processes.run(Processes.depotBinary, ["publish", third, "--pack", "level", "--release", "--quiet"] + common).status == 0)
        again.process.terminate()
        again.process.waitUntilExit()

        // The same backup restored again, with no --floor: above every number the folder set aside
        // shows (issue 62: before, the Unix time, below the releases issued since the first restore).
        let retaken = try Processes.run(Processes.depotBinary, ["restore", "--data", data, "--replace", backup])
        #expect(retaken.status == 0 && retaken.stdout.contains("release numbers continue from \(floor + 2)"), "floor \(floor): \(retaken.stdout) || \(retaken.stderr)")
        // A floor an attacker inflated in the folder set aside is not taken, and said so.
        let inflated = Int(Date().timeIntervalSince1970) + 10 * 365 * 86_400
        try FileSystem.writeAtomically(Array("\(inflated)\n".utf8), to: data + "/release-floor")
        let ignored = try Processes.run(Processes.depotBinary, ["restore", "--data", data, "--replace", backup])
        #expect(ignored.status == 0 && ignored.stdout.contains("shows release \(inflated - 1), above the Unix time plus a day") && ignored.stdout.contains("--floor \(inflated)"), "\(ignored.stdout)\(ignored.stderr)")
        #expect(!ignored.stdout.contains("continue from \(inflated)"))

        // Two restores at one instant: the second sets the first's folder aside under -2. The
        // instant is before the backup was taken (a clock set back): numbers continue above its time.
        let record = try DataRestore.record(of: backup)
        let now = record.takenAt.addingTimeInterval(-86_400)
        _ = try DataRestore.restore(backup: backup, into: data, replace: true, now: now)
        let second = try DataRestore.restore(backup: backup, into: data, replace: true, now: now)
        let aside = try #require(second.setAside)
        #expect(aside.hasSuffix("Z-2"), "\(aside)")
        #expect(FileSystem.isDirectory(String(aside.dropLast(2))) && FileSystem.isDirectory(aside))
        #expect(second.floor >= Int(record.takenAt.timeIntervalSince1970) && second.notTaken == nil, "\(second.floor) \(String(describing: second.notTaken))")
        // Numbers no Int holds, or at its edges, in the folder set aside: named, never a crash.
        try FileSystem.writeAtomically(Array("-9223372036854775808\n".utf8), to: data + "/release-floor")
        try FileSystem.writeAtomically(Array("9223372036854775807\n".utf8), to: data + "/apps/com.example.dev/head")
        let edges = try Processes.run(Processes.depotBinary, ["restore", "--data", data, "--replace", backup])
        #expect(edges.status == 0 && edges.stdout.contains("shows release 9223372036854775807") && edges.stdout.contains("beyond any floor a restore sets"), "\(edges.stdout)\(edges.stderr)")
    }
}
