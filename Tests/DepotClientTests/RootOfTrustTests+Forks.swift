import DepotClient
import DepotCore
import Foundation
import Testing

/// Issue 61's findings on the device's side: two documents of one root version, one release
/// number with two pack lists, keys of small order.
extension RootOfTrustTests {
    @Test("Two valid documents of one root version (depot root sign run twice): a device that recorded the first takes version 3, signed after the second, by the keys of the one it holds (TUF's rule), and never reads the second")
    func aSecondDocumentOfARecordedVersionDoesNotForkTheDevice() throws {
        let lab = Lab()
        let packs = [lab.entry("levels", revision: 1, digit: "a")]
        let keys = [Ed25519PrivateKey()]
        let first = lab.addRoot(keys: keys, expires: Self.now + 86_400 * 300)
        var device = lab.device()
        try device.take(lab.envelope(version: 1, packs: packs, releases: [lab.statement(release: 1, packs: packs)]))
        #expect(device.state.trust?.rootVersion == 2)
        #expect(device.state.trust?.rootEnvelope?.payload == first.payload, "the recorded root is kept as signed")
        // The operator signs version 2 again (another expiry: other bytes, the same keys), puts it in
        // the first's place, then signs version 3 after it.
        lab.roots.removeLast()
        lab.rootKeys.removeLast()
        let second = lab.addRoot(keys: keys, expires: Self.now + 86_400 * 301)
        #expect(second != first)
        lab.addRoot(keys: [Ed25519PrivateKey()])
        let next = [lab.entry("levels", revision: 2, digit: "b")]
        try device.take(lab.envelope(version: 2, packs: next, releases: [lab.statement(release: 2, packs: next)]))
        #expect(device.state.trust?.rootVersion == 3)
        // The chain served without version 2 at all: the device walks from the one it holds.
        var third = lab.device()
        try third.take(lab.envelope(version: 1, packs: packs, releases: [lab.statement(release: 1, packs: packs)], roots: [lab.roots[0], first]))
        try third.take(lab.envelope(version: 2, packs: next, releases: [lab.statement(release: 2, packs: next)], roots: [lab.roots[0], lab.roots[2]]))
        #expect(third.state.trust?.rootVersion == 3)
        // A version 3 signed only by keys the held version 2 does not list is refused.
        let stranger = [Ed25519PrivateKey()]
        let forged = try RootDocument(
            app: Self.app, version: 4, expiresAt: Self.now + 86_400 * 999, rootKeys: stranger.map(\.publicKey), rootThreshold: 1, onlineKeys: [lab.online.publicKey],
            releaseKeys: lab.releaseKeys.map(\.publicKey), releaseThreshold: 2, protectedChannels: []
        ).signed(with: stranger)
        #expect(third.refusal(lab.envelope(version: 3, packs: next, releases: nil, roots: lab.roots + [forged])).contains("signed by 0 of version 3's root keys"))
    }

    @Test("A state recorded before the root was kept (no rootEnvelope), or whose kept root is not the recorded one, still walks through the recorded version, and keeps the root from then on: only the document and its own root keys' valid signatures, whatever the origin padded it with")
    func aStateWithoutTheRootEnvelopeWalksAsBefore() throws {
        let lab = Lab()
        let packs = [lab.entry("levels", revision: 1, digit: "a")]
        lab.addRoot(keys: [Ed25519PrivateKey()])
        var device = lab.device()
        try device.take(lab.envelope(version: 1, packs: packs, releases: [lab.statement(release: 1, packs: packs)]))
        device.state.trust?.rootEnvelope = nil
        device.state.trust?.releaseDigests = nil
        // Leaving version 2 out: the walk cannot pass through it, as before.
        #expect(device.refusal(lab.envelope(version: 2, packs: packs, releases: [lab.statement(release: 1, packs: packs)], roots: [lab.roots[0]])).contains("below version 2"))
        // Version 2 padded by the origin: signatures by unknown keys, a nested chain (none of it signed).
        var padded = lab.roots[1]
        padded.signatures += (0..<50).map { Envelope.Signature(keyid: "junk\($0)", sig: Data(repeating: 7, count: 64).base64EncodedString()) }
        padded.roots = Array(repeating: lab.roots[0], count: 20)
        try device.take(lab.envelope(version: 2, packs: packs, releases: [lab.statement(release: 1, packs: packs)], roots: [lab.roots[0], padded]))
        let kept = try #require(device.state.trust?.rootEnvelope)
        #expect(kept.payload == lab.roots[1].payload && kept.signatures.count == 1 && kept.roots == nil && kept.releases == nil, "\(kept.signatures.count) signatures")
        // A kept root that is not the recorded one (another version) is not used: the walk passes through the record.
        device.state.trust?.rootEnvelope = lab.roots[0]
        #expect(device.refusal(lab.envelope(version: 3, packs: packs, releases: [lab.statement(release: 1, packs: packs)], roots: [lab.roots[0]])).contains("below version 2"))
        try device.take(lab.envelope(version: 3, packs: packs, releases: [lab.statement(release: 1, packs: packs)]))
        #expect(device.state.trust?.rootEnvelope?.payload == lab.roots[1].payload)
    }

    @Test("A statement with the release number the device accepted, binding other packs, is refused (one number, two releases); the same release again is taken")
    func anEqualReleaseNumberBindingOtherPacksIsRefused() throws {
        var (lab, device, packs, _, s2) = try Self.deviceHoldingRelease2()
        #expect(device.state.trust?.releaseFloors["production"] == 2)
        let other = [lab.entry("levels", revision: 3, digit: "d"), packs[1]]
        let twin = lab.statement(release: 2, packs: other)
        #expect(device.refusal(lab.envelope(version: 3, packs: other, releases: [twin])).contains("binds other packs than the release 2 this device accepted"))
        // The accepted release, served again under a newer manifest version: taken.
        try device.take(lab.envelope(version: 4, packs: packs, releases: [s2]))
        packs = other
        try device.take(lab.envelope(version: 5, packs: packs, releases: [lab.statement(release: 3, packs: packs)]))
        #expect(device.state.trust?.releaseFloors["production"] == 3)
    }

    /// The small-order points and the encodings of y ≥ p, with and without the sign bit.
    static let weakKeys: [[UInt8]] = {
        let base: [[UInt8]] = [
            [UInt8](repeating: 0, count: 32),
            [1] + [UInt8](repeating: 0, count: 31),
            Hex.decode("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05")!,
            Hex.decode("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")!,
            [0xec] + [UInt8](repeating: 0xff, count: 30) + [0x7f],
            [0xed] + [UInt8](repeating: 0xff, count: 30) + [0x7f],
            [0xee] + [UInt8](repeating: 0xff, count: 30) + [0x7f],
            [0xff] + [UInt8](repeating: 0xff, count: 30) + [0x7f],
        ]
        return base + base.map { var key = $0; key[31] |= 0x80; return key }
    }()

    @Test("Ed25519 public keys of small order, or not canonically encoded, are refused wherever a key is read: the key type, a root's lists, a pinned configuration; a genuine key whose sign bit is set is taken")
    func weakKeysAreRefused() throws {
        for raw in Self.weakKeys {
            #expect(throws: CryptoError.weakPublicKey, "\(Hex.encode(raw))") { try Ed25519PublicKey(rawRepresentation: raw) }
        }
        // The identity as an online key: with R the identity and S = 0 "signatures" verify for any message.
        let rootKey = Ed25519PrivateKey()
        var document = RootDocument(
            app: Self.app, version: 1, expiresAt: Self.now + 86_400, rootKeys: [rootKey.publicKey], rootThreshold: 1, onlineKeys: [Ed25519PrivateKey().publicKey],
            releaseKeys: [], releaseThreshold: 0, protectedChannels: []
        )
        document.onlineKeys = [Data([1] + [UInt8](repeating: 0, count: 31)).base64EncodedString()]
        let planted = try Envelope.sign(payload: document.encoded(), type: RootDocument.payloadType, with: [rootKey])
        #expect(throws: TrustError.self) { try RootChain.selfSigned(planted, app: Self.app) }
        let configuration = ClientConfiguration(app: Self.app, manifestPublicKeys: [], keyRing: try KeyRing([:]))
        var pinned = configuration
        pinned.manifestPublicKeys = [Data(Self.weakKeys[0]).base64EncodedString()]
        #expect(throws: CryptoError.weakPublicKey) { try pinned.trustedKeys() }
        // RFC 8032 section 7.1, test 2: a public key whose top bit is set.
        let genuine = Hex.decode("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c")!
        _ = try Ed25519PublicKey(rawRepresentation: genuine)
        var flipped = genuine
        flipped[31] |= 0x80
        _ = try Ed25519PublicKey(rawRepresentation: flipped)
    }

    @Test("The primary language is bound: a manifest the online key re-signed with another primary language than the statement binds is refused (naming both), the signed one accepted; a statement from before the field (none bound) accepts the manifest's, as before; a candidate's statement must agree too")
    func thePrimaryLanguageIsBound() throws {
        let lab = Lab()
        var voice = lab.entry("voice-en", revision: 1, digit: "a", language: "en")
        voice.tags = ["group:voice"]
        var french = lab.entry("voice-fr", revision: 1, digit: "b", language: "fr")
        french.tags = ["group:voice"]
        let packs = [voice, french]
        let signed = lab.statement(release: 3, packs: packs, primaryLanguage: "en")
        var device = lab.device()
        let forged = device.refusal(lab.envelope(version: 4, packs: packs, releases: [signed], primaryLanguage: "fr"))
        #expect(forged.contains("binds primary language en, and the manifest carries fr"), "\(forged)")
        #expect(device.state.trust == nil, "nothing recorded")
        #expect(try device.take(lab.envelope(version: 4, packs: packs, releases: [signed], primaryLanguage: "en")).primaryLanguage == "en")
        // Stripping the language from the manifest is refused too.
        #expect(device.refusal(lab.envelope(version: 5, packs: packs, releases: [signed])).contains("the manifest carries none"))
        // A statement signed before the field existed binds no language: the manifest's is taken.
        var old = lab.device()
        #expect(try old.take(lab.envelope(version: 4, packs: packs, releases: [lab.statement(release: 3, packs: packs)], primaryLanguage: "fr")).primaryLanguage == "fr")
        // A rollout whose candidate's statement binds another language than the manifest carries.
        var newer = voice
        newer.revision = 2
        newer.sha256 = String(repeating: "c", count: 64)
        let rollout = Rollout(release: 5, fraction: 0.5, salt: String(repeating: "5", count: 32), packs: [newer])
        let candidate = lab.statement(release: 5, packs: [newer, french], primaryLanguage: "fr")
        let refused = device.refusal(lab.envelope(version: 6, packs: packs, rollout: rollout, releases: [signed, candidate], primaryLanguage: "en"))
        #expect(refused.contains("candidate (release 5) is not a release signed") && refused.contains("binds primary language fr"), "\(refused)")
        let agreeing = lab.statement(release: 5, packs: [newer, french], primaryLanguage: "en")
        #expect(try device.take(lab.envelope(version: 6, packs: packs, rollout: rollout, releases: [signed, agreeing], primaryLanguage: "en")).rollout?.release == 5)
    }

    @Test("A rollout candidate the device chose is recorded: the online key can halt the rollout (the device follows the current packs), never offer it an older signed candidate again; a newer rollout is taken; a device outside the sample records nothing")
    func aChosenCandidateIsRecorded() throws {
        let lab = Lab()
        let main = [lab.entry("levels", revision: 3, digit: "a")]
        let older = lab.entry("levels", revision: 4, digit: "b")
        let newer = lab.entry("levels", revision: 5, digit: "c")
        let newest = lab.entry("levels", revision: 6, digit: "d")
        let statements = [lab.statement(release: 3, packs: main), lab.statement(release: 4, packs: [older]), lab.statement(release: 5, packs: [newer]),
                          lab.statement(release: 6, packs: [newest])]
        func rollout(_ release: Int, _ entry: PackEntry, fraction: Double = 1) -> Rollout {
            Rollout(release: release, fraction: fraction, salt: String(repeating: "ab", count: 16), packs: [entry])
        }
        var device = lab.device()
        // Release 5 rolled out to everyone: the device takes it and records it.
        let five = try device.take(lab.envelope(version: 10, packs: main, rollout: rollout(5, newer), releases: [statements[0], statements[2]]))
        #expect(device.follows(five) == [newer])
        #expect(device.state.candidateFloor(channel: "production") == 5)
        // The holder of the online key offers release 4, signed and once rolled out, as the candidate: not taken.
        let four = try device.take(lab.envelope(version: 11, packs: main, rollout: rollout(4, older), releases: [statements[0], statements[1]]))
        #expect(device.follows(four) == main, "the current packs, not the older candidate")
        #expect(device.state.candidateFloor(channel: "production") == 5)
        // A halt (no rollout): the current packs.
        let halted = try device.take(lab.envelope(version: 12, packs: main, releases: [statements[0]]))
        #expect(device.follows(halted) == main)
        // The next rollout, release 6: taken.
        let six = try device.take(lab.envelope(version: 13, packs: main, rollout: rollout(6, newest), releases: [statements[0], statements[3]]))
        #expect(device.follows(six) == [newest] && device.state.candidateFloor(channel: "production") == 6)
        // A device outside the sample (fraction 0) records nothing and follows the current packs.
        var outside = lab.device()
        let none = try outside.take(lab.envelope(version: 10, packs: main, rollout: rollout(5, newer, fraction: 0), releases: [statements[0], statements[2]]))
        #expect(outside.follows(none) == main && outside.state.candidateFloor(channel: "production") == nil)
        // Before this record, release 4 would have been taken again.
        var forgetful = device
        forgetful.state.trust?.candidates = nil
        #expect(forgetful.follows(four) == [older])
    }
}
