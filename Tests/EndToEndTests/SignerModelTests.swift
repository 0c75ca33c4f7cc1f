import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Issue 61's attacker model on the offline side: a seeded walk in which an honest operator
/// publishes through the host and signs with their own files (`--root`, `--record`, only the
/// files of the packs they changed), a device pinning the genuine root syncs, and an attacker
/// holding the host (its data folder, its online key, the publisher token) acts between them:
/// it replaces the app's root with its own, serves production a forgery (its own root and
/// statement, or the genuine ones copied), rewrites the beta release the operator is about to
/// sign (the attacker's bytes, or an older signed revision), and inflates the release floor. The
/// operator's recovery is the runbook's: a restore from the last backup taken while the host was
/// clean. Checked from outside after every step: every file on the device is bytes the operator
/// signed from their own files; and while the host is clean, a release the operator signs is
/// what the device then holds. Real `depot serve`, real `depot` CLI for every party.
@Suite("The offline side as a state machine: an attacker holding the host between the signer's and the device's steps, checked from outside", .blocking)
struct SignerModelTests {
    typealias Rig = PackKeyLifeTests.Rig
    static let app = PackKeyLifeTests.app

    /// The walks CI runs; DEPOT_SIGNER_MODEL_STEPS and DEPOT_SIGNER_MODEL_SEED for a longer one.
    static var walks: [SeededWalk] {
        let environment = ProcessInfo.processInfo.environment
        if let steps = environment["DEPOT_SIGNER_MODEL_STEPS"].flatMap(Int.init) {
            let seeds = environment["DEPOT_SIGNER_MODEL_SEED"].map { $0.split(separator: ",").compactMap { UInt64($0) } } ?? [UInt64(Date().timeIntervalSince1970)]
            return seeds.map { SeededWalk(seed: $0, steps: steps) }
        }
        // Seed 11 restores a backup older than a signature at step 23; before issue 61's record
        // check and issue 62's restore floor (which takes the folder set aside), the origin then
        // issued a signed number again and the signer signed it.
        return [SeededWalk(seed: 1, steps: 30), SeededWalk(seed: 11, steps: 40)]
    }

    struct SeededWalk: Sendable, CustomTestStringConvertible {
        let seed: UInt64
        let steps: Int
        var testDescription: String { "seed \(seed), \(steps) steps" }
    }

    /// What the attacker holds of its own: a root key and a release key, never the operator's.
    struct Attacker {
        let rootKey = Ed25519PrivateKey()
        let releaseKey = Ed25519PrivateKey()

        /// Its root version 1 of the app, listing the host's online keys (it holds them).
        func root(_ data: String) throws -> Envelope {
            let online = try AppStore(folder: DataFolder(data)).signingKeys().map(\.publicKey)
            return try RootDocument(
                app: SignerModelTests.app, version: 1, expiresAt: Date().addingTimeInterval(365 * 86_400), rootKeys: [rootKey.publicKey], rootThreshold: 1,
                onlineKeys: online, releaseKeys: [releaseKey.publicKey], releaseThreshold: 1, protectedChannels: ["production"]
            ).signed(with: [rootKey])
        }
    }

    /// The operator's side of the model: what they hold, never read from the host.
    struct Operator {
        /// Each pack's content as the operator last published it.
        var files: [String: String] = ["intro": "intro v1"]
        /// Packs changed since their last signature: the files they give the next one.
        var changed: Set<String> = ["intro"]
        /// Every content of each pack the operator has signed (plaintext SHA-256).
        var signed: [String: Set<String>] = [:]
        /// When each content was first signed (a counter): a device never goes back to an older one.
        var order: [String: Int] = [:]
        /// Their beta release awaiting a signature.
        var beta: Int?
        /// What the last signature vouched for, when the device should now hold it.
        var expected: [String: String]?
        /// The last backup taken while the host was clean.
        var backup: String?
    }

    @Test("Every file a device pinning the genuine root installs is bytes the operator signed from their own files; while the host is clean, each release the operator signs reaches the device", arguments: walks)
    func walk(_ walk: SeededWalk) throws {
        var rig = try ReleaseSignerTests.rootedRig("depot-signer-model-\(walk.seed)")
        defer {
            rig.server.process.terminate()
            rig.work.remove()
        }
        var random = SeededRandom(seed: walk.seed)
        let attacker = Attacker()
        var person = Operator()
        var compromised = false
        var trail: [String] = []
        var counter = 1
        let folder = DataFolder(rig.data)
        func sha(_ text: String) -> String { Hex.encode(SHA256Hasher.hash(Array(text.utf8))) }

        /// The attacker publishes its own bytes of `pack` on beta (it holds the token): the entry
        /// it then plants, whose container the origin serves.
        func attackerEntry(_ pack: String) throws -> PackEntry {
            counter += 1
            _ = try CompromisedOriginTests.publish(rig, pack, Array("evil \(pack) \(counter)".utf8), channel: "beta")
            return try #require(try TrustFixture.manifest(CompromisedOriginTests.served(rig, channel: "beta")).packs.first { $0.id == pack })
        }

        /// Production's next release written by the attacker: `packs`, signed with the host's
        /// online keys, carrying `roots` and `releases`; the origin restarted.
        func forge(_ packs: [PackEntry], roots: [Envelope]?, releases: [Envelope]?) throws {
            let head = try #require(ReleaseStore.readNumber(folder.head(Self.app)))
            let manifest = Manifest(app: Self.app, version: head + 1, publishedAt: Date(), expiresAt: Date().addingTimeInterval(90 * 86_400), packs: packs, channel: "production")
            var envelope = try Envelope.sign(manifest, with: AppStore(folder: folder).signingKeys())
            (envelope.roots, envelope.releases) = (roots, releases)
            try FileSystem.writeAtomically(envelope.encoded(), to: folder.release(Self.app, head + 1))
            try FileSystem.writeAtomically(Array("\(head + 1)\n".utf8), to: folder.head(Self.app))
            try FileSystem.writeAtomically(Array("\(head + 1)\n".utf8), to: folder.currentPointer(Self.app))
            try rig.restart()
        }

        /// The invariant, from outside: the device's files are contents the operator signed, and
        /// none older than one it held before (the operator never rolls back in this walk).
        var held: [String: Int] = [:]
        func check(_ step: Int, _ action: String) throws {
            let packs = rig.work.path + "/device/packs"
            for id in FileSystem.contents(of: packs) where !id.hasPrefix(".") {
                let bytes = try FileSystem.readFile(packs + "/" + id)
                let digest = Hex.encode(SHA256Hasher.hash(bytes))
                #expect(person.signed[id]?.contains(digest) == true, "seed \(walk.seed) step \(step) (\(action)): the device holds \(id) = \(String(decoding: bytes.prefix(40), as: UTF8.self)), which the operator never signed; trail: \(trail.joined(separator: ", "))")
                if let rank = person.order[id + " " + digest] {
                    #expect(rank >= held[id] ?? 0, "seed \(walk.seed) step \(step) (\(action)): the device went back to an older signed \(id); trail: \(trail.joined(separator: ", "))")
                    held[id] = max(held[id] ?? 0, rank)
                }
            }
        }

        /// The operator signs `release` with their root file, their record and the files of the packs they changed.
        func sign(_ release: Int, _ name: String) throws -> Processes.Result {
            let given = rig.work.path + "/" + name
            try FileSystem.createDirectory(given)
            for id in person.changed { try FileSystem.writeAtomically(Array(person.files[id]!.utf8), to: given + "/" + id) }
            return try ReleaseSignerTests.promote(rig, release, ["--config", "rooted.json", "--root", "root-1.json", "--record", "record.json", "--packs", name])
        }

        /// The runbook's recovery: the origin stopped, `depot restore ARGS` (the last clean backup;
        /// or none, to raise the floor), started again, the operator's packs published again.
        func restore(_ arguments: [String]) throws {
            let port = rig.server.port
            rig.server.process.terminate()
            rig.server.process.waitUntilExit()
            let restored = try Processes.run(Processes.depotBinary, ["restore", "--data", rig.data] + arguments)
            #expect(restored.status == 0, "\(restored.stdout)\(restored.stderr)")
            rig.server = try ServeProcess(data: rig.data, environment: ["DEPOT_LISTEN": "127.0.0.1:\(port)"], bootstrap: false)
            for (id, text) in person.files.sorted(by: { $0.key < $1.key }) {
                person.beta = try CompromisedOriginTests.publish(rig, id, Array(text.utf8), channel: "beta")
            }
            person.changed = Set(person.files.keys)
        }

        /// Restores the last clean backup; with `floor`, numbers continue above the last release
        /// the operator's record holds (else the signer says so at the next signature).
        func recover(from backup: String, floor: Bool) throws {
            let record = try JSONSerialization.jsonObject(with: Data(FileSystem.readFile(rig.work.path + "/record.json"))) as? [String: Any]
            let last = (record?["signed"] as? [String: Int])?["production"] ?? 0
            try restore(["--replace", backup] + (floor ? ["--floor", "\(last + 1)"] : []))
            compromised = false
        }

        /// A signature's effects on the model, and the backup a clean host then gets.
        func signed(_ step: Int) throws {
            for (id, text) in person.files {
                person.signed[id, default: []].insert(sha(text))
                if person.order[id + " " + sha(text)] == nil { person.order[id + " " + sha(text)] = person.order.count }
            }
            person.changed = []
            person.beta = nil
            person.expected = compromised ? nil : person.files
            if !compromised {
                let backup = rig.work.path + "/backup-\(step)"
                let made = try Processes.run(Processes.depotBinary, ["backup", "--data", rig.data, backup])
                #expect(made.status == 0, "\(made.stderr)")
                person.backup = backup
            }
        }

        // The start: a first release signed on a clean host, a backup of it, the device holding it.
        person.files["levels"] = "levels v1"
        person.changed.insert("levels")
        person.beta = try CompromisedOriginTests.publish(rig, "levels", Array("levels v1".utf8), channel: "beta")
        let first = try sign(person.beta!, "files-0")
        #expect(first.status == 0, "\(first.stdout)\(first.stderr)")
        try signed(0)
        #expect(try rig.sync("rooted.json", device: "device").status == 0)
        try check(0, "the first release")

        for step in 1...walk.steps {
            let roll = Int.random(in: 0..<20, using: &random)
            var action: String
            switch roll {
            case 0..<5:
                // The operator publishes a new content of one pack on beta (through the host).
                let pack = ["intro", "levels", "maps"][Int.random(in: 0..<3, using: &random)]
                counter += 1
                let text = "\(pack) v\(counter)"
                person.beta = try CompromisedOriginTests.publish(rig, pack, Array(text.utf8), channel: "beta")
                person.files[pack] = text
                person.changed.insert(pack)
                action = "publish \(pack) as release \(person.beta!)"
            case 5..<10:
                guard let release = person.beta else { action = "sign (nothing to sign)"; break }
                let promoted = try sign(release, "files-\(step)")
                action = "sign release \(release): \(promoted.status == 0 ? "signed" : "refused")"
                if promoted.status != 0, !compromised, promoted.stderr.contains("raise its numbers with depot restore --data DATA --floor") {
                    // The restore reused a number the operator signed: they raise the floor as told, and sign again.
                    let floor = try #require(promoted.stderr.range(of: "--floor [0-9]+", options: .regularExpression).map { String(promoted.stderr[$0].dropFirst(8)) })
                    try restore(["--floor", floor])
                    let pack = ["intro", "levels", "maps"][Int.random(in: 0..<3, using: &random)]
                    counter += 1
                    person.files[pack] = "\(pack) v\(counter)"
                    person.beta = try CompromisedOriginTests.publish(rig, pack, Array(person.files[pack]!.utf8), channel: "beta")
                    let again = try sign(person.beta!, "files-\(step)-again")
                    action = "sign release \(release): refused as behind the record; floor raised to \(floor), \(pack) changed, release \(person.beta!) \(again.status == 0 ? "signed" : "refused")"
                    #expect(again.status == 0, "seed \(walk.seed) step \(step): \(again.stdout)\(again.stderr); trail: \(trail.joined(separator: ", "))")
                    if again.status == 0 { try signed(step) }
                } else if promoted.status == 0 {
                    try signed(step)
                } else {
                    #expect(compromised, "seed \(walk.seed) step \(step): the host is clean and the operator's signature was refused: \(promoted.stdout)\(promoted.stderr); trail: \(trail.joined(separator: ", "))")
                }
            case 10..<13:
                let synced = try rig.sync("rooted.json", device: "device")
                action = "device sync: \(synced.status == 0 ? "ok" : "refused")"
                if !compromised, let expected = person.expected {
                    #expect(synced.status == 0, "seed \(walk.seed) step \(step): \(synced.stderr)")
                    for (id, text) in expected {
                        #expect((try? rig.installed("device", id)) == Array(text.utf8), "seed \(walk.seed) step \(step): the device does not hold \(id) as signed; trail: \(trail.joined(separator: ", "))")
                    }
                }
            case 13:
                // The attacker's own root over roots/000001.json.
                try FileSystem.writeAtomically(try attacker.root(rig.data).encoded(), to: folder.rootDocument(Self.app, version: 1))
                try rig.restart()
                compromised = true
                action = "attacker: its root as version 1"
            case 14:
                // Production forged: one pack the attacker's, with its own root and statement, or the genuine ones copied.
                let live = try CompromisedOriginTests.served(rig)
                let envelope = try Envelope.decode(live)
                var packs = try TrustFixture.manifest(live).packs
                let evil = try attackerEntry(packs.isEmpty ? "levels" : packs[Int.random(in: 0..<packs.count, using: &random)].id)
                packs.removeAll { $0.id == evil.id }
                packs.append(evil)
                packs.sort { $0.id < $1.id }
                if Bool.random(using: &random) {
                    let head = try #require(ReleaseStore.readNumber(folder.head(Self.app)))
                    let statement = try ReleaseStatement(app: Self.app, channel: "production", release: head + 1, signedAt: Date(), packs: packs).signed(with: [attacker.releaseKey])
                    try forge(packs, roots: [try attacker.root(rig.data)], releases: [statement])
                    action = "attacker: production forged with its own root and statement"
                } else {
                    try forge(packs, roots: envelope.roots, releases: envelope.releases)
                    action = "attacker: production forged with the genuine root and statements"
                }
                compromised = true
            case 15:
                // The beta release the operator is about to sign rewritten: one pack the attacker's
                // bytes, or the revision the operator signed before (a replay past their record).
                guard let release = person.beta else { action = "attacker: nothing to rewrite"; break }
                var packs = try TrustFixture.manifest(FileSystem.readFile(folder.release(Self.app, release))).packs
                let index = Int.random(in: 0..<packs.count, using: &random)
                let id = packs[index].id
                let older = try Self.signedEntries(rig, id: id).first { $0.sha256 != packs[index].sha256 }
                if let older, Bool.random(using: &random) {
                    packs[index] = older
                    action = "attacker: beta release \(release)'s \(id) replaced by signed revision \(older.revision)"
                } else {
                    packs[index] = try attackerEntry(id)
                    action = "attacker: beta release \(release)'s \(id) replaced by its bytes"
                }
                try ReleaseSignerTests.rewrite(&rig, release: release, packs: packs)
                compromised = true
            case 16:
                // A release floor of ten years on: the next numbers no honest origin issues.
                try FileSystem.writeAtomically(Array("\(Int(Date().timeIntervalSince1970) + 10 * 365 * 86_400)\n".utf8), to: ReleaseFloor.path(folder))
                compromised = true
                action = "attacker: release floor ten years on"
            default:
                guard compromised, let backup = person.backup else { action = "recover (nothing to do)"; break }
                let floor = Bool.random(using: &random)
                try recover(from: backup, floor: floor)
                action = "recover from \(backup.split(separator: "/").last!)\(floor ? " with a floor above the record" : ""), publish every pack again (release \(person.beta!))"
            }
            trail.append("\(step): \(action)")
            try check(step, action)
        }
        // The walk ends recovered: whatever the attacker did, a restore and a signature reach the device.
        if compromised, let backup = person.backup { try recover(from: backup, floor: true) }
        if let release = person.beta {
            let promoted = try sign(release, "files-last")
            #expect(promoted.status == 0, "seed \(walk.seed), the end: \(promoted.stdout)\(promoted.stderr); trail: \(trail.joined(separator: ", "))")
            try signed(walk.steps + 1)
        }
        #expect(try rig.sync("rooted.json", device: "device").status == 0)
        for (id, text) in person.files {
            #expect((try? rig.installed("device", id)) == Array(text.utf8), "seed \(walk.seed), the end: the device does not hold \(id) as signed; trail: \(trail.joined(separator: ", "))")
        }
        try check(walk.steps + 1, "the end")
        if ProcessInfo.processInfo.environment["DEPOT_SIGNER_MODEL_TRAIL"] != nil { print("seed \(walk.seed): " + trail.joined(separator: "\n  ")) }
    }

    /// Entries of `id` in releases production served with a statement (newest first): what a
    /// replay would plant.
    static func signedEntries(_ rig: Rig, id: String) throws -> [PackEntry] {
        let folder = DataFolder(rig.data)
        var found: [PackEntry] = []
        for name in ReleaseSignerTests.statements(rig).sorted(by: >) {
            guard let release = Int(name.prefix(6)), let bytes = try? FileSystem.readFile(folder.release(app, release)),
                  let entry = try TrustFixture.manifest(bytes).packs.first(where: { $0.id == id }) else { continue }
            found.append(entry)
        }
        return found
    }
}
