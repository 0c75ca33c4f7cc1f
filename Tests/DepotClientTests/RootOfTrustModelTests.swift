import DepotClient
import DepotCore
import Foundation
import Testing

/// A seeded model-based test of a device's trust state on a protected channel: random sequences
/// of the origin's legitimate steps (a new signed release, a refresh, a rollout step, a root
/// rotation that may rotate the online key) and an attacker's (altered packs, a replayed release,
/// a pushed version, a fork of the root chain with a retired root key, an unsigned candidate).
/// After every step, checked from outside the device's code: it holds only packs some signed
/// release bound, never goes back to an older signed release or root, and takes every new
/// signed release the origin publishes.
@Suite struct RootOfTrustModelTests {
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    @Test(arguments: [1, 2, 3, 4, 5, 6, 7, 8] as [UInt64])
    func deviceTrustUnderRandomSteps(seed: UInt64) throws {
        var random = Generator(state: seed)
        let lab = RootOfTrustTests.Lab()
        var device = lab.device()
        // The origin's truth: signed releases by number, and the version it serves next.
        var releases: [Int: (packs: [PackEntry], statement: Envelope)] = [:]
        var latest = 0
        var version = 0
        var retiredRootKeys: [Ed25519PrivateKey] = []
        var retiredOnline: [Ed25519PrivateKey] = []
        let digits = Array("0123456789abcdef")
        func newRelease() -> Int {
            latest += 1
            let packs = (0..<Int.random(in: 1...3, using: &random)).map { index in
                lab.entry("pack\(index)", revision: latest, digit: digits[(latest + index) % 16])
            }
            releases[latest] = (packs, lab.statement(release: latest, packs: packs))
            return latest
        }
        _ = newRelease()
        version += 1
        try device.take(lab.envelope(version: version, packs: releases[1]!.packs, releases: [releases[1]!.statement]))
        var held = 1
        var pushed = false
        for step in 0..<60 {
            let before = device.state
            let choice = Int.random(in: 0..<10, using: &random)
            var mustAccept = false
            var bytes: [UInt8]
            switch choice {
            case 0, 1:  // The origin publishes the next signed release.
                let number = newRelease()
                version += 1
                bytes = lab.envelope(version: version, packs: releases[number]!.packs, releases: [releases[number]!.statement, releases[latest - 1]!.statement])
                mustAccept = true
            case 2:  // The origin refreshes the live release (same statement, next version).
                version += 1
                bytes = lab.envelope(version: version, packs: releases[latest]!.packs, releases: [releases[latest]!.statement])
                mustAccept = !pushed
            case 3:  // A rollout step of the next release, signed.
                let number = newRelease()
                version += 1
                let candidate = releases[number]!
                let rollout = Rollout(release: number, fraction: Double(Int.random(in: 0...10, using: &random)) / 10, salt: String(repeating: "3", count: 32), packs: candidate.packs, removed: releases[number - 1]!.packs.map(\.id).filter { id in !candidate.packs.contains { $0.id == id } })
                bytes = lab.envelope(version: version, packs: releases[number - 1]!.packs, rollout: rollout, releases: [releases[number - 1]!.statement, candidate.statement])
                mustAccept = !pushed || number - 1 > (device.state.trust?.releaseFloors["production"] ?? 0)
            case 4:  // A root rotation, sometimes with a new online key.
                retiredRootKeys += lab.rootKeys.last!
                if Bool.random(using: &random) {
                    retiredOnline.append(lab.online)
                    lab.online = Ed25519PrivateKey()
                }
                lab.addRoot(keys: [Ed25519PrivateKey()])
                version += 1
                bytes = lab.envelope(version: version, packs: releases[latest]!.packs, releases: [releases[latest]!.statement])
                mustAccept = !pushed
            case 5:  // Attacker: altered packs under the latest statement.
                var packs = releases[latest]!.packs
                packs[0].sha256 = String(repeating: "0", count: 64)
                bytes = lab.envelope(version: version + 1_000, packs: packs, releases: [releases[latest]!.statement])
            case 6:  // Attacker: an older signed release replayed at a high version.
                let old = Int.random(in: 1...latest, using: &random)
                bytes = lab.envelope(version: version + 1_000, packs: releases[old]!.packs, releases: [releases[old]!.statement])
            case 7:  // Attacker with the online key: the live release at a pushed version.
                bytes = lab.envelope(version: version + 1_000_000, packs: releases[latest]!.packs, releases: [releases[latest]!.statement])
            case 8:  // Attacker holding a retired root key or online key: a fork of the chain.
                // (A root key retired by a version the device has recorded: until a device has
                // seen version n+1, version n's keys are what it trusts — TUF's rule too.)
                let attacker = Ed25519PrivateKey()
                if let old = retiredRootKeys.last, device.state.trust?.rootVersion == lab.roots.count {
                    let forged = try RootDocument(
                        app: RootOfTrustTests.app, version: lab.roots.count, expiresAt: RootOfTrustTests.now + 86_400 * 999, rootKeys: [old.publicKey], rootThreshold: 1,
                        onlineKeys: [attacker.publicKey], releaseKeys: [attacker.publicKey], releaseThreshold: 1, protectedChannels: ["production"]
                    ).signed(with: [old])
                    let evil = [lab.entry("pack0", revision: 99, digit: "f")]
                    let statement = try ReleaseStatement(app: RootOfTrustTests.app, channel: "production", release: latest + 1, signedAt: RootOfTrustTests.now, packs: evil).signed(with: [attacker])
                    bytes = lab.envelope(version: version + 1, packs: evil, releases: [statement], signer: attacker, roots: Array(lab.roots.dropLast()) + [forged])
                } else {
                    bytes = lab.envelope(version: version + 1, packs: releases[latest]!.packs, releases: [releases[latest]!.statement], signer: retiredOnline.last ?? attacker)
                }
            default:  // Attacker: an unsigned candidate beside the live release.
                let rollout = Rollout(release: latest + 1, fraction: 1, salt: String(repeating: "4", count: 32), packs: [lab.entry("pack0", revision: 77, digit: "e")])
                bytes = lab.envelope(version: version + 1, packs: releases[latest]!.packs, rollout: rollout, releases: [releases[latest]!.statement])
            }
            let outcome = Result { try device.take(bytes) }
            // The invariant, from outside: what the device holds is a signed release's packs, never older.
            switch outcome {
            case .success(let manifest):
                let bound = ReleaseStatement.bound(manifest.packs)
                let match = releases.filter { ReleaseStatement.bound($0.value.packs) == bound }.keys.max()
                #expect(match != nil, "seed \(seed) step \(step) (\(choice)): accepted packs no signed release holds: \(bound.map { "\($0.id)@\($0.revision)" })")
                #expect((match ?? 0) >= held, "seed \(seed) step \(step): went back from release \(held) to \(match ?? 0)")
                held = max(held, match ?? 0)
                // The live release at a higher version is a push (a replay of the live one is too).
                if choice == 6 || choice == 7 { pushed = true }
                if choice <= 1 { pushed = false }
            case .failure(let error):
                #expect(device.state == before, "seed \(seed) step \(step): a refusal changed the state")
                #expect(!mustAccept, "seed \(seed) step \(step) (\(choice)): the origin's own step was refused: \(error)")
            }
            #expect((device.state.trust?.rootVersion ?? 0) >= (before.trust?.rootVersion ?? 0))
            #expect((device.state.trust?.releaseFloors["production"] ?? 0) >= (before.trust?.releaseFloors["production"] ?? 0))
        }
    }
}
