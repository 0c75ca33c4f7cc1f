import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// The install step in a process of its own, as on a device (`depot extension …`): killed at
/// random points it always leaves the old or the new revision, never a mix; its memory does not
/// grow with the pack.
@Suite("The install step, as its own process", .blocking)
struct InstallStepTests {
    /// One device folder against one origin: the steps the extension and the app take.
    struct Device {
        let origin: TestOrigin
        let work: TemporaryDirectory
        let config: String
        var dest: String { work.path + "/group" }

        init(origin: TestOrigin, work: TemporaryDirectory) throws {
            (self.origin, self.work) = (origin, work)
            config = work.path + "/client.json"
            try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: config)
        }

        func depot(_ arguments: [String]) throws -> Processes.Result {
            try Processes.run(Processes.depotBinary, ["extension"] + arguments + ["--config", config, "--dest", dest])
        }

        /// The install step started in a process of its own, not waited for.
        func startInstall() throws -> Process {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Processes.depotBinary)
            process.arguments = ["extension", "install", "--config", config, "--dest", dest]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            return process
        }

        /// What the system does: fetches the manifest, asks the extension, downloads what it
        /// schedules and hands each file to `receive`. Returns the identifiers.
        @discardableResult
        func deliver() async throws -> [String] {
            let manifest = work.path + "/manifest.json"
            let envelope = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
            try FileSystem.writeAtomically(envelope.body, to: manifest)
            let scheduled = try depot(["schedule", "--manifest", manifest, "--event", "update"])
            #expect(scheduled.status == 0, "\(scheduled.stderr)")
            var identifiers: [String] = []
            for line in scheduled.stdout.split(separator: "\n") {
                let fields = line.split(separator: " ")
                let (identifier, size) = (String(fields[0]), Int64(fields[1])!)
                let file = work.path + "/delivered-" + identifier
                let pack = try #require(fields.last.flatMap { URL(string: String($0)) })
                let local = URL(string: origin.baseURL.absoluteString + pack.path)!
                let response = try await HTTPTransport().download(local, to: file, limit: size)
                #expect(response.status == 200 && FileSystem.fileSize(file) == size)
                let received = try depot(["receive", identifier, file])
                #expect(received.status == 0, "\(received.stderr)")
                identifiers.append(identifier)
            }
            return identifiers
        }
    }

    /// Every file under `root` with its SHA-256, by relative path.
    static func tree(_ root: String, _ prefix: String = "") throws -> [String: String] {
        var out: [String: String] = [:]
        for name in FileSystem.contents(of: root) {
            let path = root + "/" + name
            if FileSystem.isDirectory(path) {
                out.merge(try tree(path, prefix + name + "/")) { $1 }
            } else {
                out[prefix + name] = try SHA256Hasher.hexDigest(ofFile: path)
            }
        }
        return out
    }

    /// A zip of `count` entries (random bytes, seeded) and the SHA-256 of each entry, by path.
    static func zip(_ path: String, count: Int, seed: Int) throws -> [String: String] {
        let script = """
            import hashlib, json, random, sys, zipfile
            rng = random.Random(int(sys.argv[2])); out = {}
            with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_STORED) as z:
                for i in range(int(sys.argv[3])):
                    name = 'level/%02d/chunk-%03d.bin' % (i % 7, i)
                    data = rng.randbytes(rng.randint(1, 200000))
                    z.writestr(name, data); out[name] = hashlib.sha256(data).hexdigest()
            print(json.dumps(out))
            """
        let made = try Processes.run("/usr/bin/python3", ["-c", script, path, String(seed), String(count)])
        guard made.status == 0 else { throw POSIXError(.EIO) }
        return try JSONDecoder().decode([String: String].self, from: Data(made.stdout.utf8))
    }

    static func putZip(_ origin: TestOrigin, _ pack: String, _ file: String) throws {
        let body = try FileSystem.readFile(file, limit: 256 << 20)
        let head = "PUT /v1/apps/\(origin.app)/packs/\(pack)?release=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(origin.token)\r\n"
            + "Content-Type: application/zip\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        let response = try #require(try RawHTTP.send(port: origin.port, head, body: body, timeout: RawHTTP.changeWait).first)
        #expect(response.status == 201, "\(response.bodyText)")
    }

    @Test("Two install steps at once (the app's and the extension's): the second never removes the first's live staging tree, even for a pack whose name reads like a gone process's")
    func twoAtOnce() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-install-two")
            defer { work.remove() }
            let device = try Device(origin: origin, work: work)
            // "movie-p999999": the old rule took the first "-pNNN" of a staging name as its owner.
            let pack = "movie-p999999"
            // 3,000 small entries: unpacking takes a while, the archive stays small.
            let script = """
                import hashlib, json, random, sys, zipfile
                rng = random.Random(5); out = {}
                with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_STORED) as z:
                    for i in range(3000):
                        name = 'clip/%02d/part-%04d.bin' % (i % 20, i)
                        data = rng.randbytes(rng.randint(100, 2000))
                        z.writestr(name, data); out[name] = hashlib.sha256(data).hexdigest()
                print(json.dumps(out))
                """
            let made = try Processes.run("/usr/bin/python3", ["-c", script, work.path + "/v1.zip"])
            #expect(made.status == 0, "\(made.stderr)")
            let entries = try JSONDecoder().decode([String: String].self, from: Data(made.stdout.utf8))
            try Self.putZip(origin, pack, work.path + "/v1.zip")
            #expect(try await device.deliver() == ["\(pack)@1"])
            let first = try device.startInstall()
            // The first step is caught in the middle of unpacking (its staging tree has entries),
            // then held there, as iOS suspends an app.
            let packs = device.dest + "/packs"
            func staging() -> String? { FileSystem.contents(of: packs).first { $0.hasPrefix(".tmp-\(pack)-p") && FileSystem.isDirectory(packs + "/" + $0) } }
            let caught = Eventually.wait(every: .milliseconds(2)) {
                guard let tree = staging() else { return false }
                return TreeFiles.list(packs + "/" + tree).count >= 50
            }
            kill(first.processIdentifier, SIGSTOP)
            defer { kill(first.processIdentifier, SIGCONT) }
            // kill() returns before the signal stops the process: wait until /proc says it is stopped.
            #expect(Eventually.wait(every: .milliseconds(1)) {
                guard let stat = AdminPairTests.Started.procFile("/proc/\(first.processIdentifier)/stat"), let close = stat.lastIndex(of: ")") else { return false }
                return stat[stat.index(close, offsetBy: 2)] == "T"
            })
            let held = try #require(staging(), "the first step was caught mid-unpack (caught: \(caught))")
            let filesBefore = TreeFiles.list(packs + "/" + held).count
            // The second step runs to its end meanwhile: it installs the same delivery itself.
            let second = try device.depot(["install"])
            #expect(second.status == 0, "\(second.stdout)\(second.stderr)")
            #expect(FileSystem.isDirectory(packs + "/" + held), "the first step's live staging tree was removed by the second")
            #expect(TreeFiles.list(packs + "/" + held).count == filesBefore)
            kill(first.processIdentifier, SIGCONT)
            first.waitUntilExit()
            #expect(first.terminationReason == .exit)
            // Whatever the order, the folder holds the pack whole and records it so.
            #expect(try Self.tree(packs + "/" + pack) == entries)
            #expect(FileSystem.contents(of: packs) == [pack], "\(FileSystem.contents(of: packs))")
            let state = try StateStore(destination: device.dest)
            let record = try #require(try state.read(app: origin.app).packs[pack])
            #expect(record.revision == 1 && state.isWhole(pack, record))
        }
    }

    @Test("SIGKILL at random points of the install step: the folder holds the old or the new revision whole, never a mix; the next run cleans up and finishes")
    func killedAtRandom() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-install-kill")
            defer { work.remove() }
            let device = try Device(origin: origin, work: work)
            let old = try Self.zip(work.path + "/v1.zip", count: 240, seed: 1)
            try Self.putZip(origin, "levels", work.path + "/v1.zip")
            try await device.deliver()
            #expect(try device.depot(["install"]).status == 0)
            let installed = device.dest + "/packs/levels"
            #expect(try Self.tree(installed) == old)

            let new = try Self.zip(work.path + "/v2.zip", count: 260, seed: 2)
            try Self.putZip(origin, "levels", work.path + "/v2.zip")
            #expect(try await device.deliver() == ["levels@2"])
            var generator = SystemRandomNumberGenerator()
            var kills = 0
            var finished = false
            for round in 0..<40 where !finished {
                let process = try device.startInstall()
                // Early rounds kill soon after start, later ones later: every phase gets hit.
                let delay = UInt32.random(in: 0...(20_000 + UInt32(round) * 25_000), using: &generator)
                usleep(delay)
                if process.isRunning {
                    kill(process.processIdentifier, SIGKILL)
                    kills += 1
                }
                process.waitUntilExit()
                finished = process.terminationReason == .exit && process.terminationStatus == 0
                let now = try Self.tree(installed)
                #expect(now == old || now == new, "round \(round): a mix of revisions (\(now.count) files)")
            }
            if !finished { #expect(try device.depot(["install"]).status == 0) }
            print("InstallStepTests: \(kills) kills before the install step finished")
            #expect(try Self.tree(installed) == new)
            #expect(FileSystem.contents(of: device.dest + "/packs") == ["levels"], "no staged tree left: \(FileSystem.contents(of: device.dest + "/packs"))")
            #expect(FileSystem.contents(of: device.dest + "/.depot/arrived").isEmpty)
            #expect(try StateStore(destination: device.dest).read(app: origin.app).packs["levels"]?.revision == 2)
        }
    }

    @Test("A 1 GiB pack: the install step's peak memory above a 1 KiB pack's is at most 8 MiB", .enabled(if: HeavyTests.enabled, "run alone by Deploy/setup.sh test, with DEPOT_HEAVY_TESTS=1"))
    func boundedMemory() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-install-memory")
            defer { work.remove() }
            let device = try Device(origin: origin, work: work)
            func peakKiB() throws -> Int {
                let run = try Processes.run("/usr/bin/time", ["-f", "peak %M", Processes.depotBinary, "extension", "install", "--config", device.config, "--dest", device.dest])
                #expect(run.status == 0, "\(run.stderr)")
                return try #require(run.stderr.split(separator: "\n").last { $0.hasPrefix("peak ") }.flatMap { Int($0.dropFirst(5)) })
            }
            try await publish(origin, file: try work.file("tiny", size: 1024), pack: "tiny")
            try await device.deliver()
            let baseline = try peakKiB()
            let big = try work.file("big", size: 1 << 30, seed: 5)
            try await publish(origin, file: big, pack: "big")
            FileSystem.remove(big)
            #expect(try await device.deliver() == ["big@1"])
            let peak = try peakKiB()
            print("InstallStepTests: install step peak RSS \(baseline) KiB for 1 KiB, \(peak) KiB for 1 GiB (+\(peak - baseline) KiB)")
            #expect(peak - baseline <= 8 << 10, "peak RSS grew by \(peak - baseline) KiB")
            #expect(FileSystem.fileSize(device.dest + "/packs/big") == 1 << 30)
        }
    }
}
