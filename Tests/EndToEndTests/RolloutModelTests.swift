import DepotClient
import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Rollouts as a state machine: a seeded walk of publishes, rollout steps (start, advance, halt,
/// complete; allowed or not) and device syncs — some devices through DepotSync, some through the
/// extension flow, with patches on — checked from outside after every step. A failure names its
/// seed and step: `DEPOT_ROLLOUT_SEED=S DEPOT_ROLLOUT_STEPS=N` replays it.
@Suite("Rollouts as a state machine: a seeded walk, checked from outside", .blocking)
struct RolloutModelTests {
    static var walks: [(seed: UInt64, steps: Int)] {
        let environment = ProcessInfo.processInfo.environment
        if let steps = environment["DEPOT_ROLLOUT_STEPS"].flatMap(Int.init) {
            let seeds = environment["DEPOT_ROLLOUT_SEED"].map { $0.split(separator: ",").compactMap { UInt64($0) } } ?? [UInt64(Date().timeIntervalSince1970)]
            return seeds.map { ($0, steps) }
        }
        return [(11, 90), (12, 90)]
    }

    @Test("After every step: versions only rose; the manifest's rollout matches the origin's record; each answer is the one the model expects; every device that synced follows exactly its own choice, byte for byte; a device in at one fraction stays in at a higher one")
    func walk() async throws {
        for (seed, steps) in Self.walks {
            try await withServer(configure: { $0.patchDepth = 1 }) { origin in
                try await Self.run(origin: origin, seed: seed, steps: steps)
            }
        }
    }

    static func run(origin: TestOrigin, seed: UInt64, steps: Int) async throws {
        var random = SeededRandom(seed: seed)
        let work = TemporaryDirectory("depot-rollout-model")
        defer { work.remove() }
        let fleet = try RolloutFleet(origin: origin, root: work.path, count: 10)
        let packs = ["core", "level", "voice"]
        var published: [String: [UInt8]] = [:]  // plaintext SHA-256 → bytes ever published
        var counter: UInt8 = 0
        func content() -> [UInt8] {
            counter &+= 1
            let bytes = bytes(Int.random(in: 1_000...3_000, using: &random), seed: counter)
            published[Hex.encode(SHA256Hasher.hash(bytes))] = bytes
            return bytes
        }
        for pack in packs { try put(origin, pack, content()) }
        var version = try fleet.manifest().version
        // The model: what the channel carries.
        var running = false, present = false, fraction = 0.0
        var betaRelease: Int? = nil
        var synced = Set<Int>()  // devices that synced since the manifest last changed
        var membership: [Int: Bool] = [:]  // for the current salt, who was in at the last fraction
        var salt: String?

        var tally: [String: Int] = [:]
        func where_(_ step: Int, _ what: String) -> Comment { "seed \(seed), step \(step): \(what)" }

        for step in 0..<steps {
            let roll = Int.random(in: 0..<100, using: &random)
            var changed = false
            var what = ""
            if roll < 12 {
                // A change on beta: the next candidate.
                let pack = packs.randomElement(using: &random)!
                what = "publish \(pack) on beta"
                let response = try put(origin, pack, content(), query: "&channel=beta")
                betaRelease = try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])["release"] as? Int
            } else if roll < 20 {
                let pack = packs.randomElement(using: &random)!
                what = "publish \(pack) on production"
                let response = try put(origin, pack, content(), expecting: running ? 409 : 201)
                if !running {
                    changed = true
                    present = false
                } else {
                    #expect(response.bodyText.contains("rollout_running"), where_(step, what))
                }
            } else if roll < 30, let beta = betaRelease {
                let share = Double(Int.random(in: 1...9, using: &random)) / 10
                what = "start \(beta) at \(share)"
                let response = try call(origin, "POST", "/v1/apps/\(origin.app)/rollouts/production/start?release=\(beta)&fraction=\(share)")
                if running {
                    #expect(response.status == 409, where_(step, what + ": \(response.bodyText)"))
                } else if response.status == 201 {
                    (running, present, fraction, changed) = (true, true, share, true)
                    membership = [:]
                    tally["start", default: 0] += 1
                } else {
                    // Only when beta holds production's packs already.
                    #expect(response.status == 409 && response.bodyText.contains("nothing_to_roll_out"), where_(step, what + ": \(response.bodyText)"))
                }
            } else if roll < 40 {
                let share = Double(Int.random(in: 1...10, using: &random)) / 10
                what = "advance to \(share)"
                let response = try call(origin, "POST", "/v1/apps/\(origin.app)/rollouts/production/advance?fraction=\(share)")
                let allowed = present && share > fraction
                #expect(response.status == (allowed ? 201 : present ? 409 : response.status == 404 ? 404 : 409), where_(step, what + ": \(response.bodyText)"))
                if allowed {
                    (running, fraction, changed) = (true, share, true)
                    tally["advance", default: 0] += 1
                }
            } else if roll < 46 {
                what = "halt"
                let response = try call(origin, "POST", "/v1/apps/\(origin.app)/rollouts/production/halt")
                #expect((response.status == 201) == running, where_(step, what + ": \(response.bodyText)"))
                if running {
                    (running, fraction, changed) = (false, 0, true)
                    membership = [:]
                    tally["halt", default: 0] += 1
                }
            } else if roll < 51 {
                what = "complete"
                let response = try call(origin, "POST", "/v1/apps/\(origin.app)/rollouts/production/complete")
                #expect((response.status == 201) == present, where_(step, what + ": \(response.bodyText)"))
                if present {
                    (running, present, fraction, changed) = (false, false, 0, true)
                    tally["complete", default: 0] += 1
                }
            } else {
                // Devices take their event: most through DepotSync, some through the extension flow.
                let device = Int.random(in: 0..<fleet.count, using: &random)
                what = "device \(device) syncs"
                if device % 3 == 0 {
                    try extensionEvent(fleet, device: device, work: work.path)
                } else {
                    let report = try await fleet.sync(device)
                    #expect(report.failed.isEmpty, where_(step, what + ": \(report.failed)"))
                }
                synced.insert(device)
                tally["sync", default: 0] += 1
            }

            // From outside, after every step.
            let manifest = try fleet.manifest()
            #expect(manifest.version >= version, where_(step, what + ": the version went down"))
            if changed {
                #expect(manifest.version > version, where_(step, what + ": a step that changed the channel published a new version"))
                synced = []
            }
            version = manifest.version
            #expect((manifest.rollout != nil) == present && (manifest.rollout?.fraction ?? 0) == fraction, where_(step, what + ": the manifest's rollout"))
            if present {
                let record = try rolloutStatus(origin)
                #expect(record.state == (running ? "running" : "halted") && record.fraction == fraction && record.manifest >= manifest.version, where_(step, what + ": the record (a patch release may come between)"))
                if salt != manifest.rollout?.salt {
                    salt = manifest.rollout?.salt
                    membership = [:]
                }
            }
            for device in 0..<fleet.count {
                let store = try StateStore(destination: fleet.destination(device))
                let state = try store.read(app: origin.app)
                // What the state says is installed is, byte for byte, what was published.
                for (id, pack) in state.packs {
                    let bytes = try FileSystem.readFile(fleet.destination(device) + "/packs/" + id)
                    #expect(Hex.encode(SHA256Hasher.hash(bytes)) == pack.plaintextSHA256 && published[pack.plaintextSHA256] == bytes, where_(step, what + ": device \(device)'s \(id)"))
                }
                guard let installID = state.installID else { continue }
                if let rollout = manifest.rollout {
                    let taken = rollout.takesCandidate(installID: installID)
                    if membership[device] == true && rollout.fraction > 0 { #expect(taken, where_(step, what + ": device \(device) left a rollout whose fraction rose")) }
                    if rollout.fraction > 0 { membership[device] = taken }
                }
                // A device that synced since the last change follows exactly its own choice.
                if synced.contains(device) {
                    let chosen = manifest.resolved(installID: installID)
                    #expect(Set(state.packs.keys) == Set(chosen.packs.map(\.id)), where_(step, what + ": device \(device)'s packs"))
                    for entry in chosen.packs {
                        #expect(state.packs[entry.id]?.revision == entry.revision && state.packs[entry.id]?.sha256 == entry.sha256, where_(step, what + ": device \(device)'s \(entry.id)"))
                    }
                }
            }
        }
        #expect(tally["start", default: 0] > 0 && tally["halt", default: 0] + tally["complete", default: 0] > 0, "the walk of seed \(seed) ran rollouts: \(tally)")
        print("RolloutModelTests: seed \(seed), \(steps) steps: \(tally.sorted { $0.key < $1.key })")
    }

    /// One periodic event through the extension flow, the system's part played here.
    static func extensionEvent(_ fleet: RolloutFleet, device: Int, work: String) throws {
        let origin = fleet.origin
        let flow = try ExtensionFlow(configuration: fleet.configuration, destination: fleet.destination(device))
        let file = work + "/manifest-\(device).json"
        try FileSystem.writeAtomically(try call(origin, "GET", "/v1/apps/\(origin.app)/manifest", token: "").body, to: file)
        for download in try flow.schedule(manifestFile: file, kind: .periodic, languages: ["en"]) {
            let response = try call(origin, "GET", download.url.path, token: "")
            #expect(response.status == 200 && response.body.count == download.fileSize)
            try FileSystem.writeAtomically(response.body, to: work + "/delivered-\(device)")
            try flow.receive(identifier: download.identifier, file: work + "/delivered-\(device)")
        }
        let report = try flow.installArrived(languages: ["en"])
        #expect(report.discarded.isEmpty && report.kept.isEmpty, "\(report)")
    }
}
