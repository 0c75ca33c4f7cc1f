import DepotClient
import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// The device's steps on iOS, each killed at every crash point: the extension scheduling an
/// update (`depot extension schedule`), receiving a finished download (`receive`), the install
/// step (`install`) over whole deliveries, a byte patch and a tree patch, each with the atomic
/// exchange and with the fallback without one, and a managed app's device (`depot sync
/// --managed`). Right after each kill, after the next install step alone, and after the next
/// event, the state records only what is on disk byte for byte (`Fixtures/device_checker.py`,
/// which also refuses a record of another copy than the one at `packs/<id>`); the event reaches
/// the live release, and the one after it schedules nothing and changes nothing. The crash points
/// just after each switch (the kill between a switch and its record) are always among those run.
@Suite("Crash points of the extension's steps and the managed device", .blocking)
struct ExtensionCrashPointTests {
    enum Step: String, CaseIterable, Sendable {
        case schedule, receive
        /// The install step over whole deliveries: the file pack and the zip pack replaced.
        case install
        /// The install step over a byte patch of the file pack; over a tree patch of the zip pack.
        case installPatch, installTreePatch

        var isInstall: Bool { self != .schedule && self != .receive }
    }

    /// How an install step puts a copy in place: the atomic exchange, or the fallback of a system
    /// without one (the old copy renamed aside first; `DEPOT_CRASH_NO_EXCHANGE=1`).
    enum Switching: String, Sendable { case exchange, fallback }

    struct Case: Sendable, CustomTestStringConvertible {
        var step: Step
        var switching: Switching
        var testDescription: String { "\(step.rawValue)\(step.isInstall ? " (\(switching.rawValue))" : "")" }
    }

    static let killCases: [Case] = Step.allCases.flatMap { step in
        step.isInstall ? [Case(step: step, switching: .exchange), Case(step: step, switching: .fallback)] : [Case(step: step, switching: .exchange)]
    }
    static let powerCases: [Case] = Step.allCases.map { Case(step: $0, switching: .exchange) }

    @Test("Killed at every crash point of schedule, receive and install (whole, patched, tree-patched; with and without an exchange), the device records only what it holds right after, after the next install step and after the next event, which reaches the live release", .enabled(if: CrashSeam.killsEnabled), arguments: Self.killCases)
    func extensionStep(_ testCase: Case) async throws {
        try await run(testCase, modes: [.kill])
    }

    @Test("A power cut at every crash point of schedule, receive and install: the same", .enabled(if: HeavyTests.enabled), arguments: Self.powerCases)
    func extensionStepPowerCut(_ testCase: Case) async throws {
        try await run(testCase, modes: CrashSeam.powerModes)
    }

    func run(_ testCase: Case, modes: [CrashSeam.Mode]) async throws {
        let step = testCase.step
        let patching = step == .installPatch || step == .installTreePatch
        try await withServer(configure: { $0.patchDepth = patching ? 1 : 0 }) { origin in
            var device = try CrashDevice(origin: origin)
            defer { device.work.remove() }
            try device.publishFirst(.zip)
            let flow = ExtensionDevice(device: device)
            try await flow.event(dest: device.base)
            try device.check("converged", dest: device.base)
            switch step {
            case .installPatch: try device.publishSecond(.patch)
            case .installTreePatch: try device.publishSecond(.treePatch)
            default:
                try device.publishSecond(.zip)
                try device.put("movie", CrashDevice.bytes(250_000, seed: 7))
            }

            // The base of the step: before scheduling; scheduled (the downloads kept); delivered.
            var scheduled: [ExtensionDevice.Download] = []
            if step != .schedule { scheduled = try flow.schedule(dest: device.base) }
            if patching { #expect(scheduled.contains { $0.identifier.contains("-from-") }, "the update must be a patch: \(scheduled.map(\.identifier))") }
            var delivered: [String: String] = [:]
            for download in scheduled { delivered[download.identifier] = try await flow.fetch(download) }
            if step.isInstall { for download in scheduled { try flow.receive(download, file: delivered[download.identifier]!, dest: device.base) } }
            let arguments: [String] = switch step {
            case .schedule: ["schedule", "--manifest", try flow.manifestFile(), "--event", "periodic"]
            case .receive: ["receive", scheduled[0].identifier, delivered[scheduled[0].identifier]! + ".handed"]
            case .install, .installPatch, .installTreePatch: ["install"]
            }
            let switching = testCase.switching == .fallback ? ["DEPOT_CRASH_NO_EXCHANGE": "1"] : [:]

            let trace = device.work.path + "/trace"
            try CrashSeam.copyDevice(device.base, to: device.dest)
            if step == .receive { try flow.redeliver(scheduled[0], from: delivered) }
            let traced = try flow.launch(arguments, dest: device.dest, environment: switching.merging(["DEPOT_CRASH_TRACE": trace]) { $1 })
            #expect(traced.status == 0, "\(traced.output)\(traced.errors)")
            let lines = CrashSeam.trace(trace)
            let count = lines.count
            #expect(count >= 2, "\(step) must have crash points")
            // Where a copy is switched in: the kill right there and just after it (between the
            // switch and its record) is run whatever the stride.
            let switches = CrashSeam.switchPoints(lines, packs: device.dest + "/packs")
            if step.isInstall {
                #expect(!switches.isEmpty, "the install step must switch copies in")
                let exchanged = lines.contains { $0.split(separator: " ").dropFirst().first == "exchange" }
                #expect(exchanged == (testCase.switching == .exchange), "\(testCase.switching): exchange used \(exchanged)")
            }
            var killed = 0
            try await CrashSeam.enumerate(count, modes: modes, trace: trace, work: device.work.path, label: testCase.testDescription,
                                          including: switches.flatMap { [$0, $0 + 1, $0 + 2] }) { crash in
                try CrashSeam.copyDevice(device.base, to: device.dest)
                if step == .receive { try flow.redeliver(scheduled[0], from: delivered) }
                let result = try flow.launch(arguments, dest: device.dest, environment: switching.merging(crash.environment) { $1 })
                let what = crash.what
                #expect(result.killed, "\(what): the run did not reach its crash point")
                if result.killed { killed += 1 }
                // Right after the kill.
                try device.check("state", dest: device.dest, context: what)
                // The next install step, alone: it repairs what the killed run left and installs
                // what waits; nothing staged, no switch and no delivery survive it.
                let next = try flow.launch(["install"], dest: device.dest, environment: switching)
                #expect(next.status == 0, "\(what): the next install step failed: \(next.output)\(next.errors)")
                try device.check("state", dest: device.dest, context: what + ", then the next install step", quiescent: true)
                // The next event: what was scheduled before is in the system's hands, the rest is planned again.
                let held = step == .schedule ? [] : scheduled.filter { step != .receive || $0.identifier != scheduled[0].identifier || !result.killed }
                try await flow.event(dest: device.dest, held: step.isInstall ? [] : held, context: what, environment: switching)
                try device.check("converged", dest: device.dest, context: what + ", then the next event")
                let before = CrashSeam.digest(device.dest + "/packs")
                let again = try flow.schedule(dest: device.dest)
                #expect(again.isEmpty && CrashSeam.digest(device.dest + "/packs") == before, "\(what): the event after the recovery scheduled \(again.map(\.identifier))")
                return true
            }
            print("ExtensionCrashPointTests \(testCase.testDescription) \(modes.map(\.rawValue)): \(count) crash points (switches at \(switches)), \(killed) runs killed and recovered")
        }
    }

    @Test("The install step whose sync of packs/ fails right after the switch (EIO): the copy in place is the one recorded, and the next install step leaves nothing over", arguments: [Switching.exchange, .fallback])
    func failedSyncAfterTheSwitch(_ switching: Switching) async throws {
        try await withServer(configure: { $0.patchDepth = 1 }) { origin in
            var device = try CrashDevice(origin: origin)
            defer { device.work.remove() }
            try device.publishFirst(.zip)
            let flow = ExtensionDevice(device: device)
            try await flow.event(dest: device.base)
            try device.publishSecond(.patch)
            let scheduled = try flow.schedule(dest: device.base)
            #expect(scheduled.map(\.identifier) == ["movie@2-from-1"])
            for download in scheduled { try flow.receive(download, file: try await flow.fetch(download), dest: device.base) }
            var environment = switching == .fallback ? ["DEPOT_CRASH_NO_EXCHANGE": "1"] : [:]
            // Where the switch is: a traced run on a copy of the device.
            let trace = device.work.path + "/trace"
            try CrashSeam.copyDevice(device.base, to: device.dest)
            _ = try flow.launch(["install"], dest: device.dest, environment: environment.merging(["DEPOT_CRASH_TRACE": trace]) { $1 })
            let switched = try #require(CrashSeam.switchPoints(CrashSeam.trace(trace), packs: device.dest + "/packs").first)
            // The step paused as it begins the switch (the fallback's first rename is the point
            // before the one onto packs/movie); then every fsync of the packs folder fails (EIO):
            // the first comes after the exchange, or after the fallback's three renames.
            try CrashSeam.copyDevice(device.base, to: device.dest)
            let library = try IOErrorTests.shim(in: device.work.path)
            let arm = device.work.path + "/armed"
            environment.merge(["LD_PRELOAD": library, "FAILIO_MATCH": device.dest + "/packs", "FAILIO_SUFFIX": "1", "FAILIO_ARM": arm,
                               "DEPOT_CRASH_AT": "\(switching == .fallback ? switched - 1 : switched)", "DEPOT_CRASH_STOP": "1"]) { $1 }
            let paused = try AdminPairTests.Started(Processes.depotBinary, ["extension", "install", "--config", device.config, "--dest", device.dest, "--languages", "en"], environment: environment)
            paused.waitUntilStoppedOrEnded()
            try FileSystem.writeAtomically([], to: arm)
            paused.continue()
            let failed = paused.finish()
            // The copy is in place: the step says so, and every reader reads its record.
            #expect(failed.status == 0 && failed.text.contains("installed movie"), "\(failed.text)")
            try device.check("state", dest: device.dest, context: "\(switching): the sync of packs/ failed after the switch")
            let read = try StateStore(destination: device.dest).read(app: origin.app).packs["movie"]
            #expect(read?.revision == 2, "the copy in place is the one read: \(String(describing: read))")
            FileSystem.remove(arm)
            let next = try flow.launch(["install"], dest: device.dest)
            #expect(next.status == 0, "\(next.output)\(next.errors)")
            try device.check("state", dest: device.dest, context: "\(switching): the next install step", quiescent: true)
            try await flow.event(dest: device.dest)
            try device.check("converged", dest: device.dest, context: "\(switching): the next event")
        }
    }

    @Test("Killed at every crash point of a managed device's update (depot sync --managed), the device holds only whole archives and the next event reaches the download manifest", .enabled(if: CrashSeam.killsEnabled))
    func managed() throws {
        let work = TemporaryDirectory("depot-managed-crash")
        defer { work.remove() }
        let data = work.path + "/data"
        let server = try ServeProcess(data: data, environment: [:])
        defer { server.process.terminate(); server.process.waitUntilExit() }
        let depot = Processes.depotBinary
        let app = "com.example.managed"
        _ = try Processes.run(depot, ["apps", "create", app, "--data", data, "--mode", "managed", "--app-group", "group.com.example.managed"])
        let token = try #require(try Processes.run(depot, ["tokens", "create", "--data", data, "--app", app, "--role", "admin"]).stdout.split(separator: "\n").last.map(String.init))
        let environment = ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": token]
        let common = ["--server", server.url, "--app", app]
        var archives: [String: [UInt8]] = [:]
        func publish(_ id: String, _ bytes: [UInt8]) throws {
            let archive = work.path + "/\(id).aar"
            let content = ArchiveFixture.uncompressed([(path: "x/\(id).bin", bytes: bytes)])
            try FileSystem.writeAtomically(content, to: archive)
            archives[id] = content
            let manifest = work.path + "/\(id).json"
            let json = #"{"assetPackID":"\#(id)","downloadPolicy":{"prefetch":{"installationEventTypes":["firstInstallation","subsequentUpdate"]}},"fileSelectors":[{"directory":"x"}],"platforms":["iOS"]}"#
            try FileSystem.writeAtomically(Array(json.utf8), to: manifest)
            let run = try Processes.run(depot, ["publish", archive, "--pack-manifest", manifest, "--release", "--quiet"] + common, environment: environment)
            #expect(run.status == 0, "\(run.stderr)")
        }
        func sync(_ dest: String, _ extra: [String: String] = [:]) throws -> (status: Int32, killed: Bool, errors: String) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: depot)
            process.arguments = ["sync", "--managed", "--event", "update", "--dest", dest, "--allow-http", "--quiet"] + common
            process.environment = ProcessInfo.processInfo.environment.merging(environment.merging(extra) { $1 }) { $1 }
            let errors = Pipe()
            process.standardOutput = FileHandle.nullDevice
            process.standardError = errors
            try process.run()
            let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return (process.terminationStatus, process.terminationReason == .uncaughtSignal, text)
        }
        /// What the device holds: every archive its state names is the one published, byte for byte.
        func check(_ dest: String, converged: Bool, _ what: String) throws {
            struct Held: Decodable { var version: Int; var sha256: String }
            struct State: Decodable { var packs: [String: Held] }
            let state = (try? JSONDecoder().decode(State.self, from: Data(FileSystem.readFile(dest + "/managed-state.json")))) ?? State(packs: [:])
            for (id, held) in state.packs {
                let bytes = try? FileSystem.readFile(dest + "/packs/\(id).aar", limit: 16 << 20)
                let exact = bytes.map { Hex.encode(SHA256Hasher.hash($0)) == held.sha256 } ?? false
                #expect(exact, "\(what): the state records \(id) version \(held.version), which is not on disk whole")
                if converged { #expect(bytes == archives[id], "\(what): \(id) is not the live archive") }
            }
            if converged { #expect(Set(state.packs.keys) == Set(archives.keys), "\(what): the device holds \(state.packs.keys.sorted())") }
        }
        try publish("levels", Array(repeating: 1, count: 40_000))
        try publish("music", Array(repeating: 2, count: 30_000))
        try publish("intro", Array(repeating: 5, count: 10_000))
        let base = work.path + "/base", dest = work.path + "/device"
        #expect(try sync(base).status == 0)
        // An update: two archives replaced, one pack removed.
        try publish("levels", Array(repeating: 3, count: 45_000))
        try publish("music", Array(repeating: 4, count: 25_000))
        let removed = try RawHTTP.send(port: UInt16(server.port)!, "DELETE /v1/apps/\(app)/packs/intro?release=true&removeLive=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nConnection: close\r\n\r\n").first
        #expect(removed?.status == 201, "\(removed?.bodyText ?? "")")
        archives["intro"] = nil
        let trace = work.path + "/trace"
        try CrashSeam.copy(base, to: dest)
        #expect(try sync(dest, ["DEPOT_CRASH_TRACE": trace]).status == 0)
        let count = CrashSeam.trace(trace).count
        #expect(count > 3)
        for point in CrashSeam.points(count) {
            try CrashSeam.copy(base, to: dest)
            let what = "managed kill at crash point \(point) of \(count) (\(CrashSeam.trace(trace).dropFirst(point - 1).first ?? "?"))"
            #expect(try sync(dest, ["DEPOT_CRASH_AT": "\(point)"]).killed, "\(what): not reached")
            try check(dest, converged: false, what)
            let recovered = try sync(dest)
            #expect(recovered.status == 0, "\(what): \(recovered.errors)")
            try check(dest, converged: true, what)
        }
        print("ExtensionCrashPointTests managed: \(count) crash points")
    }
}

/// The Background Assets side of a ``CrashDevice``: `depot extension` steps as the system calls them.
struct ExtensionDevice {
    let device: CrashDevice
    struct Download { var identifier: String; var size: Int; var path: String }

    func manifestFile() throws -> String {
        let file = device.work.path + "/manifest-\(Hex.encode(SecureRandom.bytes(4))).json"
        try FileSystem.writeAtomically(device.manifestBytes(), to: file)
        return file
    }

    func launch(_ arguments: [String], dest: String, environment: [String: String] = [:]) throws -> (status: Int32, killed: Bool, output: String, errors: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Processes.depotBinary)
        process.arguments = ["extension"] + arguments + ["--config", device.config, "--dest", dest, "--languages", "en"]
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let out = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let err = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, process.terminationReason == .uncaughtSignal, out, err)
    }

    /// The extension's answer to an event: the downloads it schedules (those the system holds excluded).
    func schedule(dest: String, held: [Download] = []) throws -> [Download] {
        let run = try launch(["schedule", "--manifest", manifestFile(), "--event", "periodic"] + held.flatMap { ["--scheduled", $0.identifier] }, dest: dest)
        #expect(run.status == 0, "schedule: \(run.errors)")
        return run.output.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count >= 4, let size = Int(fields[1]), let url = URL(string: String(fields[3])) else { return nil }
            return Download(identifier: String(fields[0]), size: size, path: url.path)
        }
    }

    /// The system downloads one: the file it hands over.
    func fetch(_ download: Download) async throws -> String {
        let file = device.work.path + "/delivery-" + download.identifier.replacingOccurrences(of: "/", with: "_")
        let answer = try #require(try RawHTTP.send(port: device.origin.port, "GET \(download.path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout: 30).first)
        #expect(answer.status == 200 && answer.body.count == download.size)
        try FileSystem.writeAtomically(answer.body, to: file)
        return file
    }

    /// The system's file for a delivery is its own: a copy, so the kept one can be delivered again.
    func redeliver(_ download: Download, from delivered: [String: String]) throws {
        FileSystem.remove(delivered[download.identifier]! + ".handed")
        try FileSystem.copyDurably(delivered[download.identifier]!, to: delivered[download.identifier]! + ".handed")
    }

    func receive(_ download: Download, file: String, dest: String) throws {
        let handed = file + ".handed"
        FileSystem.remove(handed)
        try FileSystem.copyDurably(file, to: handed)
        let run = try launch(["receive", download.identifier, handed], dest: dest)
        #expect(run.status == 0, "receive: \(run.errors)")
    }

    /// An event in full: schedule, the system delivering everything, the install step.
    func event(dest: String, held: [Download] = [], context: String = "", environment: [String: String] = [:]) async throws {
        let downloads = try schedule(dest: dest, held: held) + held
        for download in downloads { try receive(download, file: try await fetch(download), dest: dest) }
        let installed = try launch(["install"], dest: dest, environment: environment)
        #expect(installed.status == 0, "\(context): install: \(installed.errors)")
    }
}
