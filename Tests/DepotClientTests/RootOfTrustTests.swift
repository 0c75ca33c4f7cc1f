import DepotClient
import DepotCore
import Foundation
import Testing

/// A device with a pinned root of trust, against envelopes made here: the root chain walked,
/// the online keys it authorises, and the release statements of protected channels — each
/// attack refused by the device with its state unchanged.
@Suite struct RootOfTrustTests {
    static let app = "com.example.game"
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    /// The keys and documents of one app's trust, made here.
    final class Lab {
        var roots: [Envelope] = []
        var rootKeys: [[Ed25519PrivateKey]] = []
        var online = Ed25519PrivateKey()
        var releaseKeys = [Ed25519PrivateKey(), Ed25519PrivateKey(), Ed25519PrivateKey()]
        var releaseThreshold = 2
        var protected = ["production"]

        init() { addRoot(keys: [Ed25519PrivateKey()], signers: nil) }

        /// The next root version with `keys` as its root keys, signed by the previous root keys
        /// and the new ones (or by `signers` when given).
        @discardableResult
        func addRoot(keys: [Ed25519PrivateKey], signers: [Ed25519PrivateKey]? = nil, expires: Date = RootOfTrustTests.now + 86_400 * 365) -> Envelope {
            let document = RootDocument(
                app: RootOfTrustTests.app, version: roots.count + 1, expiresAt: expires, rootKeys: keys.map(\.publicKey), rootThreshold: 1,
                onlineKeys: [online.publicKey], releaseKeys: releaseKeys.map(\.publicKey), releaseThreshold: releaseThreshold, protectedChannels: protected
            )
            let envelope = try! document.signed(with: signers ?? ((rootKeys.last ?? []) + keys))
            roots.append(envelope)
            rootKeys.append(keys)
            return envelope
        }

        func entry(_ id: String, revision: Int, digit: Character, language: String? = nil) -> PackEntry {
            PackEntry(
                id: id, revision: revision, url: "https://cdn.example.com/\(id)/\(revision)", size: 1000 + Int64(revision), sha256: String(repeating: digit, count: 64),
                installSize: 900, plaintextSHA256: String(repeating: "e", count: 63) + String(digit), policy: .prefetch, tags: [], keyID: "k1", contentType: "application/octet-stream",
                language: language
            )
        }

        func statement(
            release: Int, packs: [PackEntry], channel: String = "production", app: String = RootOfTrustTests.app, signers: [Ed25519PrivateKey]? = nil,
            primaryLanguage: String? = nil
        ) -> Envelope {
            try! ReleaseStatement(app: app, channel: channel, release: release, signedAt: RootOfTrustTests.now, packs: packs, primaryLanguage: primaryLanguage)
                .signed(with: signers ?? Array(releaseKeys.prefix(2)))
        }

        func envelope(
            version: Int, packs: [PackEntry], channel: String = "production", rollout: Rollout? = nil, releases: [Envelope]?, signer: Ed25519PrivateKey? = nil,
            roots: [Envelope]? = nil, primaryLanguage: String? = nil
        ) -> [UInt8] {
            let manifest = Manifest(
                app: RootOfTrustTests.app, version: version, publishedAt: RootOfTrustTests.now, expiresAt: RootOfTrustTests.now + 86_400, packs: packs, channel: channel,
                primaryLanguage: primaryLanguage, rollout: rollout
            )
            var envelope = try! Envelope.sign(manifest, with: [signer ?? online])
            envelope.roots = roots ?? self.roots
            envelope.releases = releases
            return envelope.encoded()
        }

        /// A device that pinned root version `pinned`.
        func device(pinned: Int = 1, channel: String = "production") -> Device {
            Device(source: ManifestSource(url: URL(string: "https://origin.example.com/m")!, app: RootOfTrustTests.app, channel: channel, trustedKeys: [], root: roots[pinned - 1]))
        }
    }

    /// A device's state and the step it takes per envelope: verify, then record under its rules.
    struct Device {
        let source: ManifestSource
        var state = InstalledState(app: RootOfTrustTests.app)

        init(source: ManifestSource) { self.source = source }

        /// Accepts the envelope, or throws with the state unchanged.
        @discardableResult
        mutating func take(_ bytes: [UInt8], now: Date = RootOfTrustTests.now) throws -> Manifest {
            let accepted = try source.verify(bytes, state: state, now: now)
            if let refusal = state.refusal(accepted, channel: source.channel) { throw refusal }
            state.record(accepted, channel: source.channel, installID: installID)
            return accepted.manifest
        }

        /// This device's install id (a rollout's choice).
        var installID = String(repeating: "0", count: 32)

        /// The packs this device follows in `manifest` (its rollout resolved as a sync resolves it).
        func follows(_ manifest: Manifest) -> [PackEntry] {
            manifest.resolved(installID: installID, candidateFloor: state.candidateFloor(channel: source.channel)).packs
        }

        /// The refusal's text; the state must not change.
        mutating func refusal(_ bytes: [UInt8], now: Date = RootOfTrustTests.now) -> String {
            let before = state
            do {
                try take(bytes, now: now)
                return "accepted"
            } catch {
                #expect(state == before, "a refused envelope changed the state")
                return String(describing: error)
            }
        }
    }

    @Test func chainOfThreeRotationsWalkedByADeviceThatSkippedTwo() throws {
        let lab = Lab()
        var device = lab.device()
        let packs = [lab.entry("levels", revision: 1, digit: "a")]
        try device.take(lab.envelope(version: 1, packs: packs, releases: [lab.statement(release: 1, packs: packs)]))
        #expect(device.state.trust?.rootVersion == 1)
        // Three rotations of the root keys, and the online key rotated with the last: no app update.
        lab.addRoot(keys: [Ed25519PrivateKey()])
        lab.addRoot(keys: [Ed25519PrivateKey(), Ed25519PrivateKey()])
        let oldOnline = lab.online
        lab.online = Ed25519PrivateKey()
        lab.addRoot(keys: [Ed25519PrivateKey()])
        let next = [lab.entry("levels", revision: 2, digit: "b")]
        let manifest = try device.take(lab.envelope(version: 2, packs: next, releases: [lab.statement(release: 2, packs: next)]))
        #expect(manifest.packs.map(\.revision) == [2])
        #expect(device.state.trust?.rootVersion == 4)
        // The online key version 4 no longer lists signs no more.
        let byOld = lab.envelope(version: 3, packs: next, releases: [lab.statement(release: 2, packs: next)], signer: oldOnline)
        #expect(device.refusal(byOld).contains("not signed by a trusted key"))
        // A build pinned at version 1 that never synced before walks the same way.
        var fresh = lab.device()
        try fresh.take(lab.envelope(version: 2, packs: next, releases: [lab.statement(release: 2, packs: next)]))
        #expect(fresh.state.trust?.rootVersion == 4)
    }

    @Test func aRootNotSignedByThePreviousKeysIsRefused() throws {
        let lab = Lab()
        var device = lab.device()
        let packs = [lab.entry("levels", revision: 1, digit: "a")]
        let new = [Ed25519PrivateKey()]
        lab.addRoot(keys: new, signers: new)  // signed by its own keys only
        #expect(device.refusal(lab.envelope(version: 1, packs: packs, releases: [lab.statement(release: 1, packs: packs)])).contains("signed by 0 of version 1's root keys"))
    }

    @Test func aRetiredRootKeyCannotForkTheChain() throws {
        let lab = Lab()
        let packs = [lab.entry("levels", revision: 1, digit: "a")]
        let firstKeys = lab.rootKeys[0]
        lab.addRoot(keys: [Ed25519PrivateKey()])
        var device = lab.device()
        try device.take(lab.envelope(version: 1, packs: packs, releases: [lab.statement(release: 1, packs: packs)]))
        #expect(device.state.trust?.rootVersion == 2)
        // An attacker holding version 1's (retired) root key signs another version 2 naming its
        // own online key; the device recorded the real version 2.
        let attacker = Ed25519PrivateKey()
        let forged = try RootDocument(
            app: Self.app, version: 2, expiresAt: Self.now + 86_400 * 3650, rootKeys: firstKeys.map(\.publicKey), rootThreshold: 1, onlineKeys: [attacker.publicKey],
            releaseKeys: [], releaseThreshold: 0, protectedChannels: []
        ).signed(with: firstKeys)
        let evil = [lab.entry("levels", revision: 9, digit: "f")]
        // The device walks from the version 2 it holds (issue 61): the forged one is never read,
        // and the attacker's online key is not one it lists.
        let text = device.refusal(lab.envelope(version: 5, packs: evil, releases: nil, signer: attacker, roots: [lab.roots[0], forged]))
        #expect(text.contains("not signed by a trusted key"))
        // Nor does a forged version 3 after it take: version 2's keys did not sign it.
        var third = try RootDocument.decode(Envelope.decode(forged.encoded()).payloadBytes ?? [])
        third.version = 3
        let three = try third.signed(with: firstKeys)
        #expect(device.refusal(lab.envelope(version: 5, packs: evil, releases: nil, signer: attacker, roots: [lab.roots[0], forged, three])).contains("signed by 0 of version 2's root keys"))
        // Leaving the newer root out does not take the device back: it walks from the root it holds.
        try device.take(lab.envelope(version: 5, packs: packs, releases: [lab.statement(release: 1, packs: packs)], roots: [lab.roots[0]]))
        #expect(device.state.trust?.rootVersion == 2)
    }

    @Test func anExpiredRootStopsNewManifestsUntilTheNextIsSigned() throws {
        let lab = Lab()
        let packs = [lab.entry("levels", revision: 1, digit: "a")]
        var device = lab.device()
        let late = Self.now + 86_400 * 366
        #expect(device.refusal(lab.envelope(version: 1, packs: packs, releases: [lab.statement(release: 1, packs: packs)]), now: late).contains("expired"))
        lab.addRoot(keys: lab.rootKeys[0], expires: late + 86_400 * 365)
        var manifestLater = Manifest(app: Self.app, version: 1, publishedAt: late, expiresAt: late + 86_400, packs: packs, channel: "production")
        manifestLater.rollout = nil
        var envelope = try Envelope.sign(manifestLater, with: [lab.online])
        envelope.roots = lab.roots
        envelope.releases = [lab.statement(release: 1, packs: packs)]
        try device.take(envelope.encoded(), now: late)
    }

    @Test func aStatementBindsThePacksCanonicalText() throws {
        let lab = Lab()
        let packs = [lab.entry("voice-fr", revision: 1, digit: "c", language: "fr"), lab.entry("levels", revision: 2, digit: "b")]
        let text = "levels\t2\t\(String(repeating: "b", count: 64))\t1002\t\(String(repeating: "e", count: 63))b\t900\t-\t24:application/octet-stream\n"
            + "voice-fr\t1\t\(String(repeating: "c", count: 64))\t1001\t\(String(repeating: "e", count: 63))c\t900\t2:fr\t24:application/octet-stream\n"
        #expect(ReleaseStatement.digest(of: packs) == Hex.encode(SHA256Hasher.hash(Array(text.utf8))))
        let statement = ReleaseStatement(app: Self.app, channel: "production", release: 2, signedAt: Self.now, packs: packs)
        #expect(statement.packCount == 2 && statement.binds(packs.reversed()))
        #expect(!statement.binds([packs[0]]))
        // Free texts are length-prefixed: a language that carries the next pack's line is not that line.
        var smuggled = packs[1]
        smuggled.language = "fr\t24:application/octet-stream\nwidget\t1"
        #expect(ReleaseStatement.digest(of: [packs[0], smuggled]) != ReleaseStatement.digest(of: [packs[0], packs[1]]))
        var empty = packs[0]
        empty.language = ""
        #expect(!statement.binds([empty, packs[1]]), "an empty language is not no language")
        var zip = packs[0]
        zip.contentType = "application/zip"
        #expect(!statement.binds([zip, packs[1]]), "the media type is bound: a file is not unpacked as a zip")
    }
}
