import DepotClient
import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// The client's install paths as a state machine, tested as one: a seeded random walk over what
/// happens to a device — releases (a file pack and a zip pack whose entries change, come and go;
/// patches one and two revisions behind), Background Assets events, the system delivering (or
/// corrupting, truncating, failing) what was scheduled, the install step in the app and the
/// extension at once, SIGKILL of either at any instant, files purged under `packs/` — with the
/// device's invariant checked from outside after every step by `Fixtures/device_checker.py`,
/// which hashes every copy and trusts nothing the client says. Then the faults stop and the
/// device must reach the live release within a few clean events.
///
/// Every step is `depot extension schedule|receive|install` in a process of its own, as on a
/// device. A failure names its seed and step: `DEPOT_MODEL_SEED=S DEPOT_MODEL_STEPS=N` replays it.
@Suite("A device as a state machine: a seeded walk, checked from outside", .blocking)
struct DeviceModelTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().path
    static let checker = root + "/Fixtures/device_checker.py"
    /// The zip pack's name holds a `-pNNN` part, as a pack id may (the old leftover rule read it as an owner).
    static let zipPack = "zm-p999999"
    static let filePack = "movie"

    /// The walks CI runs (a few hundred steps in all); DEPOT_MODEL_STEPS / DEPOT_MODEL_SEED for a long run.
    static var walks: [(seed: UInt64, steps: Int)] {
        let environment = ProcessInfo.processInfo.environment
        if let steps = environment["DEPOT_MODEL_STEPS"].flatMap(Int.init) {
            let seeds = environment["DEPOT_MODEL_SEED"].map { $0.split(separator: ",").compactMap { UInt64($0) } } ?? [UInt64(Date().timeIntervalSince1970)]
            return seeds.map { ($0, steps) }
        }
        // 1 and 2 are the first walks' seeds (the walk has changed since); against the build before
        // switches were recorded, 10 kills an install step at its crash point between a switch and
        // its record (step 59, every run), and 6 did so with a timed kill (step 8, once).
        return [(1, 120), (2, 120), (6, 120), (10, 120)]
    }

    @Test("After every step the state records only copies that are byte for byte what was published (or damaged so a stat shows it), every other live pack is planned, no download is unneeded; after the faults, the live release within four events")
    func walk() async throws {
        // Every walk runs, a failing one stopping at its first failure: a failure names each seed.
        var failing: [UInt64] = []
        for (seed, steps) in Self.walks {
            do {
                try await withServer(configure: { $0.patchDepth = 2 }) { origin in
                    var device = try ModelDevice(origin: origin, seed: seed)
                    try await device.run(steps: steps)
                }
            } catch is ModelDevice.ModelFailure {
                failing.append(seed)
            }
        }
        #expect(failing.isEmpty, "failing seeds: \(failing.map(String.init).joined(separator: ","))")
    }
}

/// One device, one origin, one seeded walk.
struct ModelDevice {
    let origin: TestOrigin
    let seed: UInt64
    let work: TemporaryDirectory
    let config: String
    var random: SeededRandom
    var dest: String { work.path + "/group" }
    /// What was published: pack → revision → content (a file's SHA-256, or a tree's entries).
    var published: [String: [Int: [String: Any]]] = [:]
    /// The live revision of each pack.
    var live: [String: Int] = [:]
    /// Downloads the system holds (scheduled, not yet delivered): identifier → (URL path, size).
    var inFlight: [String: (path: String, size: Int)] = [:]
    var movie: [UInt8] = []
    var tree: [String: [UInt8]] = [:]
    var step = 0
    var counts: [String: Int] = [:]

    init(origin: TestOrigin, seed: UInt64) throws {
        (self.origin, self.seed) = (origin, seed)
        random = SeededRandom(seed: seed)
        work = TemporaryDirectory("depot-model-\(seed)")
        config = work.path + "/client.json"
        try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: config)
    }

    func bytes(_ count: Int) -> [UInt8] {
        var generator = SeededRandom(seed: UInt64(count) &* 0x9E37_79B9 &+ UInt64(step) &+ seed << 20)
        return (0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
    }

    // MARK: The origin's side

    mutating func release(file: Bool) throws {
        if file {
            if movie.isEmpty { movie = bytes(96_000) } else {
                let at = Int.random(in: 0..<(movie.count - 2000), using: &random)
                movie.replaceSubrange(at..<(at + 1000), with: bytes(Int.random(in: 500...3000, using: &random)))
            }
            try publish(DeviceModelTests.filePack, body: movie, zip: false)
        } else {
            if tree.isEmpty {
                for i in 0..<12 { tree["level/\(i % 3)/part-\(i).bin"] = bytes(2000 + i * 300) }
            } else {
                let names = tree.keys.sorted()
                switch Int.random(in: 0..<3, using: &random) {
                case 0: tree[names.randomElement(using: &random)!]![7] ^= 0x5a
                case 1: tree["new/\(step).bin"] = bytes(1500)
                default: if names.count > 3 { tree[names.randomElement(using: &random)!] = nil }
                }
            }
            try publish(DeviceModelTests.zipPack, body: TreeFiles.zip(tree, in: work.path + "/zip-\(step)"), zip: true)
        }
    }

    mutating func publish(_ pack: String, body: [UInt8], zip: Bool) throws {
        let head = "PUT /v1/apps/\(origin.app)/packs/\(pack)?release=true&policy=prefetch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(origin.token)\r\n"
            + (zip ? "Content-Type: application/zip\r\n" : "") + "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        let answer = try #require(try RawHTTP.send(port: origin.port, head, body: body, timeout: RawHTTP.changeWait).first)
        #expect(answer.status == 201, "\(answer.bodyText)")
        origin.server.waitForPatches()
        let manifest = try Envelope.decode(manifestBytes()).verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())
        let revision = try #require(manifest[pack: pack]?.revision)
        var content: [String: Any] = ["kind": "file", "sha256": Hex.encode(SHA256Hasher.hash(body))]
        if zip { content = ["kind": "tree", "files": tree.mapValues { Hex.encode(SHA256Hasher.hash($0)) }] }
        published[pack, default: [:]][revision] = content
        live = Dictionary(uniqueKeysWithValues: manifest.packs.map { ($0.id, $0.revision) })
    }

    func manifestBytes() throws -> [UInt8] {
        try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first).body
    }

    // MARK: The device's side

    func depotArguments(_ arguments: [String]) -> [String] { ["extension"] + arguments + ["--config", config, "--dest", dest, "--languages", "en"] }

    /// Starts `depot extension …`, its output into a file.
    func launch(_ arguments: [String], output: String, environment: [String: String] = [:]) throws -> Process {
        let process = Process()
        // DEPOT_MODEL_BINARY: another build's depot (an earlier commit's, to see the walk find its bugs).
        process.executableURL = URL(fileURLWithPath: ProcessInfo.processInfo.environment["DEPOT_MODEL_BINARY"] ?? Processes.depotBinary)
        process.arguments = depotArguments(arguments)
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        process.standardOutput = FileHandle(forWritingAtPath: output)
        process.standardError = FileHandle(forWritingAtPath: output + ".err")
        try process.run()
        return process
    }

    /// Waits for `process`, SIGKILLing it first after `killAfter` microseconds when given; whether it was killed.
    func finish(_ process: Process, killAfter: UInt32?) -> Bool {
        if let killAfter {
            usleep(killAfter)
            kill(process.processIdentifier, SIGKILL)
        }
        process.waitUntilExit()
        return process.terminationReason == .uncaughtSignal
    }

    /// The system's event: the manifest it fetched, handed to `schedule`; what comes back joins the downloads in flight.
    mutating func event(kind: String = "periodic", concurrentInstall: Bool = false, kill: Bool = false) throws {
        let manifest = work.path + "/manifest.json"
        try FileSystem.writeAtomically(manifestBytes(), to: manifest)
        let held = inFlight.keys.sorted()
        // Deliveries waiting now count as planned: an install step running beside the scheduling
        // may drop one (corrupt, stale) after the scheduling saw it; the next event plans it.
        let waiting = concurrentInstall ? FileSystem.contents(of: dest + "/.depot/arrived").filter { !$0.hasPrefix(".") } : []
        let output = work.path + "/schedule.out"
        let scheduling = try launch(["schedule", "--manifest", manifest, "--event", kind] + held.flatMap { ["--scheduled", $0] }, output: output)
        let installing = concurrentInstall ? try launch(["install"], output: work.path + "/install-b.out") : nil
        let killed = finish(scheduling, killAfter: kill ? UInt32.random(in: 0...20_000, using: &random) : nil)
        if let installing { _ = finish(installing, killAfter: nil) }
        if killed { counts["kills", default: 0] += 1; return }
        let errors = (try? FileSystem.readText(output + ".err")) ?? ""
        #expect(scheduling.terminationStatus == 0, "seed \(seed) step \(step): schedule failed: \(errors)")
        let lines = try FileSystem.readText(output).split(separator: "\n")
        // Checked before the new downloads join the system's: nothing needed is missing, nothing scheduled is needless.
        try FileSystem.writeAtomically(Array(held.joined(separator: "\n").utf8), to: work.path + "/held")
        try FileSystem.writeAtomically(Array(waiting.joined(separator: "\n").utf8), to: work.path + "/waiting")
        try check("event", output, work.path + "/held", work.path + "/waiting")
        for line in lines {
            let fields = line.split(separator: " ")
            let identifier = String(fields[0])
            let url = try #require(URL(string: String(fields[3])))
            inFlight[identifier] = (url.path, Int(fields[1])!)
        }
        counts["scheduled", default: 0] += lines.count
    }

    /// The system hands over one finished download: sometimes corrupted or cut short.
    mutating func deliver() async throws {
        guard let identifier = inFlight.keys.sorted().randomElement(using: &random), let (path, size) = inFlight[identifier] else { return }
        inFlight[identifier] = nil
        let file = work.path + "/delivered-\(step)"
        let response = try await HTTPTransport().download(URL(string: origin.baseURL.absoluteString + path)!, to: file, limit: Int64(size))
        guard response.status == 200 else {
            // A release since replaced the blob's revision and garbage collection may not keep it: the system fails the download.
            counts["failed downloads", default: 0] += 1
            return
        }
        switch Int.random(in: 0..<10, using: &random) {
        case 0:
            var content = try FileSystem.readFile(file, limit: 64 << 20)
            content[Int.random(in: 0..<content.count, using: &random)] ^= 0x01
            try FileSystem.writeAtomically(content, to: file)
            counts["corrupted deliveries", default: 0] += 1
        case 1:
            let content = try FileSystem.readFile(file, limit: 64 << 20)
            try FileSystem.writeAtomically(Array(content.prefix(content.count / 2)), to: file)
            counts["truncated deliveries", default: 0] += 1
        default: break
        }
        let process = try launch(["receive", identifier, file], output: work.path + "/receive.out")
        _ = finish(process, killAfter: nil)
        #expect(process.terminationStatus == 0, "seed \(seed) step \(step): receive failed")
        counts["deliveries", default: 0] += 1
        if identifier.contains("-from-") { counts[identifier.hasPrefix(DeviceModelTests.zipPack) ? "tree patches delivered" : "byte patches delivered", default: 0] += 1 }
    }

    /// The install step: alone or two at once (the app and the extension), the first killed at a
    /// random instant or as it enters a random crash point of its own (`DEPOT_CRASH_AT`: every
    /// file created, rename, exchange, unlink and fsync, the instants between a switch and its
    /// record among them, which a timer rarely hits).
    mutating func install(racing: Bool, kill: Bool) throws {
        let atPoint = kill && Bool.random(using: &random)
        let point = Int.random(in: 1...40, using: &random)
        let first = try launch(["install"], output: work.path + "/install-a.out", environment: atPoint ? ["DEPOT_CRASH_AT": "\(point)"] : [:])
        let second = racing ? try launch(["install"], output: work.path + "/install-b.out") : nil
        let delay = kill && !atPoint ? UInt32.random(in: 0...40_000, using: &random) : nil
        let killedFirst = finish(first, killAfter: delay)
        let killedSecond = second.map { finish($0, killAfter: nil) } ?? false
        if killedFirst || killedSecond { counts[atPoint && killedFirst ? "kills at a crash point" : "kills", default: 0] += 1 }
        if racing { counts["races", default: 0] += 1 }
        // Alone and not killed: nothing staged, nothing delivered survives it.
        try check("state", quiescent: !racing && !killedFirst)
    }

    /// The system purges part of a pack (Library/Caches), or a file is cut short in place.
    mutating func purge() throws {
        let packs = dest + "/packs"
        guard let pack = FileSystem.contents(of: packs).filter({ !$0.hasPrefix(".") }).randomElement(using: &random) else { return }
        let path = packs + "/" + pack
        if FileSystem.isDirectory(path) {
            let files = TreeFiles.list(path)
            guard let victim = files.randomElement(using: &random) else { return }
            FileSystem.remove(path + "/" + victim)
        } else if Bool.random(using: &random) {
            FileSystem.remove(path)
        } else {
            #expect(truncate(path, off_t(max(0, (FileSystem.fileSize(path) ?? 0) / 2))) == 0)
        }
        counts["purges", default: 0] += 1
    }

    func check(_ mode: String, _ extra: String..., quiescent: Bool = false) throws {
        let published = work.path + "/published.json"
        var packs: [String: [String: Any]] = [:]
        for (pack, revisions) in self.published { packs[pack] = Dictionary(uniqueKeysWithValues: revisions.map { (String($0.key), $0.value as Any) }) }
        try FileSystem.writeAtomically(Array(JSONSerialization.data(withJSONObject: ["packs": packs, "live": live])), to: published)
        let result = try Processes.run("/usr/bin/python3", [DeviceModelTests.checker, mode, dest, published] + extra + (quiescent ? ["--quiescent"] : []))
        #expect(result.status == 0, "seed \(seed) step \(step) (\(mode)): the invariant does not hold:\n\(result.stdout)\(result.stderr)")
        if result.status != 0 { throw ModelFailure() }
    }

    struct ModelFailure: Error {}

    mutating func run(steps: Int) async throws {
        defer { work.remove() }
        try release(file: true)
        try release(file: false)
        try event(kind: "install")
        for _ in 0..<steps {
            step += 1
            switch Int.random(in: 0..<100, using: &random) {
            case 0..<10: try release(file: Bool.random(using: &random)); counts["releases", default: 0] += 1
            case 10..<28: try event(concurrentInstall: Int.random(in: 0..<4, using: &random) == 0, kill: Int.random(in: 0..<8, using: &random) == 0)
            case 28..<52: try await deliver()
            case 52..<55:
                // The system fails a download (the extension's failed callback): it is planned again.
                if let identifier = inFlight.keys.sorted().randomElement(using: &random) { inFlight[identifier] = nil; counts["failed downloads", default: 0] += 1 }
            case 55..<88: try install(racing: Int.random(in: 0..<3, using: &random) == 0, kill: Int.random(in: 0..<3, using: &random) == 0)
            default: try purge()
            }
            try check("state")
        }
        // The faults stop: every download in flight is delivered whole, then clean rounds.
        for round in 0..<4 {
            step += 1
            try event()
            for identifier in inFlight.keys.sorted() {
                let (path, size) = inFlight[identifier]!
                let file = work.path + "/clean-\(round)-\(identifier)"
                let response = try await HTTPTransport().download(URL(string: origin.baseURL.absoluteString + path)!, to: file, limit: Int64(size))
                inFlight[identifier] = nil
                guard response.status == 200 else { continue }
                let process = try launch(["receive", identifier, file], output: work.path + "/receive.out")
                _ = finish(process, killAfter: nil)
            }
            try install(racing: false, kill: false)
        }
        try check("converged")
        print("device model seed \(seed): \(steps) steps, " + counts.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", "))
    }
}

/// Relative paths of the regular files under a folder.
enum TreeFiles {
    /// A zip (deflated, by Python's zipfile: not the code under test) of `tree`'s files, laid out
    /// in `folder` first; both are removed after.
    static func zip(_ tree: [String: [UInt8]], in folder: String) throws -> [UInt8] {
        for (name, content) in tree {
            try FileSystem.createDirectory(FileSystem.directory(of: folder + "/" + name))
            try FileSystem.writeAtomically(content, to: folder + "/" + name)
        }
        defer { Installer.removeTree(folder); FileSystem.remove(folder + ".zip") }
        let script = "import os, sys, zipfile\nz = zipfile.ZipFile(sys.argv[2], 'w', zipfile.ZIP_DEFLATED)\nfor r, _, ns in os.walk(sys.argv[1]):\n    for n in sorted(ns):\n        p = os.path.join(r, n); z.write(p, os.path.relpath(p, sys.argv[1]))\nz.close()"
        let made = try Processes.run("/usr/bin/python3", ["-c", script, folder, folder + ".zip"])
        #expect(made.status == 0, "\(made.stderr)")
        return try FileSystem.readFile(folder + ".zip", limit: 64 << 20)
    }

    static func list(_ root: String, _ prefix: String = "") -> [String] {
        FileSystem.contents(of: root + (prefix.isEmpty ? "" : "/" + prefix)).flatMap { name -> [String] in
            let path = prefix.isEmpty ? name : prefix + "/" + name
            return FileSystem.isDirectory(root + "/" + path) ? list(root, path) : [path]
        }
    }
}

extension FileSystem {
    static func readText(_ path: String) throws -> String { String(decoding: try readFile(path, limit: 16 << 20), as: UTF8.self) }
}
