import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Issue 61: the signer's trust does not pass through the host. An attacker holding the data
/// folder replaces the app's root with one of its own (its own root and release keys), so that a
/// configuration exported afterwards pins it; the signer, giving their own root file (`--root`),
/// refuses — naming the version and both hashes — and writes nothing; `depot keys export --root`
/// prints nothing. And a release number no honest origin issues is signed only when confirmed.
/// Real `depot serve`, real CLI.
@Suite("End to end: the signer's own root and release numbers, not the host's")
struct ReleaseSignerRootTests {
    typealias Rig = PackKeyLifeTests.Rig
    static let app = PackKeyLifeTests.app

    static func depot(_ rig: Rig, _ arguments: [String]) throws -> Processes.Result { try CompromisedOriginTests.depot(rig, arguments) }

    static func sign(_ rig: Rig, _ release: Int, _ arguments: [String], out: String) throws -> Processes.Result {
        try depot(rig, ["release", "sign", "--server", rig.server.url, "--app", app, "--release", "\(release)", "--key", "release-key.json", "--out", out] + arguments)
    }

    @Test("The host's roots/000001.json replaced by the attacker's root: a configuration exported afterwards pins it; with --root (the operator's file) release sign refuses, naming version 1 and both hashes, whichever configuration is given, and writes nothing; keys export --root prints nothing; the honest flow with --root signs as before")
    func aReplacedRootIsRefusedByTheSignersOwnFile() throws {
        var rig = try ReleaseSignerTests.rootedRig("depot-signer-root")
        defer {
            rig.server.process.terminate()
            rig.work.remove()
        }
        // The honest flow with --root: signed and promoted.
        let first = try CompromisedOriginTests.publish(rig, "levels", Array("levels v1".utf8), channel: "beta")
        try ReleaseSignerTests.signerFiles(rig, "signer", ["intro": "intro v1", "levels": "levels v1"])
        let promoted = try ReleaseSignerTests.promote(rig, first, ["--config", "rooted.json", "--root", "root-1.json", "--packs", "signer"])
        #expect(promoted.status == 0, "\(promoted.stdout)\(promoted.stderr)")
        #expect(promoted.stdout.contains("checked against your root version 1 (--root)"), "\(promoted.stdout)")
        #expect(!promoted.stderr.contains("note: the root you check against"), "\(promoted.stderr)")
        let honestExport = try Self.depot(rig, ["keys", "export", "--app", Self.app, "--data", rig.data, "--root", "root-1.json"])
        #expect(honestExport.status == 0, "\(honestExport.stderr)")
        let exported = try ClientConfiguration.decode(Array(honestExport.stdout.utf8))
        #expect(try exported.root == ClientConfiguration.decode(FileSystem.readFile(rig.work.path + "/rooted.json")).root && exported.releaseFloors?["production"] == first)

        // The attacker's root, signed with its own keys, over roots/000001.json; the origin restarted.
        for name in ["evil-root.json", "evil-release.json"] { #expect(try Self.depot(rig, ["root", "keygen", "--out", name]).status == 0) }
        let evilRelease = try OfflineKeyFile.publicText(OfflineKeyFile.load(FileSystem.readFile(rig.work.path + "/evil-release.json"), path: "evil-release.json").publicKey)
        let evilSigned = try Self.depot(rig, [
            "root", "sign", "--app", Self.app, "--key", "evil-root.json", "--online-keys-from", "online.json", "--release-key", evilRelease, "--out", "evil-1.json",
        ])
        #expect(evilSigned.status == 0, "\(evilSigned.stderr)")
        let genuine = try FileSystem.readFile(rig.work.path + "/root-1.json")
        let genuineSHA = try #require(OfflineRootsDigest.of(genuine))
        let evil = try FileSystem.readFile(rig.work.path + "/evil-1.json")
        let evilSHA = try #require(OfflineRootsDigest.of(evil))
        try FileSystem.writeAtomically(evil, to: DataFolder(rig.data).rootDocument(Self.app, version: 1))
        try rig.restart()
        #expect(try Eventually.wait { try Envelope.decode(CompromisedOriginTests.served(rig)).roots?.first.flatMap { OfflineRootsDigest.of($0.encoded()) } == evilSHA })

        // The export a signer would be told to make: pins the attacker's root without --root; with it, nothing.
        let reexported = try Self.depot(rig, ["keys", "export", "--app", Self.app, "--data", rig.data])
        try FileSystem.writeAtomically(Array(reexported.stdout.utf8), to: rig.work.path + "/reexported.json")
        let refusedExport = try Self.depot(rig, ["keys", "export", "--app", Self.app, "--data", rig.data, "--root", "root-1.json"])
        #expect(refusedExport.status != 0 && refusedExport.stdout.isEmpty, "\(refusedExport.stdout)")
        #expect(refusedExport.stderr.contains("the data folder's roots/ carries root version 1 with sha256 \(evilSHA), not your root version 1 (sha256 \(genuineSHA))"), "\(refusedExport.stderr)")

        let second = try CompromisedOriginTests.publish(rig, "levels", Array("levels v2".utf8), channel: "beta")
        try ReleaseSignerTests.signerFiles(rig, "next", ["levels": "levels v2"])
        let withReexported = try Self.sign(rig, second, ["--config", "reexported.json", "--root", "root-1.json", "--packs", "next"], out: "s1.json")
        #expect(withReexported.status != 0, "\(withReexported.stdout)")
        #expect(withReexported.stderr.contains("reexported.json pins root version 1 with sha256 \(evilSHA), not your root version 1 (sha256 \(genuineSHA))"), "\(withReexported.stderr)")
        let withGenuine = try Self.sign(rig, second, ["--config", "rooted.json", "--root", "root-1.json", "--packs", "next"], out: "s2.json")
        #expect(withGenuine.status != 0, "\(withGenuine.stdout)")
        #expect(withGenuine.stderr.contains("release \(second) as the origin serves it carries root version 1 with sha256 \(evilSHA), not your root version 1 (sha256 \(genuineSHA))"), "\(withGenuine.stderr)")
        let promotedAnyway = try ReleaseSignerTests.promote(rig, second, ["--config", "reexported.json", "--root", "root-1.json", "--packs", "next"])
        #expect(promotedAnyway.status != 0 && promotedAnyway.stderr.contains("not your root version 1"), "\(promotedAnyway.stderr)")
        #expect(!FileSystem.exists(rig.work.path + "/s1.json") && !FileSystem.exists(rig.work.path + "/s2.json"))
        #expect(ReleaseSignerTests.statements(rig) == [String(format: "%06d.json", first)], "no statement reached the origin")
        // Without --root, the signer is told where its root came from.
        let bare = try Self.sign(rig, second, ["--config", "reexported.json", "--packs", "next"], out: "s3.json")
        #expect(bare.stderr.contains("note: the root you check against is the one reexported.json pins, which depot keys export read from the origin's data folder"), "\(bare.stderr)")
        // --root files that are not one chain are refused as such.
        let mixed = try Self.sign(rig, second, ["--config", "rooted.json", "--root", "root-1.json", "--root", "evil-1.json", "--packs", "next"], out: "s4.json")
        #expect(mixed.status != 0 && mixed.stderr.contains("root-1.json and evil-1.json are both root version 1"), "\(mixed.stderr)")
    }

    @Test("The signer's record (--record): written at the first signature (the root walked to, the release signed, mode 0600), the root trusted at the next without --root; a host showing an older signed release as the baseline gets nothing past it though the configuration is stale, where without the record the old pack passes as unchanged")
    func theSignersRecordBoundsTheBaseline() throws {
        var rig = try ReleaseSignerTests.rootedRig("depot-signer-record")
        defer {
            rig.server.process.terminate()
            rig.work.remove()
        }
        let first = try CompromisedOriginTests.publish(rig, "levels", Array("levels v1".utf8), channel: "beta")
        try ReleaseSignerTests.signerFiles(rig, "one", ["intro": "intro v1", "levels": "levels v1"])
        // A record starts from the operator's own root files, never from what the host exported.
        let unanchored = try ReleaseSignerTests.promote(rig, first, ["--config", "rooted.json", "--record", "record.json", "--packs", "one"])
        #expect(unanchored.status != 0 && unanchored.stderr.contains("a record starts from your own root files"), "\(unanchored.stderr)")
        #expect(!FileSystem.exists(rig.work.path + "/record.json") && ReleaseSignerTests.statements(rig).isEmpty)
        let signedFirst = try ReleaseSignerTests.promote(rig, first, ["--config", "rooted.json", "--root", "root-1.json", "--record", "record.json", "--packs", "one"])
        #expect(signedFirst.status == 0, "\(signedFirst.stderr)")
        let firstLive = try CompromisedOriginTests.served(rig)
        let second = try CompromisedOriginTests.publish(rig, "levels", Array("levels v2".utf8), channel: "beta")
        try ReleaseSignerTests.signerFiles(rig, "two", ["levels": "levels v2"])
        let signedSecond = try ReleaseSignerTests.promote(rig, second, ["--config", "rooted.json", "--record", "record.json", "--packs", "two"])
        #expect(signedSecond.status == 0, "\(signedSecond.stderr)")
        #expect(signedSecond.stdout.contains("checked against your root version 1 (your record)"), "\(signedSecond.stdout)")
        let record = try #require(try JSONSerialization.jsonObject(with: Data(FileSystem.readFile(rig.work.path + "/record.json"))) as? [String: Any])
        #expect((record["signed"] as? [String: Int])?["production"] == second && record["rootVersion"] as? Int == 1, "\(record)")
        var info = stat()
        #expect(stat(rig.work.path + "/record.json", &info) == 0 && info.st_mode & 0o777 == 0o600)

        // rooted.json is not exported again (its floors predate both releases). The attacker shows
        // release `first` as production's live one and puts its levels into the next release.
        let next = try CompromisedOriginTests.publish(rig, "intro", Array("intro v2".utf8), channel: "beta")
        let firstPacks = try TrustFixture.manifest(firstLive).packs
        let oldLevels = try #require(firstPacks.first { $0.id == "levels" })
        let nextPacks = try TrustFixture.manifest(FileSystem.readFile(DataFolder(rig.data).release(Self.app, next))).packs
        _ = try CompromisedOriginTests.forge(&rig, packs: firstPacks, like: firstLive, version: next + 1)
        try ReleaseSignerTests.rewrite(&rig, release: next, packs: nextPacks.filter { $0.id != "levels" } + [oldLevels])
        try ReleaseSignerTests.signerFiles(rig, "three", ["intro": "intro v2"])
        let refused = try Self.sign(rig, next, ["--config", "rooted.json", "--record", "record.json", "--packs", "three"], out: "s.json")
        #expect(refused.status != 0, "\(refused.stdout)")
        #expect(refused.stderr.contains("shows release \(first), older than release \(second), which your configuration was exported at or you last signed"), "\(refused.stderr)")
        #expect(refused.stderr.contains("levels revision \(oldLevels.revision): changed since the last signed release, and no file named levels"), "\(refused.stderr)")
        #expect(!FileSystem.exists(rig.work.path + "/s.json"))
        // What the record prevents: with the stale configuration alone, the old levels pass as unchanged.
        let fooled = try Self.sign(rig, next, ["--config", "rooted.json", "--root", "root-1.json", "--packs", "three"], out: "fooled.json")
        #expect(fooled.status == 0 && fooled.stdout.contains("levels revision \(oldLevels.revision): unchanged since release \(first) (signed)"), "\(fooled.stdout)\(fooled.stderr)")
    }

    @Test("A root version after the operator's newest file (one the holder of a retired root key could have made) is trusted only from the operator's own file of it: release sign, --sign and keys export refuse naming the versions; with root-2.json given they sign, and the record then holds version 2")
    func aVersionAfterYourNewestFileNeedsYourFile() throws {
        let rig = try ReleaseSignerTests.rootedRig("depot-signer-beyond")
        defer {
            rig.server.process.terminate()
            rig.work.remove()
        }
        let first = try CompromisedOriginTests.publish(rig, "levels", Array("levels v1".utf8), channel: "beta")
        try ReleaseSignerTests.signerFiles(rig, "one", ["intro": "intro v1", "levels": "levels v1"])
        #expect(try ReleaseSignerTests.promote(rig, first, ["--config", "rooted.json", "--root", "root-1.json", "--record", "record.json", "--packs", "one"]).status == 0)
        // Version 2, signed with version 1's root key (as a rotation is, and as a retired key's holder could).
        let signed = try Self.depot(rig, ["root", "sign", "--app", Self.app, "--previous", "root-1.json", "--key", "root-key.json", "--out", "root-2.json"])
        #expect(signed.status == 0, "\(signed.stderr)")
        #expect(try rig.admin(["root", "add", "--app", Self.app, rig.work.path + "/root-2.json"]).status == 0)
        #expect(try Eventually.wait { try Envelope.decode(CompromisedOriginTests.served(rig)).roots?.count == 2 })
        let second = try CompromisedOriginTests.publish(rig, "levels", Array("levels v2".utf8), channel: "beta")
        try ReleaseSignerTests.signerFiles(rig, "two", ["levels": "levels v2"])
        for arguments in [["--root", "root-1.json"], ["--record", "record.json"]] {
            let refused = try Self.sign(rig, second, ["--config", "rooted.json", "--packs", "two"] + arguments, out: "s.json")
            #expect(refused.status != 0 && refused.stderr.contains("release \(second) as the origin serves it carries root version 2, after your newest (version 1)") && refused.stderr.contains("--root root-2.json"), "\(arguments): \(refused.stderr)")
            #expect(!FileSystem.exists(rig.work.path + "/s.json"))
        }
        let export = try Self.depot(rig, ["keys", "export", "--app", Self.app, "--data", rig.data, "--root", "root-1.json"])
        #expect(export.status != 0 && export.stdout.isEmpty && export.stderr.contains("the data folder's roots/ carries root version 2, after your newest (version 1)"), "\(export.stderr)")
        let withFile = try Self.sign(rig, second, ["--config", "rooted.json", "--root", "root-2.json", "--record", "record.json", "--packs", "two"], out: "s.json")
        #expect(withFile.status == 0 && withFile.stdout.contains("checked against your root version 2 (--root)"), "\(withFile.stdout)\(withFile.stderr)")
        let record = try #require(try JSONSerialization.jsonObject(with: Data(FileSystem.readFile(rig.work.path + "/record.json"))) as? [String: Any])
        #expect(record["rootVersion"] as? Int == 2 && (record["signed"] as? [String: Int])?["production"] == second, "\(record)")
        let exported = try Self.depot(rig, ["keys", "export", "--app", Self.app, "--data", rig.data, "--root", "root-1.json", "--root", "root-2.json"])
        #expect(exported.status == 0, "\(exported.stderr)")
    }

    @Test("A release number above the Unix time plus a day (a release floor of the year 2100 set on the host) is refused by release sign and --sign unless confirmed with that exact number; a device never takes a statement above 2^52")
    func anInflatedReleaseNumberNeedsConfirming() throws {
        var rig = try ReleaseSignerTests.rootedRig("depot-signer-numbers")
        defer {
            rig.server.process.terminate()
            rig.work.remove()
        }
        try FileSystem.writeAtomically(Array("4102444800\n".utf8), to: rig.data + "/release-floor")
        try rig.restart()
        let inflated = try CompromisedOriginTests.publish(rig, "levels", Array("levels v1".utf8), channel: "beta")
        #expect(inflated >= 4_102_444_800)
        try ReleaseSignerTests.signerFiles(rig, "signer", ["intro": "intro v1", "levels": "levels v1"])
        let refused = try Self.sign(rig, inflated, ["--config", "rooted.json", "--root", "root-1.json", "--packs", "signer"], out: "s.json")
        #expect(refused.status != 0 && refused.stderr.contains("release \(inflated) is above") && refused.stderr.contains("--confirm-release \(inflated)"), "\(refused.stderr)")
        #expect(!FileSystem.exists(rig.work.path + "/s.json"))
        let promoteRefused = try ReleaseSignerTests.promote(rig, inflated, ["--config", "rooted.json", "--root", "root-1.json", "--packs", "signer"])
        #expect(promoteRefused.status != 0 && promoteRefused.stderr.contains("a number no honest origin issues"), "\(promoteRefused.stderr)")
        let wrongNumber = try Self.sign(rig, inflated, ["--config", "rooted.json", "--root", "root-1.json", "--packs", "signer", "--confirm-release", "\(inflated - 1)"], out: "s.json")
        #expect(wrongNumber.status != 0 && !FileSystem.exists(rig.work.path + "/s.json"))
        let confirmed = try Self.sign(rig, inflated, ["--config", "rooted.json", "--root", "root-1.json", "--packs", "signer", "--confirm-release", "\(inflated)"], out: "s.json")
        #expect(confirmed.status == 0 && FileSystem.exists(rig.work.path + "/s.json"), "\(confirmed.stderr)")
        let capped = try Self.sign(rig, inflated, ["--config", "rooted.json", "--root", "root-1.json", "--packs", "signer", "--confirm-release", "\(1 << 52)"], out: "c.json")
        #expect(capped.status != 0 && !FileSystem.exists(rig.work.path + "/c.json"))
        // The statement format's own bound: a number above 2^52 is never taken.
        let statement = ReleaseStatement(app: Self.app, channel: "production", release: ReleaseStatement.maximumRelease + 1, signedAt: Date(), packs: [])
        #expect(throws: TrustError.self) { try ReleaseStatement.decode(statement.encoded()) }
        #expect(try ReleaseStatement.decode(ReleaseStatement(app: Self.app, channel: "production", release: ReleaseStatement.maximumRelease, signedAt: Date(), packs: []).encoded()).release == 1 << 52)
    }
}

/// The SHA-256 of a root file's signed payload, as the CLI names it.
enum OfflineRootsDigest {
    static func of(_ bytes: [UInt8]) -> String? {
        guard let envelope = try? Envelope.decode(bytes), let payload = envelope.payloadBytes else { return nil }
        return Hex.encode(SHA256Hasher.hash(payload))
    }
}
