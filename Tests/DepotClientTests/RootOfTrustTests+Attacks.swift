import DepotClient
import DepotCore
import Foundation
import Testing

/// An attacker holding everything the origin holds — every online key, the data folder's
/// statements, the bucket — against a device on a protected channel: each altered manifest is
/// refused and the device keeps what it has (its state unchanged).
extension RootOfTrustTests {
    /// A device on production holding release 2 (the lab's statements for 1 and 2 are what the
    /// attacker can copy from the origin).
    static func deviceHoldingRelease2() throws -> (Lab, Device, [PackEntry], Envelope, Envelope) {
        let lab = Lab()
        var device = lab.device()
        let first = [lab.entry("levels", revision: 1, digit: "a"), lab.entry("voice-fr", revision: 1, digit: "c", language: "fr")]
        let second = [lab.entry("levels", revision: 2, digit: "b"), lab.entry("voice-fr", revision: 1, digit: "c", language: "fr")]
        let s1 = lab.statement(release: 1, packs: first), s2 = lab.statement(release: 2, packs: second)
        try device.take(lab.envelope(version: 1, packs: first, releases: [s1]))
        try device.take(lab.envelope(version: 2, packs: second, releases: [s2]))
        return (lab, device, second, s1, s2)
    }

    @Test func anAttackerWithTheOnlineKeysCannotAlterProtectedContent() throws {
        var (lab, device, packs, s1, s2) = try Self.deviceHoldingRelease2()
        // A new pack beside the signed ones.
        let added = packs + [lab.entry("cheat", revision: 1, digit: "d")]
        #expect(device.refusal(lab.envelope(version: 3, packs: added, releases: [s2])).contains("not a release signed for channel production"))
        // A changed pack: other ciphertext, same everything else.
        var changed = packs
        changed[0].sha256 = String(repeating: "9", count: 64)
        #expect(device.refusal(lab.envelope(version: 3, packs: changed, releases: [s2])).contains("not a release signed"))
        // Another plaintext or size under the same container hash.
        changed = packs
        changed[0].installSize += 1
        #expect(device.refusal(lab.envelope(version: 3, packs: changed, releases: [s2])).contains("not a release signed"))
        // A localized pack relabelled for another language.
        changed = packs
        changed[1].language = "de"
        #expect(device.refusal(lab.envelope(version: 3, packs: changed, releases: [s2])).contains("not a release signed"))
        // No statement at all, as if the channel were not protected.
        #expect(device.refusal(lab.envelope(version: 3, packs: added, releases: nil)).contains("carries no release signed"))
        // A statement signed by the online key (the origin's) or by one release key of the two needed.
        let byOrigin = lab.statement(release: 3, packs: added, signers: [lab.online])
        #expect(device.refusal(lab.envelope(version: 3, packs: added, releases: [byOrigin])).contains("signed by 0 of root version 1's release keys"))
        let byOne = lab.statement(release: 3, packs: added, signers: [lab.releaseKeys[0]])
        #expect(device.refusal(lab.envelope(version: 3, packs: added, releases: [byOne])).contains("signed by 1 of root version 1's release keys, and needs 2"))
        // One signer's signature repeated does not count twice.
        var repeated = byOne
        repeated.signatures += repeated.signatures
        #expect(device.refusal(lab.envelope(version: 3, packs: added, releases: [repeated])).contains("signed by 1 of"))
        // A release signed for another channel, or for another app with the same keys.
        let beta = lab.statement(release: 3, packs: added, channel: "beta")
        #expect(device.refusal(lab.envelope(version: 3, packs: added, releases: [beta])).contains("signed for channel beta, not production"))
        let otherApp = lab.statement(release: 3, packs: added, app: "com.example.other")
        #expect(device.refusal(lab.envelope(version: 3, packs: added, releases: [otherApp])).contains("not com.example.game's"))
        // An old signed release replayed under a fresh, higher version.
        let first = [lab.entry("levels", revision: 1, digit: "a"), lab.entry("voice-fr", revision: 1, digit: "c", language: "fr")]
        #expect(device.refusal(lab.envelope(version: 50, packs: first, releases: [s1])).contains("older signed release is replayed"))
        // The old release smuggled in as a rollout candidate over the current one.
        let salt = String(repeating: "0", count: 32)
        let rollout = Rollout(release: 1, fraction: 1, salt: salt, packs: [first[0]])
        #expect(device.refusal(lab.envelope(version: 51, packs: packs, rollout: rollout, releases: [s2, s1])).contains("not later than the release it replaces"))
        // An unsigned candidate, whether or not this device takes it.
        let candidate = Rollout(release: 3, fraction: 0.0001, salt: salt, packs: [lab.entry("levels", revision: 3, digit: "f")])
        #expect(device.refusal(lab.envelope(version: 52, packs: packs, rollout: candidate, releases: [s2])).contains("candidate (release 3) is not a release signed"))
        #expect(device.state.floor(channel: "production") == 2)
        #expect(device.state.trust?.releaseFloors["production"] == 2)
    }

    @Test func aPushedVersionFloorEndsAtTheNextSignedRelease() throws {
        var (lab, device, packs, _, s2) = try Self.deviceHoldingRelease2()
        // The attacker signs the current release with a huge version: nothing to install, but the
        // origin's next manifests (lower versions) would be refused for ever.
        try device.take(lab.envelope(version: 999_999_999_999, packs: packs, releases: [s2]))
        #expect(device.refusal(lab.envelope(version: 3, packs: packs, releases: [s2])).contains("lower than 999999999999"))
        // The next release the release keys sign lifts it.
        let third = [lab.entry("levels", revision: 3, digit: "f"), packs[1]]
        let manifest = try device.take(lab.envelope(version: 3, packs: third, releases: [lab.statement(release: 3, packs: third), s2]))
        #expect(manifest.packs[0].revision == 3)
        #expect(device.state.floor(channel: "production") == 3)
        #expect(device.state.trust?.releaseFloors["production"] == 3)
        // And the pushed manifest cannot come back.
        #expect(device.refusal(lab.envelope(version: 999_999_999_999, packs: packs, releases: [s2])).contains("older signed release is replayed"))
    }

    @Test func rolloutsPatchesAndRefreshesKeepWorkingOnAProtectedChannel() throws {
        var (lab, device, packs, _, s2) = try Self.deviceHoldingRelease2()
        // The origin re-signs (a refresh) and adds a patch: the bound fields do not change.
        var patched = packs
        patched[0].patches = [PackPatch(fromRevision: 1, fromPlaintextSHA256: String(repeating: "1", count: 64), url: "https://cdn.example.com/p", size: 10, sha256: String(repeating: "2", count: 64))]
        try device.take(lab.envelope(version: 3, packs: patched, releases: [s2]))
        // A rollout of release 4, signed; a halt (fraction 0) keeps the statement requirement.
        let candidatePack = lab.entry("levels", revision: 4, digit: "7")
        let s4 = lab.statement(release: 4, packs: [candidatePack, packs[1]])
        let salt = String(repeating: "5", count: 32)
        for (version, fraction) in [(4, 0.1), (5, 0.5), (6, 0.0)] {
            let manifest = try device.take(lab.envelope(version: version, packs: patched, rollout: Rollout(release: 4, fraction: fraction, salt: salt, packs: [candidatePack]), releases: [s2, s4]))
            #expect(manifest.rollout?.fraction == fraction)
        }
        // Completed: release 4's packs as the main ones.
        try device.take(lab.envelope(version: 7, packs: [candidatePack, packs[1]], releases: [s4]))
        #expect(device.state.trust?.releaseFloors["production"] == 4)
        // An unprotected channel takes the online signature alone.
        var beta = lab.device(channel: "beta")
        try beta.take(lab.envelope(version: 8, packs: [lab.entry("levels", revision: 5, digit: "8")], channel: "beta", releases: nil))
    }

    @Test func buildsWithoutARootIgnoreTheNewMembers() throws {
        // A build that pins the manifest keys (every build shipped before roots) reads an envelope
        // carrying roots and releases as before.
        let lab = Lab()
        let packs = [lab.entry("levels", revision: 1, digit: "a")]
        let bytes = lab.envelope(version: 1, packs: packs, releases: [lab.statement(release: 1, packs: packs)])
        let legacy = ManifestSource(url: URL(string: "https://origin.example.com/m")!, app: Self.app, trustedKeys: [lab.online.publicKey])
        #expect(try legacy.verify(bytes, floor: 0, now: Self.now).packs == packs)
        #expect(try Envelope.decode(bytes).verifiedManifest(trusting: [lab.online.publicKey]).version == 1)
    }

    @Test func aForkCheckedAgainstARootAnotherProcessRecordedMeanwhile() throws {
        // The app and its extension: one read the state before the other recorded root version 2.
        let lab = Lab()
        let packs = [lab.entry("levels", revision: 1, digit: "a")]
        let firstKeys = lab.rootKeys[0]
        lab.addRoot(keys: [Ed25519PrivateKey()])
        var app = lab.device()
        let stale = app.state
        try app.take(lab.envelope(version: 1, packs: packs, releases: [lab.statement(release: 1, packs: packs)]))
        #expect(app.state.trust?.rootVersion == 2)
        // A fork from version 1's (retired) key: another version 2 and a version 3 after it.
        let attacker = Ed25519PrivateKey()
        let forgedRoot = RootDocument(
            app: Self.app, version: 2, expiresAt: Self.now + 86_400 * 999, rootKeys: firstKeys.map(\.publicKey), rootThreshold: 1, onlineKeys: [attacker.publicKey],
            releaseKeys: [Ed25519PrivateKey().publicKey], releaseThreshold: 1, protectedChannels: []
        )
        let two = try forgedRoot.signed(with: firstKeys)
        var third = forgedRoot
        third.version = 3
        let three = try third.signed(with: firstKeys)
        let evil = lab.envelope(version: 9, packs: [lab.entry("levels", revision: 9, digit: "f")], releases: nil, signer: attacker, roots: [lab.roots[0], two, three])
        // Verified against the state read before: the walk passes.
        let accepted = try app.source.verify(evil, state: stale, now: Self.now)
        #expect(accepted.trusted?.root.document.version == 3)
        // Under the lock, against the state as it is now: refused.
        let refusal = try #require(app.state.refusal(accepted, channel: "production"))
        #expect(String(describing: refusal).contains("root version 2 is not the one this device trusts"))
    }

    @Test func aNewInstallTakesNoReleaseOlderThanItsConfigurationWasExportedAt() throws {
        let lab = Lab()
        let first = [lab.entry("levels", revision: 1, digit: "a")]
        var fresh = lab.device()
        var source = fresh.source
        source.releaseFloors = ["production": 2]
        fresh = Device(source: source)
        #expect(fresh.refusal(lab.envelope(version: 5, packs: first, releases: [lab.statement(release: 1, packs: first)])).contains("older than release 2, which this build's configuration was exported at"))
        let second = [lab.entry("levels", revision: 2, digit: "b")]
        try fresh.take(lab.envelope(version: 6, packs: second, releases: [lab.statement(release: 2, packs: second)]))
    }

    @Test func aZipOnAProtectedChannelIsNotTreePatched() throws {
        // A tree patch's files are checked against hashes the patch carries, which no release key
        // signed: on a protected channel a zip is downloaded whole; a byte patch stays.
        let lab = Lab()
        var zip = lab.entry("maps", revision: 2, digit: "a")
        zip.contentType = "application/zip"
        var file = lab.entry("movie", revision: 2, digit: "b")
        let patch = PackPatch(fromRevision: 1, fromPlaintextSHA256: String(repeating: "1", count: 64), url: "https://cdn.example.com/p", size: 10, sha256: String(repeating: "2", count: 64))
        (zip.patches, file.patches) = ([patch], [patch])
        var device = lab.device()
        let manifest = try device.take(lab.envelope(version: 1, packs: [zip, file], releases: [lab.statement(release: 1, packs: [zip, file])]))
        #expect(manifest[pack: "maps"]?.patches == nil && manifest[pack: "movie"]?.patches == [patch])
        var beta = lab.device(channel: "beta")
        #expect(try beta.take(lab.envelope(version: 1, packs: [zip, file], channel: "beta", releases: nil))[pack: "maps"]?.patches == [patch])
    }

    @Test func anArchiveWhosePlaintextIsNotItsContainerIsRefused() throws {
        // An entry with no key (an Apple Archive, served as published): its plaintext fields are
        // its container's, or a patch could lead to bytes no signer saw.
        let lab = Lab()
        var archive = lab.entry("scene", revision: 2, digit: "c")
        archive.keyID = ""
        (archive.plaintextSHA256, archive.installSize) = (archive.sha256, archive.size)
        archive.patches = [PackPatch(fromRevision: 1, fromPlaintextSHA256: String(repeating: "1", count: 64), url: "https://cdn.example.com/p", size: 10, sha256: String(repeating: "2", count: 64))]
        var device = lab.device()
        let taken = try device.take(lab.envelope(version: 1, packs: [archive], releases: [lab.statement(release: 1, packs: [archive])]))
        #expect(taken[pack: "scene"]?.patches == nil, "an archive is not patched on a protected channel")
        var lying = archive
        lying.plaintextSHA256 = String(repeating: "d", count: 64)
        #expect(device.refusal(lab.envelope(version: 2, packs: [lying], releases: [lab.statement(release: 2, packs: [lying])])).contains("an Apple Archive whose plaintext is not its container"))
    }
}

