import DepotClient
import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Synchronization
import Testing

/// Publishes `bytes` as a pack through the real PUT path; returns the new release.
@discardableResult
func put(_ origin: TestOrigin, _ pack: String, _ bytes: [UInt8], policy: String = "prefetch", query: String = "", expecting: Int = 201) throws -> RawHTTP.Response {
    let head = "PUT /v1/apps/\(origin.app)/packs/\(pack)?release=true&policy=\(policy)\(query) HTTP/1.1\r\nHost: x\r\n"
        + "Authorization: Bearer \(origin.token)\r\nContent-Length: \(bytes.count)\r\nConnection: close\r\n\r\n"
    let started = ContinuousClock.now
    let answer = try RawHTTP.send(port: origin.port, head, body: bytes, timeout: RawHTTP.changeWait).first
    // What CI is told when a publish is slow: a stall, or a hang (no answer at all).
    if ContinuousClock.now - started > .seconds(10) || answer == nil { print("publish of \(pack): \(ContinuousClock.now - started), answered: \(answer != nil)") }
    let response = try #require(answer, "no answer to the publish of \(pack) after \(ContinuousClock.now - started)")
    #expect(response.status == expecting, "\(response.bodyText)")
    return response
}

func bytes(_ count: Int, seed: UInt8) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ Int(seed) &* 7) } }

@Suite("End to end: the client against the real origin")
struct ClientEndToEndTests {
    @Test("Install, an update of one pack, a periodic check that transfers nothing (304), a removed pack, an on-demand pack")
    func lifecycle() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-client")
            defer { work.remove() }
            let (a, b, c) = (bytes(300_000, seed: 1), bytes(2_000_001, seed: 2), bytes(50_000, seed: 3))
            try put(origin, "a", a, policy: "essential")
            try put(origin, "b", b)
            try put(origin, "c", c, policy: "onDemand")
            var sync = DepotSync(server: origin.baseURL, configuration: try origin.clientConfiguration(), destination: work.path + "/dest")
            let packs = work.path + "/dest/packs/"

            sync.kind = .install
            let first = try await sync.run()
            #expect(first.installed == ["a", "b"] && first.deferred == ["c"] && first.manifestVersion == 3)
            #expect(try FileSystem.readFile(packs + "a") == a && FileSystem.readFile(packs + "b") == b)

            let b2 = bytes(1_500_000, seed: 9)
            try put(origin, "b", b2)
            sync.kind = .update
            let update = try await sync.run()
            #expect(update.installed == ["b"] && update.unchanged == ["a"] && update.manifestVersion == 4)
            #expect(try FileSystem.readFile(packs + "b") == b2)

            sync.kind = .periodic
            let periodic = try await sync.run()
            #expect(periodic.notModified && periodic.bytesDownloaded == 0 && periodic.installed.isEmpty && periodic.manifestVersion == 4)

            let removal = try RawHTTP.send(port: origin.port, "DELETE /v1/apps/\(origin.app)/packs/a?removeLive=true&release=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(origin.token)\r\nConnection: close\r\n\r\n").first
            #expect(removal?.status == 201)
            let removed = try await sync.run()
            #expect(removed.removed == ["a"] && !removed.notModified)
            #expect(!FileSystem.exists(packs + "a"))
            #expect(try StateStore(destination: work.path + "/dest").read(app: origin.app).packs["a"] == nil)

            sync.kind = .foreground
            sync.requestedPacks = ["c"]
            #expect(try await sync.run().installed == ["c"])
            #expect(try FileSystem.readFile(packs + "c") == c)
            #expect(FileSystem.contents(of: work.path + "/dest/.depot/downloads").isEmpty)
        }
    }

    @Test("A rolled-back (lower version) manifest and an expired one are refused; nothing changes")
    func refusedManifests() async throws {
        try await withServer(configure: { $0.manifestLifetime = 2 }) { origin in
            let work = TemporaryDirectory("depot-client")
            defer { work.remove() }
            try put(origin, "a", bytes(1000, seed: 1))
            try put(origin, "a", bytes(1000, seed: 2))
            var sync = DepotSync(server: origin.baseURL, configuration: try origin.clientConfiguration(), destination: work.path + "/dest")
            #expect(try await sync.run().manifestVersion == 2)

            // An attacker (or a stale cache) serves release 1's envelope: correctly signed, but older.
            sync.manifestURL = URL(string: origin.baseURL.absoluteString + "/v1/apps/\(origin.app)/releases/1")!
            await #expect { try await sync.run() } throws: { ($0 as? ClientError)?.kind == .rollback }
            #expect(try FileSystem.readFile(work.path + "/dest/packs/a") == bytes(1000, seed: 2))

            // A frozen origin: the live manifest expires and is refused.
            sync.manifestURL = nil
            try await Task.sleep(for: .milliseconds(2100))
            await #expect { try await sync.run() } throws: { ($0 as? ClientError)?.kind == .expired }
            #expect(try StateStore(destination: work.path + "/dest").read(app: origin.app).manifestVersion == 2)
        }
    }

    @Test("A tampered blob is refused, the old revision kept; a failed essential download is rescheduled as non-essential")
    func tamperedBlob() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-client")
            defer { work.remove() }
            let old = bytes(400_000, seed: 1)
            try put(origin, "level", old, policy: "essential")
            var sync = DepotSync(server: origin.baseURL, configuration: try origin.clientConfiguration(), destination: work.path + "/dest")
            sync.kind = .install
            // Retries stay on: a transport hiccup (FoundationNetworking under a loaded machine
            // once reported "URL error -1") is retried, while a container that fails its checks
            // is refused at once whatever the retries.
            sync.retries = 2
            _ = try await sync.run()
            let response = try put(origin, "level", bytes(400_000, seed: 2), policy: "essential")
            let sha = try #require(response.bodyText.split(separator: "\"").drop { $0 != "sha256" }.dropFirst(2).first.map(String.init))
            let blob = origin.data.path + "/blobs/\(sha.prefix(2))/\(sha)"
            var stored = try FileSystem.readFile(blob)
            stored[200_000] ^= 0x40
            try FileSystem.writeAtomically(stored, to: blob)

            sync.kind = .update
            let report = try await sync.sync()
            #expect(report.failed.keys.sorted() == ["level"] && report.rescheduled == ["level"])
            #expect(report.failed["level"]?.contains("does not match the manifest's SHA-256") == true, "\(report.failed)")
            #expect(try FileSystem.readFile(work.path + "/dest/packs/level") == old)
            #expect(try StateStore(destination: work.path + "/dest").read(app: origin.app).packs["level"]?.revision == 1)
            #expect(FileSystem.contents(of: work.path + "/dest/packs") == ["level"], "no temporary file left")
        }
    }

    @Test("A connection dropped in the middle of a 64 MiB pack is resumed with a Range request; the pack ends byte-identical")
    func droppedConnection() async throws {
        let proxy = try FaultyProxy { _, head in head.contains("/blobs/") && !head.contains("Range:") ? .cutAfter(20 << 20) : .forward }
        try await withServer(configure: { $0.publicURL = "http://127.0.0.1:\(proxy.port)" }) { origin in
            proxy.upstreamPort = origin.port
            let work = TemporaryDirectory("depot-client")
            defer { work.remove() }
            let file = try work.file("big", size: 64 << 20, seed: 11)
            try await publish(origin, file: file, pack: "big")
            var sync = DepotSync(server: URL(string: "http://127.0.0.1:\(proxy.port)")!, configuration: try origin.clientConfiguration(),
                                 destination: work.path + "/dest")
            let events = Mutex<[SyncEvent]>([])
            sync.observer = { event in events.withLock { $0.append(event) } }
            let report = try await sync.run()
            #expect(report.installed == ["big"])
            #expect(try SHA256Hasher.hexDigest(ofFile: work.path + "/dest/packs/big") == SHA256Hasher.hexDigest(ofFile: file))
            // Resumed, never restarted: the first request whole, every later one (a loaded machine
            // may add a retry after a stall) a Range from where the copy on disk stopped.
            let blobRequests = proxy.requests.filter { $0.contains("/blobs/") }
            #expect(blobRequests.count >= 2 && blobRequests.first?.contains("Range:") == false)
            #expect(blobRequests.dropFirst().allSatisfy { $0.contains("Range: bytes=") }, "\(blobRequests)")
            #expect(events.withLock { $0.contains { if case .download(.retrying(id: "big", _, _)) = $0 { true } else { false } } })
        }
        proxy.stop()
    }

    @Test("The install runs while the download does: a resumed download answered in full (200) starts the decryption over, and the pack ends byte-identical")
    func resumeAnsweredInFull() async throws {
        // The first attempt is cut after 40 MiB (the installer has decrypted part of it by then);
        // the second goes through a proxy that drops its Range, so the origin sends all 64 MiB.
        let proxy = try FaultyProxy { _, head in
            guard head.contains("/blobs/") else { return .forward }
            return head.contains("Range:") ? .ignoringRange : .cutAfter(40 << 20)
        }
        try await withServer(configure: { $0.publicURL = "http://127.0.0.1:\(proxy.port)" }) { origin in
            proxy.upstreamPort = origin.port
            let work = TemporaryDirectory("depot-client")
            defer { work.remove() }
            let file = try work.file("big", size: 64 << 20, seed: 12)
            try await publish(origin, file: file, pack: "big")
            let sync = DepotSync(server: URL(string: "http://127.0.0.1:\(proxy.port)")!, configuration: try origin.clientConfiguration(),
                                 destination: work.path + "/dest")
            let report = try await sync.run()
            #expect(report.installed == ["big"])
            #expect(try SHA256Hasher.hexDigest(ofFile: work.path + "/dest/packs/big") == SHA256Hasher.hexDigest(ofFile: file))
            // The cut attempt, then a resume the proxy answers in full (a loaded machine may add a
            // retry after it: what matters is that a Range was asked and the whole pack came again).
            let blobRequests = proxy.requests.filter { $0.contains("/blobs/") }
            #expect(blobRequests.count >= 2 && blobRequests.dropFirst().contains { $0.contains("Range:") }, "\(blobRequests.count) blob requests")
            #expect(report.bytesDownloaded > 64 << 20, "the whole pack came again after the cut: \(report.bytesDownloaded)")
            #expect(FileSystem.contents(of: work.path + "/dest/packs") == ["big"], "no temporary file left")
            #expect(FileSystem.contents(of: work.path + "/dest/.depot/downloads").isEmpty)
        }
        proxy.stop()
    }

    @Test("Two depot sync processes on one destination at once both succeed and leave it consistent")
    func twoProcesses() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-client")
            defer { work.remove() }
            try put(origin, "a", bytes(3_000_000, seed: 1))
            try put(origin, "b", bytes(5_000_000, seed: 2))
            let config = work.path + "/client.json"
            try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: config)
            let arguments = ["sync", "--server", origin.baseURL.absoluteString, "--app", origin.app, "--config", config, "--dest", work.path + "/dest", "--quiet"]
            let processes = (0..<2).map { _ in
                let process = Process()
                process.executableURL = URL(fileURLWithPath: Processes.depotBinary)
                process.arguments = arguments
                let output = Pipe()
                process.standardOutput = output
                process.standardError = output
                return (process, output)
            }
            for (process, _) in processes { try process.run() }
            var outputs: [String] = []
            for (process, output) in processes {
                outputs.append(String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))
                process.waitUntilExit()
                #expect(process.terminationStatus == 0, "\(outputs.last ?? "")")
            }
            #expect(outputs.filter { $0.contains("2 installed") }.count == 1, "\(outputs)")
            #expect(outputs.filter { $0.contains("0 installed, 0 removed, 2 unchanged") }.count == 1, "\(outputs)")
            #expect(try FileSystem.readFile(work.path + "/dest/packs/a") == bytes(3_000_000, seed: 1))
            #expect(try FileSystem.readFile(work.path + "/dest/packs/b") == bytes(5_000_000, seed: 2))
            let state = try StateStore(destination: work.path + "/dest").read(app: origin.app)
            #expect(state.packs.keys.sorted() == ["a", "b"] && state.manifestVersion == 2)
        }
    }

    @Test("A full destination disk (8 MiB tmpfs) gives a clear error and loses nothing")
    func fullDisk() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-client")
            defer { work.remove() }
            let dest = work.path + "/dest"
            try FileSystem.createDirectory(dest)
            let mount = try Processes.run("/bin/mount", ["-t", "tmpfs", "-o", "size=8m", "tmpfs", dest])
            #expect(mount.status == 0, "mounting a tmpfs needs root: \(mount.stderr)")
            guard mount.status == 0 else { return }
            defer { _ = try? Processes.run("/bin/umount", [dest]) }
            let small = bytes(1_000_000, seed: 1)
            try put(origin, "level", small)
            let sync = DepotSync(server: origin.baseURL, configuration: try origin.clientConfiguration(), destination: dest)
            _ = try await sync.run()

            try put(origin, "level", bytes(12_000_000, seed: 2))
            let report = try await sync.sync()
            let reason = try #require(report.failed["level"])
            #expect(reason.contains("no space left on the device"), "\(reason)")
            #expect(try FileSystem.readFile(dest + "/packs/level") == small)
            let state = try StateStore(destination: dest).read(app: origin.app)
            #expect(state.packs["level"]?.revision == 1)
            #expect(FileSystem.contents(of: dest + "/packs") == ["level"])
            #expect(FileSystem.contents(of: dest + "/.depot/downloads").isEmpty, "the partial download is not kept on a full disk")
        }
    }

    @Test("depot sync --event simulates Background Assets: allowances before first launch, essential rules, allowed domains")
    func backgroundAssetsSimulator() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-client")
            defer { work.remove() }
            try put(origin, "core", bytes(100_000, seed: 1), policy: "essential")
            try put(origin, "world-1", bytes(200_000, seed: 2))
            try put(origin, "world-2", bytes(300_000, seed: 3))
            let config = work.path + "/client.json"
            try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: config)
            let envelope = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first).body
            let manifest = try Envelope.decode(envelope).verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())
            let size = { (id: String) in manifest[pack: id]!.size }
            func plist(allowance: Int64, domain: String) throws -> String {
                let path = work.path + "/Info-\(domain)-\(allowance).plist"
                let text = """
                <?xml version="1.0" encoding="UTF-8"?>
                <plist version="1.0"><dict>
                <key>BAInitialDownloadRestrictions</key><dict>
                <key>BADownloadAllowance</key><integer>\(allowance)</integer>
                <key>BADownloadDomainAllowList</key><array><string>\(domain)</string></array>
                <key>BAEssentialDownloadAllowance</key><integer>\(Int64(envelope.count) + size("core"))</integer>
                </dict></dict></plist>
                """
                try FileSystem.writeAtomically(Array(text.utf8), to: path)
                return path
            }
            let base = ["sync", "--server", origin.baseURL.absoluteString, "--app", origin.app, "--config", config, "--dest", work.path + "/dest", "--allow-http"]
            // Before first launch only what the allowance covers comes; the rest waits.
            let allowance = Int64(envelope.count) + size("core") + size("world-1") + 1000
            let install = try Processes.run(Processes.depotBinary, base + ["--event", "install", "--info-plist", plist(allowance: allowance, domain: "127.0.0.1")])
            #expect(install.status == 0, "\(install.stderr)")
            #expect(install.stdout.contains("device has core revision 1") && install.stdout.contains("device has world-1 revision 1"))
            let over = size("world-1") + size("world-2") - allowance
            #expect(install.stdout.contains("device waits for world-2: over the BADownloadAllowance left before first launch by \(over) bytes"), "\(install.stdout)")
            #expect(install.stdout.split(separator: "\n").last?.hasPrefix("synced \(origin.app) manifest 3: 2 installed, 0 removed, 0 unchanged, 1 deferred") == true)
            // A periodic event later fetches the rest (Info.plist keys from the server this time).
            let periodic = try Processes.run(Processes.depotBinary, base + ["--event", "periodic"])
            #expect(periodic.status == 0 && periodic.stdout.contains("device has world-2 revision 1"), "\(periodic.stderr)")
            // A device refuses a manifest that is not https (this origin is plain http).
            let plain = try Processes.run(Processes.depotBinary, base.dropLast() + ["--event", "update", "--dest", work.path + "/plain"])
            #expect(plain.status != 0 && plain.stderr.contains("is not https"), "\(plain.stderr)")
            #expect(FileSystem.contents(of: work.path + "/plain/packs").isEmpty)
            // A build whose allow list lacks the origin's domain gets nothing.
            let foreign = try Processes.run(Processes.depotBinary, base + ["--event", "update", "--info-plist", plist(allowance: 1 << 30, domain: "cdn.example.com")])
            #expect(foreign.status != 0 && foreign.stderr.contains("BADownloadDomainAllowList"), "\(foreign.stderr)")
        }
    }

    @Test("depot sync --event install fed the keys depot plist printed installs every essential and prefetch pack, nothing on demand")
    func originKeysInstallEverythingInitial() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-client")
            defer { work.remove() }
            try put(origin, "core", bytes(400_000, seed: 1), policy: "essential")
            try put(origin, "tutorial", bytes(150_000, seed: 2), policy: "essential")
            try put(origin, "world-1", bytes(250_000, seed: 3))
            try put(origin, "extras", bytes(90_000, seed: 4), policy: "onDemand")
            let config = work.path + "/client.json"
            try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: config)
            let plist = try Processes.run(Processes.depotBinary, ["plist", "--server", origin.baseURL.absoluteString, "--app", origin.app])
            #expect(plist.status == 0, "\(plist.stderr)")
            let keys = work.path + "/Info.plist"
            try FileSystem.writeAtomically(Array(plist.stdout.utf8), to: keys)
            let install = try Processes.run(Processes.depotBinary, [
                "sync", "--server", origin.baseURL.absoluteString, "--app", origin.app, "--config", config, "--dest", work.path + "/dest",
                "--event", "install", "--info-plist", keys, "--allow-http",
            ])
            #expect(install.status == 0, "\(install.stderr)")
            for id in ["core", "tutorial", "world-1"] { #expect(install.stdout.contains("device has \(id) revision 1"), "\(install.stdout)") }
            #expect(!install.stdout.contains("device has extras"))
            #expect(install.stdout.contains("device waits for extras: on demand: not asked for"), "\(install.stdout)")
            #expect(FileSystem.contents(of: work.path + "/dest/packs") == ["core", "tutorial", "world-1"])
        }
    }
}
