import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// A build that keeps the state outside the packs' folder (`--state-folder`, an app's
/// `Library/Application Support`) moves a former build's state (`DEST/.depot`) there at its first
/// open. Killed at every crash point of that first event, the floor and the install id are never
/// lost, and the next run finishes the move.
@Suite("Crash points of moving the state out of the packs' folder", .blocking)
struct StateMoveCrashPointTests {
    static func state(_ path: String) -> InstalledState? {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return (try? FileSystem.readFile(path)).flatMap { try? decoder.decode(InstalledState.self, from: Data($0)) }
    }

    @Test("Killed at every crash point of the first schedule with a state folder: the floor and the install id are in one place or the other, and the next run moves them whole", .enabled(if: CrashSeam.killsEnabled))
    func stateMove() async throws {
        try await run(modes: [.kill])
    }

    @Test("A power cut at every crash point of the state folder's move (unsynced data and folder changes lost): the same", .enabled(if: HeavyTests.enabled))
    func stateMovePowerCut() async throws {
        try await run(modes: CrashSeam.powerModes)
    }

    func run(modes: [CrashSeam.Mode]) async throws {
        try await withServer { origin in
            var device = try CrashDevice(origin: origin)
            defer { device.work.remove() }
            try device.publishFirst(.zip)
            let flow = ExtensionDevice(device: device)
            // A former build's device: the state under the packs, with its install id and floor.
            try await flow.event(dest: device.base)
            let id = try StateStore(destination: device.base).installID(app: origin.app)
            let before = try #require(Self.state(device.base + "/.depot/state.json"))
            #expect(before.floor(channel: "production") > 0)
            let folder = device.work.path + "/state"
            let arguments = ["schedule", "--manifest", try flow.manifestFile(), "--event", "periodic", "--state-folder", folder]

            let trace = device.work.path + "/trace"
            try CrashSeam.copy(device.base, to: device.dest)
            let traced = try flow.launch(arguments, dest: device.dest, environment: ["DEPOT_CRASH_TRACE": trace])
            // (The copies of the packs are new inodes here: they are planned again, the same each run.)
            #expect(traced.status == 0 && !traced.output.isEmpty, "\(traced.errors)")
            let count = CrashSeam.trace(trace).count
            #expect(count >= 4, "the move must have crash points: \(count)")
            var killed = 0
            try await CrashSeam.enumerate(count, modes: modes, trace: trace, work: device.work.path, label: "state-move") { crash in
                try CrashSeam.copy(device.base, to: device.dest)
                try? FileManager.default.removeItem(atPath: folder)
                let result = try flow.launch(arguments, dest: device.dest, environment: crash.environment)
                #expect(result.killed, "\(crash.what): the run did not reach its crash point")
                if result.killed { killed += 1 }
                // Right after the kill: a whole state in the new place or the old one, never neither.
                let kept = Self.state(folder + "/state.json") ?? Self.state(device.dest + "/.depot/state.json")
                #expect(kept?.installID == id && kept?.floor(channel: "production") == before.floor(channel: "production"), "\(crash.what): \(String(describing: kept))")
                // The next run finishes the move and plans what the uninterrupted run planned.
                let next = try flow.launch(arguments, dest: device.dest)
                #expect(next.status == 0 && next.output == traced.output, "\(crash.what): \(next.errors)\(next.output)")
                let moved = Self.state(folder + "/state.json")
                #expect(moved?.installID == id && moved?.floor(channel: "production") == before.floor(channel: "production"), "\(crash.what)")
                #expect(!FileSystem.exists(device.dest + "/.depot/state.json") && FileSystem.exists(folder + "/manifest-production.json"), "\(crash.what)")
                return true
            }
            print("StateMoveCrashPointTests \(modes.map(\.rawValue)): \(count) crash points, \(killed) runs killed and recovered")
        }
    }
}
