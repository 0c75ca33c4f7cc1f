import DepotClient
import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Updates that download only what changed, against the real origin: the origin makes patches
/// after a release, devices take the one from their installed revision, and anything wrong with
/// a patch falls back to the whole pack in the same sync.
@Suite("End to end: patch downloads")
struct PatchTests {
    /// `base` with `inserted` random bytes at 10% and three 16 KiB regions changed.
    static func revise(_ base: [UInt8], inserted: Int, seed: UInt8) -> [UInt8] {
        var out = Array(base[0..<(base.count / 10)]) + bytes(inserted, seed: seed) + Array(base[(base.count / 10)...])
        for region in 1...3 {
            let at = region * out.count / 4
            for k in 0..<(16 << 10) { out[at + k] ^= seed | 1 }
        }
        return out
    }

    static func random(_ count: Int, seed: UInt64) -> [UInt8] {
        var state = seed
        return (0..<count).map { _ in
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return UInt8(truncatingIfNeeded: state >> 33)
        }
    }

    @Test("A revision with an insertion and three changed regions arrives as a patch; two revisions behind patches too; a changed base and a tampered patch fall back to the whole pack; a fresh device gets the whole pack")
    func patchLifecycle() async throws {
        try await withServer(configure: { $0.patchDepth = 3 }) { origin in
            let work = TemporaryDirectory("depot-patches")
            defer { work.remove() }
            let v1 = Self.random(24 << 20, seed: 1)
            try put(origin, "level", v1)
            func device(_ name: String) throws -> DepotSync {
                DepotSync(server: origin.baseURL, configuration: try origin.clientConfiguration(), destination: work.path + "/" + name)
            }
            func installed(_ name: String) throws -> [UInt8] { try FileSystem.readFile(work.path + "/\(name)/packs/level", limit: 64 << 20) }
            for name in ["a", "b", "changed", "tampered"] {
                let report = try await device(name).sync()
                #expect(report.installed == ["level"] && report.patched.isEmpty)
            }

            let v2 = Self.revise(v1, inserted: 100_000, seed: 3)
            try put(origin, "level", v2)
            origin.server.waitForPatches()
            let live = try Envelope.decode(#require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first).body)
                .verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())
            let entry = try #require(live[pack: "level"])
            let patch = try #require(entry.patches?.first)
            #expect(entry.revision == 2 && patch.fromRevision == 1 && entry.patches?.count == 1)
            #expect(patch.size < 400_000, "about the changed bytes (148 KiB), not the pack's 24 MiB: \(patch.size)")

            // Device a: the patch, byte-identical.
            let patched = try await device("a").sync()
            #expect(patched.patched == ["level"] && patched.installed == ["level"] && patched.patchFallbacks.isEmpty, "\(patched)")
            #expect(patched.bytesDownloaded == patch.size && patched.bytesSaved == entry.size - patch.size)
            #expect(try installed("a") == v2)
            #expect(try StateStore(destination: work.path + "/a").read(app: origin.app).packs["level"]?.plaintextSHA256 == entry.plaintextSHA256)

            // A base changed on disk: the patch's result does not verify; the whole pack, same sync.
            // (Changed in place: a copy replaced or truncated is planned whole without trying the patch.)
            var damaged = try installed("changed")
            damaged[5_000_000] ^= 0xff
            let inPlace = try FileDescriptor(path: work.path + "/changed/packs/level", flags: O_WRONLY)
            #expect(damaged[5_000_000...5_000_000].withUnsafeBytes { pwrite(inPlace.rawValue, $0.baseAddress, 1, 5_000_000) } == 1)
            try inPlace.close()
            let fellBack = try await device("changed").sync()
            #expect(fellBack.installed == ["level"] && fellBack.patched.isEmpty && fellBack.patchFallbacks["level"] != nil, "\(fellBack)")
            #expect(fellBack.failed.isEmpty && fellBack.bytesDownloaded >= entry.size)
            #expect(try installed("changed") == v2)

            // A tampered patch blob on the origin: refused, the whole pack instead.
            let blob = origin.data.path + "/blobs/\(patch.sha256.prefix(2))/\(patch.sha256)"
            var tampered = try FileSystem.readFile(blob, limit: 64 << 20)
            let original = tampered
            tampered[tampered.count / 2] ^= 1
            try FileSystem.writeAtomically(tampered, to: blob)
            let refused = try await device("tampered").sync()
            #expect(refused.installed == ["level"] && refused.patched.isEmpty && refused.patchFallbacks["level"] != nil, "\(refused)")
            #expect(try installed("tampered") == v2)
            try FileSystem.writeAtomically(original, to: blob)

            // A fresh device: the whole pack.
            let fresh = try await device("fresh").sync()
            #expect(fresh.installed == ["level"] && fresh.patched.isEmpty && fresh.bytesDownloaded == entry.size)

            // Revision 3: device b, still on revision 1, patches from 1; device a from 2.
            let v3 = Self.revise(v2, inserted: 50_000, seed: 5)
            try put(origin, "level", v3)
            origin.server.waitForPatches()
            let twoBehind = try await device("b").sync()
            #expect(twoBehind.patched == ["level"] && twoBehind.bytesDownloaded < 700_000, "\(twoBehind)")
            #expect(try installed("b") == v3)
            let oneBehind = try await device("a").sync()
            #expect(oneBehind.patched == ["level"] && oneBehind.bytesDownloaded < 400_000, "\(oneBehind)")
            #expect(try installed("a") == v3)
            // Up to date: nothing moves.
            #expect(try await device("a").sync().bytesDownloaded == 0)
            // depot releases says what a device on each earlier revision downloads.
            let listed = try Processes.run(Processes.depotBinary, ["releases", "--server", origin.baseURL.absoluteString, "--app", origin.app])
            let lines = listed.stdout.split(separator: "\n").filter { $0.hasPrefix("level revision 3: from revision ") }
            #expect(listed.status == 0 && lines.count == 2 && lines.allSatisfy { $0.contains("KiB instead of 24.") && $0.hasSuffix("MiB") }, "\(listed.stdout)\(listed.stderr)")
        }
    }

    @Test("Garbage collection keeps the patches a live release names")
    func collectionKeepsPatches() async throws {
        try await withServer(configure: { $0.patchDepth = 2 }) { origin in
            let v1 = Self.random(2 << 20, seed: 7)
            try put(origin, "level", v1)
            try put(origin, "level", Self.revise(v1, inserted: 10_000, seed: 9))
            origin.server.waitForPatches()
            let live = try Envelope.decode(#require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first).body)
                .verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())
            let patch = try #require(live[pack: "level"]?.patches?.first)
            _ = try origin.server.collectGarbage(retention: 0, grace: 0, dryRun: false)
            let answer = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/blobs/\(patch.sha256) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
            #expect(answer.status == 200 && Int64(answer.body.count) == patch.size)
        }
    }

    @Test("The extension schedules the patch (its URL and exact size), takes it in, and the install step applies it; a patch that fails is dropped and the next plan asks for the whole pack")
    func extensionPatches() async throws {
        try await withServer(configure: { $0.patchDepth = 3; $0.publicURL = "http://127.0.0.1:0" }) { origin in
            let work = TemporaryDirectory("depot-patches-extension")
            defer { work.remove() }
            let v1 = Self.random(4 << 20, seed: 11)
            try put(origin, "level", v1)
            func manifestFile() throws -> String {
                let body = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first).body
                let path = work.path + "/manifest-\(body.count)-\(UUID().uuidString).json"
                try FileSystem.writeAtomically(body, to: path)
                return path
            }
            /// What the system does with a scheduled download: fetch exactly its URL (by path here) and size.
            func deliver(_ download: ScheduledDownload, to flow: ExtensionFlow) throws {
                let answer = try #require(try RawHTTP.send(port: origin.port, "GET \(download.url.path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
                #expect(answer.status == 200 && answer.body.count == download.fileSize, "the system fails a download of another size")
                let file = work.path + "/delivered-" + download.identifier
                try FileSystem.writeAtomically(answer.body, to: file)
                try flow.receive(identifier: download.identifier, file: file)
            }
            let configuration = try origin.clientConfiguration()
            var flows: [ExtensionFlow] = []
            for name in ["good", "damaged"] {
                let flow = try ExtensionFlow(configuration: configuration, destination: work.path + "/" + name)
                for download in try flow.schedule(manifestFile: manifestFile(), kind: .install) { try deliver(download, to: flow) }
                #expect(try flow.installArrived().installed == ["level"])
                flows.append(flow)
            }
            let v2 = Self.revise(v1, inserted: 30_000, seed: 13)
            try put(origin, "level", v2)
            origin.server.waitForPatches()

            let good = try flows[0].schedule(manifestFile: manifestFile(), kind: .periodic)
            let patch = try #require(good.first?.patch)
            #expect(good.map(\.identifier) == ["level@2-from-1"] && good[0].fileSize == Int(patch.size) && good[0].url.absoluteString == patch.url)
            try deliver(good[0], to: flows[0])
            #expect(try flows[0].installArrived().installed == ["level"])
            #expect(try FileSystem.readFile(work.path + "/good/packs/level", limit: 64 << 20) == v2)

            // One byte changed in place (same file, same size: nothing a stat shows, so the plan
            // still takes the patch; a copy replaced or truncated is planned whole instead).
            var damaged = try FileSystem.readFile(work.path + "/damaged/packs/level", limit: 64 << 20)
            damaged[1_000] ^= 1
            let inPlace = try FileDescriptor(path: work.path + "/damaged/packs/level", flags: O_WRONLY)
            #expect(damaged[1_000...1_000].withUnsafeBytes { pwrite(inPlace.rawValue, $0.baseAddress, 1, 1_000) } == 1)
            try inPlace.close()
            let first = try flows[1].schedule(manifestFile: manifestFile(), kind: .periodic)
            #expect(first.map(\.identifier) == ["level@2-from-1"])
            try deliver(first[0], to: flows[1])
            let refused = try flows[1].installArrived()
            #expect(refused.installed.isEmpty && refused.discarded["level@2-from-1"] != nil, "\(refused)")
            #expect(try FileSystem.readFile(work.path + "/damaged/packs/level", limit: 64 << 20) == damaged, "the installed copy untouched")
            let whole = try flows[1].schedule(manifestFile: manifestFile(), kind: .periodic)
            #expect(whole.map(\.identifier) == ["level@2"] && whole[0].patch == nil)
            try deliver(whole[0], to: flows[1])
            #expect(try flows[1].installArrived().installed == ["level"])
            #expect(try FileSystem.readFile(work.path + "/damaged/packs/level", limit: 64 << 20) == v2)
        }
    }
}

/// The issue's own figure, at full size: alone with the heavy suites.
@Suite("End to end: a 256 MiB pack updated by its patch, counted at the origin", .enabled(if: HeavyTests.enabled, "run alone by Deploy/setup.sh test, with DEPOT_HEAVY_TESTS=1"))
struct LargePatchTests {
    @Test("256 MiB, then a revision with an insertion and three changed regions: the origin's access log shows at most 3 MiB sent for the update, and the result is byte-identical")
    func accessLogCounts() throws {
        let work = TemporaryDirectory("depot-patch-256")
        defer { work.remove() }
        let server = try ServeProcess(data: work.path + "/data", environment: ["DEPOT_PATCH_DEPTH": "3"])
        let depot = Processes.depotBinary
        let environment = ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": server.token]
        let common = ["--server", server.url, "--app", "com.example.dev"]
        let v1 = try work.file("v1.bin", size: 256 << 20, seed: 31)
        #expect(try Processes.run(depot, ["publish", v1, "--pack", "world", "--release", "--quiet"] + common, environment: environment).status == 0)
        let keys = try Processes.run(depot, ["keys", "export", "--data", work.path + "/data", "--app", "com.example.dev"])
        try FileSystem.writeAtomically(Array(keys.stdout.utf8), to: work.path + "/client.json")
        let sync = ["sync", "--config", work.path + "/client.json", "--dest", work.path + "/device"] + common
        #expect(try Processes.run(depot, sync).status == 0)

        // Revision 2: 200 KB inserted at 10%, three 64 KiB regions changed (about 400 KiB in all).
        let source = try FileDescriptor.openForReading(v1)
        let output = try FileDescriptor(path: work.path + "/v2.bin", flags: O_WRONLY | O_CREAT | O_TRUNC, mode: 0o644)
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var position = 0
        while true {
            let n = try buffer.withUnsafeMutableBytes { try source.read(into: $0) }
            if n == 0 { break }
            var chunk = Array(buffer[0..<n])
            if position == 25 << 20 { try output.write(PatchTests.random(200_000, seed: 32)) }
            if [64 << 20, 128 << 20, 192 << 20].contains(position) { for k in 0..<(64 << 10) { chunk[k] ^= 0x5c } }
            try output.write(chunk)
            position += n
        }
        try output.close()
        #expect(try Processes.run(depot, ["publish", work.path + "/v2.bin", "--pack", "world", "--release", "--quiet"] + common, environment: environment).status == 0)
        let trusted = try ClientConfiguration.decode(Array(keys.stdout.utf8)).trustedKeys()
        var live: PackEntry?
        for _ in 0..<1200 where live?.patches == nil {
            if let body = try RawHTTP.send(port: UInt16(server.port)!, "GET /v1/apps/com.example.dev/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first?.body {
                live = try? Envelope.decode(body).verifiedManifest(trusting: trusted)[pack: "world"]
            }
            if live?.patches == nil { Thread.sleep(forTimeInterval: 0.1) }
        }
        let entry = try #require(live)
        let patch = try #require(entry.patches?.first, "the writer released a patch")
        let updated = try Processes.run(depot, sync)
        #expect(updated.status == 0 && updated.stdout.contains("1 patched"), "\(updated.stdout)\(updated.stderr)")
        #expect(try SHA256Hasher.hexDigest(ofFile: work.path + "/device/packs/world") == SHA256Hasher.hexDigest(ofFile: work.path + "/v2.bin"))

        server.process.terminate()
        server.process.waitUntilExit()
        let lines = server.errorOutput().split(separator: "\n").filter { $0.contains("access bytes=") && $0.contains("route=blob") }
        func sent(_ sha256: String) -> Int64 {
            lines.filter { $0.contains(sha256) }.compactMap { line in
                line.split(separator: " ").first { $0.hasPrefix("bytes=") }.flatMap { Int64($0.dropFirst(6)) }
            }.reduce(0, +)
        }
        print("LargePatchTests: patch \(patch.size) bytes; the origin sent \(sent(patch.sha256)) bytes of it and \(sent(entry.sha256)) of the 256 MiB revision")
        #expect(sent(patch.sha256) == patch.size && sent(patch.sha256) <= 3 << 20)
        #expect(sent(entry.sha256) == 0, "the new revision's container was not downloaded")
    }
}

@Suite("End to end: zip packs patched by entry")
struct ZipPatchTests {
    /// Two revisions of a zip of `count` entries (64 KiB of seeded random bytes each), the second
    /// with entry 7 changed in 4 KiB, entry 9 removed and one entry added.
    static func zips(_ dir: String, count: Int) throws {
        let script = """
            import random, sys, zipfile
            d, n = sys.argv[1], int(sys.argv[2])
            rng = random.Random(7)
            data = {f"level/{i % 5}/part-{i:03d}.bin": rng.randbytes(65536) for i in range(n)}
            with zipfile.ZipFile(d + "/v1.zip", "w", zipfile.ZIP_DEFLATED) as z:
                for name, b in data.items(): z.writestr(name, b)
            changed = bytearray(data["level/2/part-007.bin"]); changed[1000:5096] = rng.randbytes(4096)
            data["level/2/part-007.bin"] = bytes(changed)
            del data["level/4/part-009.bin"]
            data["extra/new.bin"] = rng.randbytes(10000)
            with zipfile.ZipFile(d + "/v2.zip", "w", zipfile.ZIP_DEFLATED) as z:
                for name, b in data.items(): z.writestr(name, b)
            """
        let made = try Processes.run("/usr/bin/python3", ["-c", script, dir, String(count)])
        #expect(made.status == 0, "\(made.stderr)")
    }

    static func putZip(_ origin: TestOrigin, _ file: String) throws {
        let body = try FileSystem.readFile(file, limit: 256 << 20)
        let head = "PUT /v1/apps/\(origin.app)/packs/levels?release=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(origin.token)\r\n"
            + "Content-Type: application/zip\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        // (The timeout only ends a hang: under the parallel run an upload may wait its turn.)
        #expect(try RawHTTP.send(port: origin.port, head, body: body, timeout: RawHTTP.changeWait).first?.status == 201)
    }

    @Test("A zip with one entry changed, one removed and one added: the device downloads about those entries, keeps the rest from its tree, and ends with exactly the new tree")
    func byEntry() async throws {
        try await withServer(configure: { $0.patchDepth = 3 }) { origin in
            let work = TemporaryDirectory("depot-zip-patch")
            defer { work.remove() }
            try Self.zips(work.path, count: 60)
            try Self.putZip(origin, work.path + "/v1.zip")
            let sync = DepotSync(server: origin.baseURL, configuration: try origin.clientConfiguration(), destination: work.path + "/device")
            #expect(try await sync.sync().installed == ["levels"])
            try Self.putZip(origin, work.path + "/v2.zip")
            origin.server.waitForPatches()
            let report = try await sync.sync()
            let full = try #require(FileSystem.fileSize(work.path + "/v2.zip"))
            print("ZipPatchTests: \(report.bytesDownloaded) bytes downloaded for a \(full)-byte zip")
            #expect(report.patched == ["levels"] && report.patchFallbacks.isEmpty, "\(report)")
            // One changed entry (a delta of about 4 KiB), one new of 10,000 bytes, and a few dozen bytes per kept entry.
            #expect(report.bytesDownloaded < 30_000, "\(report.bytesDownloaded) bytes for a \(full)-byte zip")
            try ZipPack.extract(work.path + "/v2.zip", into: work.path + "/expected")
            #expect(try InstallStepTests.tree(work.path + "/device/packs/levels") == InstallStepTests.tree(work.path + "/expected"))
            #expect(!FileSystem.exists(work.path + "/device/packs/levels/level/4/part-009.bin"))
            let state = try StateStore(destination: work.path + "/device").read(app: origin.app).packs["levels"]
            #expect(state?.revision == 2 && state?.unpacked == true)
        }
    }
}

@Suite("depot delta")
struct DeltaCommandTests {
    @Test("make and apply, files and folders; a damaged delta is refused and no output appears")
    func makeApply() throws {
        let work = TemporaryDirectory("depot-delta-cli")
        defer { work.remove() }
        let depot = Processes.depotBinary
        let base = PatchTests.random(500_000, seed: 41)
        let target = Array(base[0..<200_000]) + Array("inserted".utf8) + Array(base[200_000...])
        try FileSystem.writeAtomically(base, to: work.path + "/base")
        try FileSystem.writeAtomically(target, to: work.path + "/target")
        let made = try Processes.run(depot, ["delta", "make", work.path + "/base", work.path + "/target", work.path + "/patch"])
        #expect(made.status == 0 && (FileSystem.fileSize(work.path + "/patch") ?? 0) < 200, "\(made.stdout)\(made.stderr)")
        #expect(try Processes.run(depot, ["delta", "apply", work.path + "/base", work.path + "/patch", work.path + "/result"]).status == 0)
        #expect(try FileSystem.readFile(work.path + "/result") == target)

        var damaged = try FileSystem.readFile(work.path + "/patch")
        damaged[damaged.count - 3] ^= 1
        try FileSystem.writeAtomically(damaged, to: work.path + "/damaged")
        let refused = try Processes.run(depot, ["delta", "apply", work.path + "/base", work.path + "/damaged", work.path + "/never"])
        #expect(refused.status != 0 && refused.stderr.contains("delta"), "\(refused.stderr)")
        #expect(!FileSystem.exists(work.path + "/never") && FileSystem.contents(of: work.path).allSatisfy { !$0.hasPrefix(".tmp-") })

        for (dir, file) in [("old", base), ("new", target)] {
            try FileSystem.createDirectory(work.path + "/" + dir + "/sub")
            try FileSystem.writeAtomically(file, to: work.path + "/\(dir)/sub/level.bin")
        }
        #expect(try Processes.run(depot, ["delta", "make", work.path + "/old", work.path + "/new", work.path + "/tree"]).status == 0)
        #expect(try Processes.run(depot, ["delta", "apply", work.path + "/old", work.path + "/tree", work.path + "/built"]).status == 0)
        #expect(try FileSystem.readFile(work.path + "/built/sub/level.bin") == target)
    }
}
