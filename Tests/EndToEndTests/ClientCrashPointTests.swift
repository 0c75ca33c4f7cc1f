import DepotClient
import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// A device's update killed at every crash point (each file created, mkdir, rename, exchange,
/// unlink, fsync of `depot sync`), and again with the power cut's losses: right after each, the
/// state records only copies that are byte for byte what was published and no other copy than
/// the one at `packs/<id>` (`Fixtures/device_checker.py`, which hashes every copy), the next sync
/// succeeds and leaves exactly the live release, and the one after it changes nothing. The kills
/// at each switch and just after it always run.
@Suite("Crash points of a device's sync: killed at each, recovered by the next sync", .blocking)
struct ClientCrashPointTests {
    enum Change: String, CaseIterable, Sendable {
        /// A file pack replaced whole; a zip pack whose entries change; a file pack patched; a zip
        /// pack patched entry by entry; a pack removed; the device's language changed.
        case file, zip, patch, treePatch, removal, language
    }

    @Test("Killed at every crash point of an update, the device records only what it holds and the next sync reaches the live release", .enabled(if: CrashSeam.killsEnabled), arguments: Change.allCases)
    func killed(change: Change) async throws {
        try await run(change, modes: [.kill])
    }

    @Test("A power cut at every crash point of an update (unsynced data and folder changes lost): the same", .enabled(if: HeavyTests.enabled), arguments: Change.allCases)
    func powerCut(change: Change) async throws {
        try await run(change, modes: CrashSeam.powerModes)
    }

    func run(_ change: Change, modes: [CrashSeam.Mode]) async throws {
        try await withServer(configure: { $0.patchDepth = [.patch, .treePatch].contains(change) ? 1 : 0 }) { origin in
            var device = try CrashDevice(origin: origin)
            defer { device.work.remove() }
            try device.publishFirst(change)
            try device.sync(languages: "en", dest: device.base)
            try device.check("converged", dest: device.base)
            try device.publishSecond(change)
            let languages = change == .language ? "fr" : "en"

            // How many crash points the update has.
            try CrashSeam.copyDevice(device.base, to: device.dest)
            let trace = device.work.path + "/trace"
            try device.sync(languages: languages, dest: device.dest, environment: ["DEPOT_CRASH_TRACE": trace])
            let lines = CrashSeam.trace(trace)
            let count = lines.count
            #expect(count > 10, "the update must have crash points")
            if [.patch, .treePatch].contains(change) {
                #expect(lines.contains { $0.hasSuffix(".delta") }, "the update must go through the patch (the device copied with its records' inodes)")
            }
            // The kill right at each switch and just after it (between the switch and its record) always runs.
            let switches = CrashSeam.switchPoints(lines, packs: device.dest + "/packs")
            #expect(!switches.isEmpty || change == .removal, "the update must switch copies in (found in the trace by their paths)")
            var killed = 0
            try await CrashSeam.enumerate(count, modes: modes, trace: trace, work: device.work.path, label: change.rawValue,
                                          including: switches.flatMap { [$0, $0 + 1, $0 + 2] }) { crash in
                try CrashSeam.copyDevice(device.base, to: device.dest)
                let result = try device.syncResult(languages: languages, dest: device.dest, environment: crash.environment)
                let what = crash.what
                #expect(result.killed, "\(what): the run did not reach its crash point")
                if result.killed { killed += 1 }
                try device.check("state", dest: device.dest, context: what)
                let recovered = try device.syncResult(languages: languages, dest: device.dest)
                #expect(recovered.status == 0, "\(what): the next sync failed: \(recovered.errors)")
                try device.check("converged", dest: device.dest, context: what)
                let before = CrashSeam.digest(device.dest + "/packs")
                let again = try device.syncResult(languages: languages, dest: device.dest)
                #expect(again.status == 0 && CrashSeam.digest(device.dest + "/packs") == before, "\(what): the sync after the recovery changed something")
                return recovered.status == 0
            }
            print("ClientCrashPointTests \(change) \(modes.map(\.rawValue)): \(count) crash points, \(killed) runs killed and recovered")
        }
    }
}

/// One device of the crash-point tests: what was published, and `depot sync` runs.
struct CrashDevice {
    let origin: TestOrigin
    let work = TemporaryDirectory("depot-crashpoints")
    let config: String
    var base: String { work.path + "/base" }
    var dest: String { work.path + "/dest" }
    /// pack → revision → content (a file's SHA-256, or a tree's entries), and the live revisions.
    var published: [String: [Int: [String: Any]]] = [:]
    var live: [String: Int] = [:]
    var movie: [UInt8] = []
    var tree: [String: [UInt8]] = [:]

    init(origin: TestOrigin) throws {
        self.origin = origin
        config = work.path + "/client.json"
        try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: config)
    }

    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var generator = SeededRandom(seed: seed)
        return (0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
    }

    mutating func publishFirst(_ change: ClientCrashPointTests.Change) throws {
        movie = Self.bytes(300_000, seed: 1)
        for i in 0..<6 { tree["level/\(i % 2)/part-\(i).bin"] = Self.bytes(20_000 + i * 3_000, seed: UInt64(10 + i)) }
        try put("movie", movie)
        try putTree()
        if change == .language {
            try AppStore(folder: DataFolder(origin.data.path)).setPrimaryLanguage(origin.app, "en")
            try put("voice-en", Self.bytes(50_000, seed: 30), query: "&language=en")
            try put("voice-fr", Self.bytes(60_000, seed: 31), query: "&language=fr")
        }
    }

    mutating func publishSecond(_ change: ClientCrashPointTests.Change) throws {
        switch change {
        case .file:
            movie = Self.bytes(280_000, seed: 2)
            try put("movie", movie)
        case .patch:
            movie.replaceSubrange(100_000..<101_000, with: Self.bytes(3_000, seed: 3))
            try put("movie", movie)
        case .zip, .treePatch:
            tree["level/0/part-0.bin"]![100] ^= 0x5a
            tree["level/1/part-1.bin"] = nil
            tree["level/new.bin"] = Self.bytes(7_000, seed: 40)
            try putTree()
        case .removal:
            let removed = try RawHTTP.send(port: origin.port, "DELETE /v1/apps/\(origin.app)/packs/levels?release=true&removeLive=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(origin.token)\r\nConnection: close\r\n\r\n")
            #expect(removed.first.map { (200..<300).contains($0.status) } == true, "\(removed.first?.bodyText ?? "")")
            try readLive()
        case .language:
            break
        }
        origin.server.waitForPatches()
        try readLive()
        if [.patch, .treePatch].contains(change) {
            let manifest = try Envelope.decode(manifestBytes()).verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())
            let pack = change == .patch ? "movie" : "levels"
            #expect(manifest[pack: pack]?.patches?.isEmpty == false, "the origin must have made a patch for \(pack)")
        }
    }

    mutating func putTree() throws {
        try put("levels", TreeFiles.zip(tree, in: work.path + "/zip-\(published["levels"]?.count ?? 0)"), zip: true)
    }

    mutating func put(_ pack: String, _ body: [UInt8], zip: Bool = false, query: String = "") throws {
        let head = "PUT /v1/apps/\(origin.app)/packs/\(pack)?release=true&policy=prefetch\(query) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(origin.token)\r\n"
            + (zip ? "Content-Type: application/zip\r\n" : "") + "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        let answer = try #require(try RawHTTP.send(port: origin.port, head, body: body, timeout: RawHTTP.changeWait).first)
        #expect(answer.status == 201, "\(answer.bodyText)")
        origin.server.waitForPatches()
        try readLive()
        let revision = try #require(live[pack])
        published[pack, default: [:]][revision] = zip
            ? ["kind": "tree", "files": tree.mapValues { Hex.encode(SHA256Hasher.hash($0)) }]
            : ["kind": "file", "sha256": Hex.encode(SHA256Hasher.hash(body))]
    }

    func manifestBytes() throws -> [UInt8] {
        try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first).body
    }

    mutating func readLive() throws {
        let manifest = try Envelope.decode(manifestBytes()).verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())
        live = Dictionary(uniqueKeysWithValues: manifest.packs.map { ($0.id, $0.revision) })
    }

    /// The live packs this device takes: one of each language group.
    func liveFor(languages: String) -> [String: Int] {
        live.filter { pack, _ in !pack.hasPrefix("voice-") || pack == "voice-" + languages }
    }

    struct Run { var status: Int32; var killed: Bool; var errors: String }

    func syncResult(languages: String, dest: String, environment: [String: String] = [:]) throws -> Run {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Processes.depotBinary)
        process.arguments = ["sync", "--server", origin.baseURL.absoluteString, "--app", origin.app, "--config", config, "--dest", dest, "--quiet", "--languages", languages]
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let errors = Pipe()
        process.standardOutput = FileHandle.nullDevice
        process.standardError = errors
        try process.run()
        let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return Run(status: process.terminationStatus, killed: process.terminationReason == .uncaughtSignal, errors: text)
    }

    func sync(languages: String, dest: String, environment: [String: String] = [:]) throws {
        let run = try syncResult(languages: languages, dest: dest, environment: environment)
        #expect(run.status == 0 && !run.killed, "depot sync failed: \(run.errors)")
    }

    func check(_ mode: String, dest: String, context: String = "", quiescent: Bool = false) throws {
        let file = work.path + "/published.json"
        var packs: [String: [String: Any]] = [:]
        for (pack, revisions) in published { packs[pack] = Dictionary(uniqueKeysWithValues: revisions.map { (String($0.key), $0.value as Any) }) }
        let languages = dest == base ? "en" : (published["voice-fr"] != nil && context.contains("language") ? "fr" : "en")
        try FileSystem.writeAtomically(Array(JSONSerialization.data(withJSONObject: ["packs": packs, "live": liveFor(languages: languages)])), to: file)
        let result = try Processes.run("/usr/bin/python3", [DeviceModelTests.checker, mode, dest, file] + (quiescent ? ["--quiescent"] : []))
        #expect(result.status == 0, "\(context) (\(mode)): the invariant does not hold:\n\(result.stdout)\(result.stderr)")
    }
}
