import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Issue 52, review finding H1: a release key signs only what the signer checked against a source
/// the origin does not control — their exported configuration (the root, the pack keys) and their
/// own pack files. An attacker holding the origin (the data folder, every online and pack key)
/// rewrites the release the signer is asked to sign; the real `depot` CLI refuses to sign it, and
/// no statement reaches the origin. Real `depot serve`, real CLI.
@Suite("End to end: the release signer checks packs against its own files, not the origin's word")
struct ReleaseSignerTests {
    typealias Rig = PackKeyLifeTests.Rig
    static let app = PackKeyLifeTests.app

    /// An app with a pack on production from before its root, then a root (made and signed with
    /// the CLI, offline) protecting production; `rooted.json` is the configuration builds carry.
    static func rootedRig(_ label: String) throws -> Rig {
        let rig = try Rig(label)
        _ = try CompromisedOriginTests.publish(rig, "intro", Array("intro v1".utf8), channel: "production")
        _ = try rig.export("online.json")
        for name in ["root-key.json", "release-key.json"] { #expect(try CompromisedOriginTests.depot(rig, ["root", "keygen", "--out", name]).status == 0) }
        let releasePublic = try OfflineKeyFile.publicText(OfflineKeyFile.load(FileSystem.readFile(rig.work.path + "/release-key.json"), path: "release-key.json").publicKey)
        let signed = try CompromisedOriginTests.depot(rig, [
            "root", "sign", "--app", app, "--key", "root-key.json", "--online-keys-from", "online.json", "--release-key", releasePublic, "--out", "root-1.json",
        ])
        #expect(signed.status == 0, "\(signed.stderr)")
        let added = try rig.admin(["root", "add", "--app", app, rig.work.path + "/root-1.json"])
        #expect(added.status == 0, "\(added.stderr)")
        _ = try rig.export("rooted.json")
        #expect(try Eventually.wait { try Envelope.decode(CompromisedOriginTests.served(rig)).roots?.count == 1 })
        return rig
    }

    /// `depot channels promote … --channel production --release N --sign release-key.json ARGS`,
    /// its temporary files in `tmp/` (``temporaryFiles(_:)``).
    static func promote(_ rig: Rig, _ release: Int, _ arguments: [String]) throws -> Processes.Result {
        try FileSystem.createDirectory(rig.work.path + "/tmp", durable: false)
        return try Processes.run(Processes.depotBinary, [
            "channels", "promote", "--server", rig.server.url, "--app", app, "--token", rig.token, "--channel", "production", "--release", "\(release)",
            "--sign", "release-key.json",
        ] + arguments, environment: ["TMPDIR": rig.work.path + "/tmp"], cwd: rig.work.path)
    }

    /// What the promotions left in their temporary folder (the downloaded containers must be gone).
    static func temporaryFiles(_ rig: Rig) -> [String] { FileSystem.contents(of: rig.work.path + "/tmp") }

    /// The signer's folder `name` of pack files (replaced), as they published them.
    static func signerFiles(_ rig: Rig, _ name: String, _ files: [String: String]) throws {
        let folder = rig.work.path + "/" + name
        if !FileSystem.isDirectory(folder) { try FileSystem.createDirectory(folder) }
        for (file, text) in files { try FileSystem.writeAtomically(Array(text.utf8), to: folder + "/" + file) }
    }

    /// levels v1 published on beta, then signed with the signer's files (`files`: intro and
    /// levels) and promoted to production: the release every attack starts from.
    static func firstSignedRelease(_ rig: Rig, files: String) throws -> Int {
        let first = try CompromisedOriginTests.publish(rig, "levels", Array("levels v1".utf8), channel: "beta")
        try signerFiles(rig, files, ["intro": "intro v1", "levels": "levels v1"])
        #expect(try promote(rig, first, ["--config", "rooted.json", "--packs", files]).status == 0)
        return first
    }

    /// The statements production has accepted.
    static func statements(_ rig: Rig) -> [String] { FileSystem.contents(of: rig.data + "/apps/\(app)/statements/production").filter { $0.hasSuffix(".json") } }

    static func sha256(_ text: String) -> String { Hex.encode(SHA256Hasher.hash(Array(text.utf8))) }

    /// The attacker's step: release `release`'s file rewritten to hold `packs`, signed with every
    /// online key the data folder holds (carrying the roots and statements it carried), then the
    /// origin restarted: the origin serves it as release `release`.
    static func rewrite(_ rig: inout Rig, release: Int, packs: [PackEntry]) throws {
        let folder = DataFolder(rig.data)
        let bytes = try FileSystem.readFile(folder.release(app, release))
        let original = try Envelope.decode(bytes)
        var manifest = try TrustFixture.manifest(bytes)
        manifest.packs = packs
        var envelope = try Envelope.sign(manifest, with: AppStore(folder: folder).signingKeys())
        (envelope.roots, envelope.releases) = (original.roots, original.releases)
        try FileSystem.writeAtomically(envelope.encoded(), to: folder.release(app, release))
        try rig.restart()
        let served = try #require(try RawHTTP.send(port: UInt16(rig.server.port)!, "GET /v1/apps/\(app)/releases/\(release) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
        #expect(try TrustFixture.manifest(served.body).packs == packs, "the origin serves the attacker's release \(release)")
    }

    @Test("The honest path: --sign without --config is refused saying why; a release through beta is signed with --config and --packs (each pack's file matched, its container downloaded and decrypted) and promoted; the next release changing one pack needs only that pack's file, the other unchanged since the signed release")
    func honestPath() throws {
        let rig = try Self.rootedRig("depot-signer-honest")
        defer {
            rig.server.process.terminate()
            rig.work.remove()
        }
        let first = try CompromisedOriginTests.publish(rig, "levels", Array("levels v1".utf8), channel: "beta")

        let bare = try Self.promote(rig, first, [])
        #expect(bare.status != 0 && bare.stderr.contains("signing needs --config CONFIG.json") && bare.stderr.contains("pins the app's root of trust"), "\(bare.stderr)")
        let bareSign = try CompromisedOriginTests.depot(rig, ["release", "sign", "--server", rig.server.url, "--app", Self.app, "--release", "\(first)", "--key", "release-key.json", "--out", "s.json"])
        #expect(bareSign.status != 0 && bareSign.stderr.contains("signing needs --config CONFIG.json"), "\(bareSign.stderr)")
        #expect(!FileSystem.exists(rig.work.path + "/s.json"))

        // Production's live release was never signed: intro counts as changed, and needs its file.
        try Self.signerFiles(rig, "signer", ["levels.bin": "levels v1"])
        let missing = try Self.promote(rig, first, ["--config", "rooted.json", "--packs", "signer"])
        #expect(missing.status != 0 && missing.stderr.contains("intro revision 1: changed since the last signed release, and no file named intro"), "\(missing.stderr)")
        #expect(!missing.stderr.contains("levels revision"), "levels matched its file: \(missing.stderr)")
        #expect(Self.statements(rig).isEmpty, "nothing was uploaded")

        try Self.signerFiles(rig, "signer", ["intro.txt": "intro v1"])
        let promoted = try Self.promote(rig, first, ["--config", "rooted.json", "--packs", "signer"])
        #expect(promoted.status == 0, "\(promoted.stdout)\(promoted.stderr)")
        let lines = promoted.stdout.split(separator: "\n").map(String.init)
        #expect(lines.contains("  intro revision 1: matches signer/intro.txt (plaintext sha256 \(Self.sha256("intro v1")), 8 bytes; container checked) [application/octet-stream, 8 bytes installed]"), "\(promoted.stdout)")
        #expect(lines.contains("  levels revision 1: matches signer/levels.bin (plaintext sha256 \(Self.sha256("levels v1")), 9 bytes; container checked) [application/octet-stream, 9 bytes installed]"), "\(promoted.stdout)")
        let signedAt = try #require(lines.firstIndex { $0.hasPrefix("release \(first) is signed for production") }, "\(promoted.stdout)")
        #expect(lines.firstIndex { $0.contains("levels revision 1: matches") }! < signedAt, "the lines come before the signature")
        #expect(Self.statements(rig) == [String(format: "%06d.json", first)])

        // The next release changes levels only: its file is all the signer needs.
        let second = try CompromisedOriginTests.publish(rig, "levels", Array("levels v2".utf8), channel: "beta")
        try Self.signerFiles(rig, "next", ["levels": "levels v2"])
        let next = try Self.promote(rig, second, ["--config", "rooted.json", "--packs", "next"])
        #expect(next.status == 0, "\(next.stdout)\(next.stderr)")
        #expect(next.stdout.contains("channel production's last signed release is release \(first)"), "\(next.stdout)")
        #expect(next.stdout.contains("  intro revision 1: unchanged since release \(first) (signed)"), "\(next.stdout)")
        #expect(next.stdout.contains("  levels revision 2: matches next/levels (plaintext sha256 \(Self.sha256("levels v2")), 9 bytes; container checked)"), "\(next.stdout)")
        let synced = try rig.sync("rooted.json", device: "rooted")
        #expect(synced.status == 0, "\(synced.stderr)")
        #expect(try rig.installed("rooted", "levels") == Array("levels v2".utf8))
        #expect(Self.temporaryFiles(rig).isEmpty, "no container left behind")
    }

    @Test("An attacker holding the data folder rewrites the release the signer is asked to sign — its own levels and a new pack, then its own container under the honest file's plaintext SHA-256 — signed with the folder's online key: --sign, depot release sign and a second signer's --add-to refuse, naming each pack, and no statement reaches the origin")
    func compromisedOriginCannotObtainASignature() throws {
        var rig = try Self.rootedRig("depot-signer-attack")
        defer {
            rig.server.process.terminate()
            rig.work.remove()
        }
        _ = try Self.firstSignedRelease(rig, files: "signer")
        let honest = try CompromisedOriginTests.publish(rig, "levels", Array("levels v2".utf8), channel: "beta")
        try Self.signerFiles(rig, "signer", ["levels": "levels v2"])
        let honestPacks = try TrustFixture.manifest(FileSystem.readFile(DataFolder(rig.data).release(Self.app, honest))).packs
        // A first signer signs the honest release (a second one is to add a signature later).
        let signArguments = ["release", "sign", "--server", rig.server.url, "--app", Self.app, "--release", "\(honest)", "--key", "release-key.json", "--config", "rooted.json", "--packs", "signer"]
        let alice = try CompromisedOriginTests.depot(rig, signArguments + ["--out", "alice.json"])
        #expect(alice.status == 0 && alice.stdout.contains("  levels revision 2: matches signer/levels (plaintext sha256 \(Self.sha256("levels v2"))"), "\(alice.stdout)\(alice.stderr)")

        // The attacker's pack: a real blob under the real pack key, published through beta.
        let evilRelease = try CompromisedOriginTests.publish(rig, "levels", Array("levels XX".utf8), channel: "beta")
        let evil = try #require(try AppStore(folder: DataFolder(rig.data)).root(for: Self.app, release: evilRelease)?.first { $0.id == "levels" })
        var extra = evil
        extra.id = "extra"
        try Self.rewrite(&rig, release: honest, packs: honestPacks.filter { $0.id != "levels" } + [evil, extra])
        let liveBefore = try CompromisedOriginTests.served(rig)
        let accepted = Self.statements(rig)

        let refused = try Self.promote(rig, honest, ["--config", "rooted.json", "--packs", "signer"])
        #expect(refused.status != 0, "\(refused.stdout)")
        #expect(refused.stderr.contains("Error: refusing to sign release \(honest) of \(Self.app) for channel production: 2 of its 3 packs (extra, levels) are neither"), "\(refused.stderr)")
        #expect(refused.stderr.contains("levels revision \(evil.revision): signer/levels is sha256 \(Self.sha256("levels v2")), 9 bytes; release \(honest) states plaintext sha256 \(Self.sha256("levels XX"))"), "\(refused.stderr)")
        #expect(refused.stderr.contains("extra revision \(evil.revision): changed since the last signed release, and no file named extra"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("intro revision"), "intro is unchanged since the signed release: \(refused.stderr)")
        #expect(refused.stderr.contains("nothing was signed or uploaded"))
        let written = try CompromisedOriginTests.depot(rig, [
            "release", "sign", "--server", rig.server.url, "--app", Self.app, "--release", "\(honest)", "--key", "release-key.json", "--config", "rooted.json",
            "--packs", "signer", "--out", "statement.json",
        ])
        #expect(written.status != 0 && written.stderr.contains("no file named extra"), "\(written.stderr)")
        #expect(!FileSystem.exists(rig.work.path + "/statement.json"))
        let second = try CompromisedOriginTests.depot(rig, signArguments + ["--add-to", "alice.json", "--out", "both.json"])
        #expect(second.status != 0 && second.stderr.contains("levels revision \(evil.revision): signer/levels is sha256"), "the second signer checks the same way: \(second.stderr)")
        #expect(!FileSystem.exists(rig.work.path + "/both.json"))
        #expect(try Self.statements(rig) == accepted && CompromisedOriginTests.served(rig) == liveBefore, "no statement uploaded, production unchanged")

        // Subtler: the attacker's container, under an entry claiming the honest file's plaintext
        // SHA-256 and size. A device would install the container's bytes without hashing them again.
        var lying = evil
        (lying.plaintextSHA256, lying.installSize) = (Self.sha256("levels v2"), 9)
        try Self.rewrite(&rig, release: honest, packs: honestPacks.filter { $0.id != "levels" } + [lying])
        let fooled = try Self.promote(rig, honest, ["--config", "rooted.json", "--packs", "signer"])
        #expect(fooled.status != 0, "\(fooled.stdout)")
        #expect(fooled.stderr.contains("levels revision \(evil.revision): its container (\(evil.url)) decrypts to plaintext sha256 \(Self.sha256("levels XX")), 9 bytes, not to signer/levels"), "\(fooled.stderr)")
        #expect(try Self.statements(rig) == accepted && CompromisedOriginTests.served(rig) == liveBefore, "no statement uploaded, production unchanged")
        #expect(Self.temporaryFiles(rig).isEmpty, "the attacker's container was removed after the check")
        let synced = try rig.sync("rooted.json", device: "rooted")
        #expect(try synced.status == 0 && rig.installed("rooted", "levels") == Array("levels v1".utf8), "\(synced.stderr)")
    }

    @Test("The baseline is the origin's answer, so it is bounded: an older signed release shown as production's live one, for an old pack to pass as unchanged in the release to sign, counts for nothing below the release the configuration was exported at; and a pack given a file is checked against it whatever the baseline says")
    func olderBaselineCountsForNothing() throws {
        var rig = try Self.rootedRig("depot-signer-baseline")
        defer {
            rig.server.process.terminate()
            rig.work.remove()
        }
        let first = try Self.firstSignedRelease(rig, files: "one")
        let firstLive = try CompromisedOriginTests.served(rig)
        let second = try CompromisedOriginTests.publish(rig, "levels", Array("levels v2".utf8), channel: "beta")
        try Self.signerFiles(rig, "two", ["levels": "levels v2"])
        #expect(try Self.promote(rig, second, ["--config", "rooted.json", "--packs", "two"]).status == 0)
        _ = try rig.export("rooted.json")  // exported at release `second`
        let accepted = Self.statements(rig)

        // CI's next release changes intro only. The attacker makes production show release
        // `first` again (its real statement) and puts first's levels into the release to sign.
        let next = try CompromisedOriginTests.publish(rig, "intro", Array("intro v2".utf8), channel: "beta")
        let firstPacks = try TrustFixture.manifest(firstLive).packs
        let oldLevels = try #require(firstPacks.first { $0.id == "levels" })
        let nextPacks = try TrustFixture.manifest(FileSystem.readFile(DataFolder(rig.data).release(Self.app, next))).packs
        _ = try CompromisedOriginTests.forge(&rig, packs: firstPacks, like: firstLive, version: next + 1)
        try Self.rewrite(&rig, release: next, packs: nextPacks.filter { $0.id != "levels" } + [oldLevels])

        try Self.signerFiles(rig, "three", ["intro": "intro v2"])
        let refused = try Self.promote(rig, next, ["--config", "rooted.json", "--packs", "three"])
        #expect(refused.status != 0, "\(refused.stdout)")
        #expect(refused.stderr.contains("shows release \(first), older than release \(second), which your configuration was exported at"), "\(refused.stderr)")
        #expect(refused.stderr.contains("levels revision \(oldLevels.revision): changed since the last signed release, and no file named levels"), "\(refused.stderr)")
        // With the current levels as the signer's file, it is checked against it: refused too.
        try Self.signerFiles(rig, "three", ["levels": "levels v2"])
        let checked = try Self.promote(rig, next, ["--config", "rooted.json", "--packs", "three", "--check-all"])
        #expect(checked.status != 0 && checked.stderr.contains("--check-all: every pack is checked against your files"), "\(checked.stderr)")
        #expect(checked.stderr.contains("levels revision \(oldLevels.revision): three/levels is sha256 \(Self.sha256("levels v2"))"), "\(checked.stderr)")
        #expect(Self.statements(rig) == accepted, "no statement uploaded")
    }
}

