import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Issue 52's attacker, end to end: an app already in the field adopts a root of trust (no flag
/// day: its builds pinning today's signing key keep syncing), protects production, and then an
/// attacker takes everything the origin has — the data folder with every online key and pack
/// key, the publisher token — and rewrites what production serves. Real `depot serve`, real
/// `depot sync` of each build.
@Suite("End to end: an origin taken over cannot alter a protected channel")
struct CompromisedOriginTests {
    typealias Rig = PackKeyLifeTests.Rig
    static let app = PackKeyLifeTests.app

    /// `depot ARGS` in the rig's folder.
    static func depot(_ rig: Rig, _ arguments: [String]) throws -> Processes.Result {
        try Processes.run(Processes.depotBinary, arguments, cwd: rig.work.path)
    }

    /// Publishes `bytes` as `pack` on `channel` with the rig's token; returns the release number.
    static func publish(_ rig: Rig, _ pack: String, _ bytes: [UInt8], channel: String) throws -> Int {
        let file = rig.work.path + "/\(pack)-\(channel)-\(bytes.count)"
        try FileSystem.writeAtomically(bytes, to: file)
        let result = try depot(rig, ["publish", file, "--server", rig.server.url, "--app", app, "--pack", pack, "--token", rig.token, "--release", "--channel", channel, "--quiet"])
        #expect(result.status == 0, "\(result.stderr)")
        let words = result.stdout.split(separator: " ")
        return try #require(words.firstIndex(of: "release").flatMap { Int(words[$0 + 1]) }, "\(result.stdout)")
    }

    /// What a channel serves now.
    static func served(_ rig: Rig, channel: String = "production") throws -> [UInt8] {
        let path = channel == "production" ? "manifest" : "channels/\(channel)/manifest"
        let response = try #require(try RawHTTP.send(port: UInt16(rig.server.port)!, "GET /v1/apps/\(app)/\(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
        return response.body
    }

    /// The attacker's step: production's next release, made of `packs`, signed with every online
    /// key the data folder holds, carrying the roots and statements `like` carries; written as the
    /// origin writes a release (file, head, pointer), then the origin restarted.
    static func forge(_ rig: inout Rig, packs: [PackEntry], like served: [UInt8], version: Int) throws -> [UInt8] {
        let folder = DataFolder(rig.data)
        let original = try Envelope.decode(served)
        let live = try TrustFixture.manifest(served)
        let manifest = Manifest(app: app, version: version, publishedAt: Date(), expiresAt: Date().addingTimeInterval(90 * 86_400), packs: packs, channel: "production")
        var envelope = try Envelope.sign(manifest, with: AppStore(folder: folder).signingKeys())
        (envelope.roots, envelope.releases) = (original.roots, original.releases)
        #expect(live.version < version)
        let bytes = envelope.encoded()
        try FileSystem.writeAtomically(bytes, to: folder.release(app, version))
        try FileSystem.writeAtomically(Array("\(version)\n".utf8), to: folder.head(app))
        try FileSystem.writeAtomically(Array("\(version)\n".utf8), to: folder.currentPointer(app))
        try rig.restart()
        #expect(try TrustFixture.manifest(Self.served(rig)).packs == packs, "the origin serves the attacker's packs")
        return bytes
    }

    @Test("An app in the field adopts a root with no flag day; then an attacker with the data folder, every online key and the token serves a changed pack and replays an older signed release on production: the build pinning the root refuses both and keeps its bytes, while a build pinning only today's signing key takes the change (what the fleet's manifest-key counts are for)")
    func compromisedOrigin() throws {
        var rig = try Rig("depot-compromised")
        defer {
            rig.server.process.terminate()
            rig.work.remove()
        }
        // Today: an app in the field, whose builds pin the signing key and the pack key ring.
        _ = try Self.publish(rig, "intro", Array("intro v1".utf8), channel: "production")
        _ = try rig.export("legacy.json")
        #expect(try rig.sync("legacy.json", device: "legacy").status == 0)

        // The operator adopts a root, offline: a root key and a release key, production protected.
        for name in ["root-key.json", "release-key.json"] {
            let made = try Self.depot(rig, ["root", "keygen", "--out", name])
            #expect(made.status == 0, "\(made.stderr)")
        }
        let releasePublic = try OfflineKeyFile.publicText(OfflineKeyFile.load(FileSystem.readFile(rig.work.path + "/release-key.json"), path: "release-key.json").publicKey)
        let signed = try Self.depot(rig, ["root", "sign", "--app", Self.app, "--key", "root-key.json", "--online-keys-from", "legacy.json", "--release-key", releasePublic, "--out", "root-1.json"])
        #expect(signed.status == 0, "\(signed.stderr)")
        let added = try rig.admin(["root", "add", "--app", Self.app, rig.work.path + "/root-1.json"])
        #expect(added.status == 0, "\(added.stderr)")
        _ = try rig.export("rooted.json")
        #expect(try ClientConfiguration.decode(FileSystem.readFile(rig.work.path + "/rooted.json")).root != nil)
        // The running origin re-signs production with the root within seconds.
        #expect(try Eventually.wait { try Envelope.decode(Self.served(rig)).roots?.count == 1 })

        // A release through beta, signed by the release key and promoted; both builds take it.
        func release(_ text: String) throws {
            let number = try Self.publish(rig, "levels", Array(text.utf8), channel: "beta")
            let promoted = try Self.depot(rig, [
                "channels", "promote", "--server", rig.server.url, "--app", Self.app, "--token", rig.token, "--channel", "production", "--release", "\(number)",
                "--sign", "release-key.json", "--config", "rooted.json",
                // The signer's own files of the packs (intro's, for the first release signed).
                "--pack-file", "levels=levels-beta-\(text.utf8.count)", "--pack-file", "intro=intro-production-8",
            ])
            #expect(promoted.status == 0, "\(promoted.stdout)\(promoted.stderr)")
            for build in ["legacy", "rooted"] {
                let synced = try rig.sync("\(build).json", device: build)
                #expect(synced.status == 0, "\(build): \(synced.stderr)")
                #expect(try rig.installed(build, "levels") == Array(text.utf8), "\(build)")
            }
        }
        try release("levels v1")
        let firstSigned = try Self.served(rig)
        try release("levels v2")
        let secondSigned = try Self.served(rig)
        #expect(try Envelope.decode(secondSigned).releases?.count == 1, "\(String(decoding: secondSigned, as: UTF8.self))")

        // The attacker: their own pack through beta (a real blob, encrypted with the real pack
        // key), then production rewritten to serve it under the live statement.
        let evilRelease = try Self.publish(rig, "levels", Array("levels EVIL".utf8), channel: "beta")
        let evil = try #require(try AppStore(folder: DataFolder(rig.data)).root(for: Self.app, release: evilRelease))
        let forged = try Self.forge(&rig, packs: evil, like: secondSigned, version: evilRelease + 1)
        let refused = try rig.sync("rooted.json", device: "rooted")
        #expect(refused.status != 0 && refused.stderr.contains("release signed"), "\(refused.stderr)")
        #expect(try rig.installed("rooted", "levels") == Array("levels v2".utf8), "the rooted build keeps its bytes")
        // A build that pins only today's signing key cannot tell (the limit SECURITY.md states).
        #expect(try rig.sync("legacy.json", device: "legacy").status == 0)
        #expect(try rig.installed("legacy", "levels") == Array("levels EVIL".utf8))

        // An older signed release (levels v1, with its real statement) at a fresh version.
        let old = try TrustFixture.manifest(firstSigned).packs
        _ = try Self.forge(&rig, packs: old, like: firstSigned, version: evilRelease + 2)
        let replayed = try rig.sync("rooted.json", device: "rooted")
        #expect(replayed.status != 0 && replayed.stderr.contains("an older signed release is replayed"), "\(replayed.stderr)")
        #expect(try rig.installed("rooted", "levels") == Array("levels v2".utf8))
        #expect(forged != firstSigned)
    }
}

extension AppStore {
    /// The packs of release `release` of `app` as its file holds them (the attacker reads the folder).
    func root(for app: String, release: Int) throws -> [PackEntry]? {
        let bytes = try FileSystem.readFile(folder.release(app, release))
        return try TrustFixture.manifest(bytes).packs
    }
}
