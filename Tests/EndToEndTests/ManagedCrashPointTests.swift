import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// The managed device simulator (`depot sync --managed`) killed, or its power cut, at every crash
/// point of an update: its state (`managed-state.json`) names only archives on disk whole, with the
/// size and SHA-256 it records, and the next event reaches the live versions.
@Suite("Crash points of a managed device's update: killed or powered off at each, recovered by the next event", .blocking)
struct ManagedCrashPointTests {
    @Test("Killed at every crash point of a managed update: the state names only whole archives, the next event reaches the live versions", .enabled(if: CrashSeam.killsEnabled))
    func killed() async throws {
        try await run(modes: [.kill])
    }

    @Test("A power cut at every crash point of a managed update (unsynced data and folder changes lost): the same", .enabled(if: HeavyTests.enabled))
    func powerCut() async throws {
        try await run(modes: CrashSeam.powerModes)
    }

    struct Held: Decodable { var version: Int; var size: Int64; var sha256: String }
    struct State: Decodable { var packs: [String: Held] }

    func run(modes: [CrashSeam.Mode]) async throws {
        let work = TemporaryDirectory("depot-managed-crash")
        defer { work.remove() }
        let data = work.path + "/data"
        let server = try ServeProcess(data: data, environment: [:])
        defer { server.process.terminate(); server.process.waitUntilExit() }
        let depot = Processes.depotBinary
        let app = "com.example.managed"
        let create = try Processes.run(depot, ["apps", "create", app, "--data", data, "--mode", "managed", "--app-group", "group.com.example.managed"])
        #expect(create.status == 0, "\(create.stderr)")
        let tokens = try Processes.run(depot, ["tokens", "create", "--data", data, "--app", app, "--role", "publisher"])
        let token = try #require(tokens.stdout.split(separator: "\n").last.map(String.init))
        let environment = ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": token]
        let common = ["--server", server.url, "--app", app]

        var published: [String: [UInt8]] = [:]
        func publish(_ id: String, _ byte: UInt8, count: Int) throws {
            let archive = work.path + "/\(id).aar"
            let bytes = ArchiveFixture.uncompressed([(path: "\(id).bin", bytes: CrashDevice.bytes(count, seed: UInt64(byte)))])
            try FileSystem.writeAtomically(bytes, to: archive)
            let manifest = work.path + "/\(id).json"
            let json = #"{"assetPackID":"\#(id)","downloadPolicy":{"essential":{"installationEventTypes":["firstInstallation","subsequentUpdate"]}},"fileSelectors":[{"directory":"x"}],"platforms":["iOS"]}"#
            try FileSystem.writeAtomically(Array(json.utf8), to: manifest)
            let run = try Processes.run(depot, ["publish", archive, "--pack-manifest", manifest, "--release", "--quiet"] + common, environment: environment)
            #expect(run.status == 0, "\(run.stderr)")
            published[id] = bytes
        }
        let base = work.path + "/base", dest = work.path + "/dest"
        func sync(_ destination: String, crash: [String: String] = [:]) throws -> (status: Int32, killed: Bool, output: String) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: depot)
            process.arguments = ["sync", "--managed", "--event", "update", "--dest", destination, "--allow-http"] + common
            process.environment = ProcessInfo.processInfo.environment.merging(environment.merging(crash) { $1 }) { $1 }
            let out = Pipe()
            process.standardOutput = out
            process.standardError = out
            try process.run()
            let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return (process.terminationStatus, process.terminationReason == .uncaughtSignal, text)
        }
        /// Every pack the state names is on disk with the recorded size and SHA-256.
        func checkState(_ context: String) {
            guard let bytes = try? FileSystem.readFile(dest + "/managed-state.json") else { return }
            guard let state = try? JSONDecoder().decode(State.self, from: Data(bytes)) else {
                Issue.record("\(context): managed-state.json is not whole: \(String(decoding: bytes, as: UTF8.self))")
                return
            }
            for (id, held) in state.packs {
                let archive = (try? FileSystem.readFile(dest + "/packs/\(id).aar")) ?? []
                #expect(Int64(archive.count) == held.size && Hex.encode(SHA256Hasher.hash(archive)) == held.sha256,
                        "\(context): the state says \(id) version \(held.version) is held (\(held.size) bytes) while its archive has \(archive.count) bytes")
            }
        }

        try publish("levels", 1, count: 150_000)
        try publish("music", 2, count: 90_000)
        #expect(try sync(base).status == 0)
        // The update: both packs get new versions.
        try publish("levels", 3, count: 170_000)
        try publish("music", 4, count: 60_000)

        let trace = work.path + "/trace"
        try CrashSeam.copy(base, to: dest)
        let traced = try sync(dest, crash: ["DEPOT_CRASH_TRACE": trace])
        #expect(traced.status == 0 && traced.output.contains("downloaded levels version 2"), "\(traced.output)")
        let count = CrashSeam.trace(trace).count
        #expect(count > 6, "the update must have crash points: \(count)")
        var killed = 0
        try await CrashSeam.enumerate(count, modes: modes, trace: trace, work: work.path, label: "managed") { crash in
            try CrashSeam.copy(base, to: dest)
            let result = try sync(dest, crash: crash.environment)
            #expect(result.killed, "\(crash.what): the run did not reach its crash point")
            if result.killed { killed += 1 }
            checkState(crash.what)
            let next = try sync(dest)
            #expect(next.status == 0, "\(crash.what): the next event failed: \(next.output)")
            for (id, bytes) in published {
                #expect((try? FileSystem.readFile(dest + "/packs/\(id).aar")) == bytes, "\(crash.what): \(id) is not the live archive after the next event")
                #expect(next.output.contains("device has \(id) version 2 (\(bytes.count) bytes)"), "\(crash.what): \(next.output)")
            }
            return next.status == 0
        }
        print("ManagedCrashPointTests \(modes.map(\.rawValue)): \(count) crash points, \(killed) runs killed and recovered")
    }
}
