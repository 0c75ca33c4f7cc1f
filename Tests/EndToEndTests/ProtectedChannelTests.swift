import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// A channel the app's root protects, driven through the real `depot` CLI against the real origin:
/// what the origin refuses, what `--sign` does, and what the served manifest carries.
@Suite("Protected channels: signed releases through the origin")
struct ProtectedChannelTests {
    static func served(_ origin: TestOrigin, channel: String = "production") throws -> (bytes: [UInt8], envelope: Envelope) {
        let response = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/channels/\(channel)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
        return (response.body, try Envelope.decode(response.body))
    }

    /// The served manifest as a device pinning `root` checks it: the release its statement binds.
    static func verified(_ origin: TestOrigin, root: Envelope, channel: String = "production") throws -> TrustedManifest {
        try ManifestTrust.verify(envelope: try served(origin, channel: channel).bytes, pinned: root, record: nil, app: origin.app, channel: channel, now: Date())
    }

    @Test("A publish straight to protected production is refused 409 release_signature_required, the same to beta works, `channels promote --sign` signs and promotes it; the manifest carries the root and the statement binding its packs, through a re-sign after a key rotation, a rollout's steps and its completion, and a re-sign before expiry; backups keep them")
    func promoteWithSignature() async throws {
        try await withServer(configure: { $0.refreshInterval = 3600 }) { origin in
            let work = TemporaryDirectory("depot-protected")
            defer { work.remove() }
            let (app, data, url) = (origin.app, origin.data.path, origin.baseURL.absoluteString)
            func depot(_ arguments: [String]) throws -> Processes.Result {
                try Processes.run(Processes.depotBinary, arguments, environment: ["DEPOT_TOKEN": origin.token], cwd: work.path)
            }
            // A release from before the root, then the root: production protected, one release key.
            try put(origin, "level", bytes(700, seed: 1))
            let trust = TrustFixture(app: app)
            let root = try trust.addRoot(dataPath: data)
            // The running origin signs production's live release again with the root (release 2).
            #expect(try Eventually.wait { try Self.served(origin).envelope.roots == [root] })
            #expect(try TrustFixture.manifest(Self.served(origin).bytes).version == 2)
            try FileSystem.writeAtomically(TrustFixture.keyFile(trust.releaseKeys[0]), to: work.path + "/release-key.json")
            try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: work.path + "/config.json")
            try FileSystem.writeAtomically(Array("new level".utf8), to: work.path + "/level.bin")
            let common = ["--server", url, "--app", app]

            let straight = try depot(["publish", "level.bin", "--pack", "level", "--release", "--quiet"] + common)
            #expect(straight.status != 0 && straight.stderr.contains("release_signature_required") && straight.stderr.contains("depot channels promote"), "\(straight.stderr)")
            #expect(try TrustFixture.manifest(Self.served(origin).bytes).version == 2, "nothing was published")
            let beta = try depot(["publish", "level.bin", "--pack", "level", "--release", "--channel", "beta", "--quiet"] + common)
            #expect(beta.status == 0 && beta.stdout.contains("in release 3 of \(app) on channel beta"), "\(beta.stdout)\(beta.stderr)")
            let unsigned = try depot(["channels", "promote", "--channel", "production", "--release", "3"] + common)
            #expect(unsigned.status != 0 && unsigned.stderr.contains("release_signature_required") && unsigned.stderr.contains("--release 3 --sign"), "\(unsigned.stderr)")

            let promoted = try depot(["channels", "promote", "--channel", "production", "--release", "3", "--sign", "release-key.json", "--config", "config.json", "--packs", "."] + common)
            #expect(promoted.status == 0, "\(promoted.stdout)\(promoted.stderr)")
            #expect(promoted.stdout.contains("level revision 2: matches ./level.bin (plaintext sha256 \(Hex.encode(SHA256Hasher.hash(Array("new level".utf8)))), 9 bytes; container checked)"), "\(promoted.stdout)")
            #expect(promoted.stdout.contains("release 3 is signed for production (1 of 1 release keys)") && promoted.stdout.contains("production now serves release 3"), "\(promoted.stdout)")
            let (_, envelope) = try Self.served(origin)
            #expect(envelope.roots == [root])
            let statement = try ReleaseStatement.verified(try #require(envelope.releases?.first), root: RootDocument.decode(root.payloadBytes ?? []))
            let live = try TrustFixture.manifest(Self.served(origin).bytes)
            #expect(statement.release == 3 && statement.channel == "production" && statement.binds(live.packs))
            #expect(live.packs.map(\.plaintextSHA256) == [Hex.encode(SHA256Hasher.hash(Array("new level".utf8)))])
            #expect(try Self.verified(origin, root: root).signedRelease == 3)
            // A client exported before the root (manifest keys only) reads the same envelope.
            let legacy = try ClientConfiguration.decode(FileSystem.readFile(work.path + "/config.json"))
            #expect(try Envelope.decode(Self.served(origin).bytes).verifiedManifest(trusting: legacy.trustedKeys()).version == live.version)

            // The origin's own re-sign (a signing key rotated beside it) keeps the statement.
            let rotated = try depot(["keys", "rotate-signing", "--data", data])
            #expect(rotated.status == 0, "\(rotated.stderr)")
            #expect(try Eventually.wait { try Self.served(origin).envelope.signatures.count == 2 })
            let resigned = try Self.verified(origin, root: root)
            #expect(resigned.manifest.version > live.version && resigned.signedRelease == 3)

            // A rollout on production: its candidate must be signed too.
            try FileSystem.writeAtomically(Array("newer level".utf8), to: work.path + "/level.bin")
            #expect(try depot(["publish", "level.bin", "--pack", "level", "--release", "--channel", "beta", "--quiet"] + common).status == 0)
            let candidate = try TrustFixture.manifest(Self.served(origin, channel: "beta").bytes).version
            let rolloutUnsigned = try depot(["rollout", "start", "--release", "\(candidate)", "--fraction", "0.5"] + common)
            #expect(rolloutUnsigned.status != 0 && rolloutUnsigned.stderr.contains("release_signature_required") && rolloutUnsigned.stderr.contains("depot rollout start"), "\(rolloutUnsigned.stderr)")
            let started = try depot(["rollout", "start", "--release", "\(candidate)", "--fraction", "0.5", "--sign", "release-key.json", "--config", "config.json", "--pack-file", "level=level.bin"] + common)
            #expect(started.status == 0 && started.stdout.contains("level revision 3: matches level.bin"), "\(started.stdout)\(started.stderr)")
            #expect(try Self.served(origin).envelope.releases?.count == 2)
            #expect(try Self.verified(origin, root: root).signedRelease == 3, "the main packs are still release 3's; the candidate's statement is checked too")
            #expect(try depot(["rollout", "advance", "--fraction", "0.8"] + common).status == 0)
            #expect(try Self.served(origin).envelope.releases?.count == 2)
            #expect(try Self.verified(origin, root: root).manifest.rollout?.fraction == 0.8)
            #expect(try depot(["rollout", "complete"] + common).status == 0)
            #expect(try Self.served(origin).envelope.releases?.count == 1)
            #expect(try Self.verified(origin, root: root).signedRelease == candidate)
            // The re-sign before expiry (80 days on, a quiet app) keeps it.
            let quiet = try TrustFixture.manifest(Self.served(origin).bytes).version
            #expect(try origin.server.origin.releases.refresh(app, channel: "production", now: Date().addingTimeInterval(80 * 86_400)))
            let refreshed = try Self.verified(origin, root: root)
            #expect(refreshed.manifest.version > quiet && refreshed.signedRelease == candidate)

            // Backups copy the roots and the statements with the rest of apps/.
            #expect(try depot(["backup", "--data", data, work.path + "/backup"]).status == 0)
            #expect(FileSystem.exists(work.path + "/backup/apps/\(app)/roots/000001.json"))
            #expect(FileSystem.contents(of: work.path + "/backup/apps/\(app)/statements/production").contains("000003.json"))
            #expect(try depot(["root", "show", "--data", work.path + "/backup", "--app", app]).stdout.contains("production: protected, serves release"))
        }
    }

    @Test("The patch release the origin makes on a protected channel after a signed promotion keeps the statement: patches are not what it binds")
    func patchesKeepTheStatement() async throws {
        try await withServer(configure: { $0.patchDepth = 2; $0.refreshInterval = 3600 }) { origin in
            let work = TemporaryDirectory("depot-protected-patches")
            defer { work.remove() }
            let v1 = PatchTests.random(1 << 20, seed: 7)
            try put(origin, "level", v1)
            let trust = TrustFixture(app: origin.app)
            let root = try trust.addRoot(dataPath: origin.data.path)
            #expect(try Eventually.wait { try Self.served(origin).envelope.roots == [root] })
            try put(origin, "level", PatchTests.revise(v1, inserted: 5_000, seed: 9), query: "&channel=beta")
            let candidate = try TrustFixture.manifest(Self.served(origin, channel: "beta").bytes).version
            try FileSystem.writeAtomically(TrustFixture.keyFile(trust.releaseKeys[0]), to: work.path + "/release-key.json")
            try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: work.path + "/config.json")
            try FileSystem.writeAtomically(PatchTests.revise(v1, inserted: 5_000, seed: 9), to: work.path + "/level-v2")
            let promoted = try Processes.run(Processes.depotBinary, [
                "channels", "promote", "--server", origin.baseURL.absoluteString, "--app", origin.app, "--token", origin.token,
                "--channel", "production", "--release", "\(candidate)", "--sign", work.path + "/release-key.json",
                "--config", work.path + "/config.json", "--pack-file", "level=" + work.path + "/level-v2",
            ])
            #expect(promoted.status == 0, "\(promoted.stdout)\(promoted.stderr)")
            origin.server.waitForPatches()
            let patched = try Self.verified(origin, root: root)
            #expect(patched.manifest.version > candidate && patched.manifest[pack: "level"]?.patches?.isEmpty == false, "the origin released patches on production")
            #expect(patched.signedRelease == candidate)
        }
    }

    @Test("Signing the live release of a protected channel (a root added over releases made before it) attaches the statement at once, without a new publish of content; a statement for another channel is refused before it is sent")
    func signTheLiveRelease() async throws {
        try await withServer(configure: { $0.refreshInterval = 3600 }) { origin in
            let work = TemporaryDirectory("depot-protected-live")
            defer { work.remove() }
            let (app, url) = (origin.app, origin.baseURL.absoluteString)
            try put(origin, "level", bytes(900, seed: 3))
            let trust = TrustFixture(app: app)
            let root = try trust.addRoot(dataPath: origin.data.path)
            try FileSystem.writeAtomically(TrustFixture.keyFile(trust.releaseKeys[0]), to: work.path + "/release-key.json")
            try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: work.path + "/config.json")
            try FileSystem.writeAtomically(bytes(900, seed: 3), to: work.path + "/level.bin")
            #expect(throws: TrustError.self) { try Self.verified(origin, root: root) }
            func depot(_ arguments: [String]) throws -> Processes.Result {
                try Processes.run(Processes.depotBinary, arguments + ["--server", url, "--app", app], environment: ["DEPOT_TOKEN": origin.token], cwd: work.path)
            }
            let wrong = try depot(["release", "sign", "--release", "1", "--channel", "beta", "--key", "release-key.json", "--config", "config.json", "--packs", ".", "--out", "beta.json"])
            #expect(wrong.status == 0 && wrong.stdout.contains("for channel beta"), "\(wrong.stdout)\(wrong.stderr)")
            let refused = try depot(["channels", "promote", "--channel", "production", "--release", "1", "--statement", "beta.json"])
            #expect(refused.status != 0 && refused.stderr.contains("release 1's statement for channel beta, not release 1's for production"), "\(refused.stderr)")

            let signed = try depot(["release", "sign", "--release", "1", "--key", "release-key.json", "--config", "config.json", "--packs", ".", "--out", "production.json"])
            #expect(signed.status == 0 && signed.stdout.contains("binding the 1 pack above") && signed.stdout.contains("level revision 1: matches ./level.bin"), "\(signed.stdout)\(signed.stderr)")
            // No live release of production verifies with a statement yet: nothing counts as signed before.
            #expect(signed.stdout.contains("channel production's live manifest does not verify with your configuration"), "\(signed.stdout)")
            let uploaded = try depot(["channels", "promote", "--channel", "production", "--release", "1", "--statement", "production.json"])
            // Production may serve a later release of the same packs (re-signed with the root): the same content, not a move.
            #expect(uploaded.status == 0 && uploaded.stdout.contains("production already serves release"), "\(uploaded.stdout)\(uploaded.stderr)")
            let verified = try Self.verified(origin, root: root)
            #expect(verified.signedRelease == 1 && verified.manifest.packs.map(\.revision) == [1])
        }
    }
}
