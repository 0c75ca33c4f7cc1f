import DepotClient
import DepotCore
import DepotHTTP
@testable import DepotServer
import DepotTestSupport
import Foundation
import Logging
import Testing

/// The patch maker against hostile publishers and a small disk: scratch space bounded, the data
/// volume's reserve kept, apps taking turns, crash leftovers removed, and patch releases keeping
/// every publishing rule (the allowance guard, stored blobs, the publisher's `--base`).
@Suite("End to end: patch making bounded, fair and by the rules", .serialized)
struct PatchLimitTests {
    static let bomb = URL(fileURLWithPath: #filePath).deletingLastPathComponent().path + "/Fixtures/zip_bomb.py"

    /// Two zips (tagged one and two) of `entries` GiB of zeros each (about 1 MiB per GiB
    /// compressed); `declare`: the size their headers state per entry, when they lie.
    static func zipBombs(_ prefix: String, entries: Int, size: Int = 1 << 30, declare: Int? = nil) throws -> [[UInt8]] {
        let made = try Processes.run("/usr/bin/python3", [bomb, String(entries), String(size)] + (declare.map { ["--declare", String($0)] } ?? [])
            + ["\(prefix)-one.zip:one", "\(prefix)-two.zip:two"])
        #expect(made.status == 0, "\(made.stderr)")
        return try ["one", "two"].map { try FileSystem.readFile("\(prefix)-\($0).zip", limit: 64 << 20) }
    }

    static func start(_ data: String, log: CapturedLog, depth: Int = 3, limits: PatchLimits? = nil) throws -> DepotServer {
        var configuration = OriginConfiguration(
            dataPath: data, http: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 2), logger: log.logger()
        )
        configuration.patchDepth = depth
        configuration.patchLimits = limits
        return try DepotServer(configuration: configuration)
    }

    static func upload(
        _ port: UInt16, app: String, token: String, _ pack: String, _ body: [UInt8], type: String = "application/octet-stream", query: String = ""
    ) throws -> RawHTTP.Response {
        let head = "PUT /v1/apps/\(app)/packs/\(pack)?release=true\(query) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\n"
            + "Content-Type: \(type)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        return try #require(try RawHTTP.send(port: port, head, body: body, timeout: RawHTTP.changeWait).first)
    }

    static func manifest(_ port: UInt16, app: String, channel: String = "production", keys: [Ed25519PublicKey]) throws -> Manifest {
        let path = channel == "production" ? "/v1/apps/\(app)/manifest" : "/v1/apps/\(app)/channels/\(channel)/manifest"
        let answer = try #require(try RawHTTP.send(port: port, "GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
        return try Envelope.decode(answer.body).verifiedManifest(trusting: keys)
    }

    static func status(_ port: UInt16, _ url: String) throws -> Int {
        let path = String(url[try #require(url.range(of: "/v1/")).lowerBound...])
        return try #require(try RawHTTP.send(port: port, "GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first).status
    }

    @Test("Zip bombs published twice to a 512 MiB data volume (10 GiB of zeros in 10 MiB; and one whose directory claims 10 MiB): each patch is skipped, logged and counted, the volume keeps its reserve, and another app's 20 MiB uploads succeed while and after")
    func zipBombs() throws {
        let work = TemporaryDirectory("depot-patch-bomb")
        defer { work.remove() }
        let volume = try SmallVolume(in: work, size: "512m")
        defer { volume.unmount() }
        let data = volume.path
        let (bomber, victim) = ("com.example.bomber", "com.example.victim")
        let bomberToken = try prepareDataFolder(data, app: bomber)
        let victimToken = try prepareDataFolder(data, app: victim)
        let log = CapturedLog()
        let server = try Self.start(data, log: log)
        defer { server.stop() }
        let port = server.port
        var victimUploads = 0
        func victimPublishes() throws {
            victimUploads += 1
            let answer = try Self.upload(port, app: victim, token: victimToken, "level", bytes(20 << 20, seed: UInt8(victimUploads)))
            #expect(answer.status == 201, "another app's upload: \(answer.status) \(answer.bodyText)")
        }
        func skipped(_ pack: String) -> [String] {
            log.all.filter { $0.hasPrefix("patch skipped") && $0.contains("app=\(bomber)") && $0.contains("pack=\(pack)") }
        }

        // An honest bomb: its directory says 10 GiB, so the patch is refused before a byte is unpacked.
        for zip in try Self.zipBombs(work.path + "/honest", entries: 10) {
            let answer = try Self.upload(port, app: bomber, token: bomberToken, "honest", zip, type: "application/zip")
            #expect(answer.status == 201, "\(answer.bodyText)")
        }
        try victimPublishes()
        #expect(Eventually.wait { !skipped("honest").isEmpty })
        #expect(skipped("honest").first?.contains("reserve") == true, "\(skipped("honest"))")
        try victimPublishes()

        // A lying bomb: its directory says 10 MiB, its streams inflate to 10 GiB; unpacking stops
        // at the installSize the manifest took from that directory (a device refuses more too).
        for zip in try Self.zipBombs(work.path + "/liar", entries: 10, declare: 1 << 20) {
            let answer = try Self.upload(port, app: bomber, token: bomberToken, "liar", zip, type: "application/zip")
            #expect(answer.status == 201, "\(answer.bodyText)")
        }
        try victimPublishes()
        #expect(Eventually.wait { !skipped("liar").isEmpty })
        #expect(skipped("liar").first?.contains("more than its manifest's installSize") == true, "\(skipped("liar"))")

        server.waitForPatches()
        try victimPublishes()

        // What is left: no scratch, the reserve free, the victim's packs whole, counted in the metrics.
        #expect(FileSystem.contents(of: data + "/uploads").filter { $0.hasPrefix("patch-") }.isEmpty)
        let space = try #require(ScratchBudget.space(of: data))
        #expect(space.free > space.total / 4, "the reserve is kept: \(space.free) of \(space.total) free")
        let rendered = String(decoding: server.origin.metrics.render(inFlightRequests: 0), as: UTF8.self)
        #expect(rendered.contains("depot_patches_skipped_total{app=\"\(bomber)\",reason=\"disk_reserve\"} 1"), "\(rendered.split(separator: "\n").filter { $0.contains("skipped") })")
        #expect(rendered.contains("depot_patches_skipped_total{app=\"\(bomber)\",reason=\"oversized_zip\"} 1"))
        let keys = try AppStore(folder: DataFolder(data)).clientConfiguration(victim).trustedKeys()
        let live = try Self.manifest(port, app: victim, keys: keys)
        let level = try #require(live[pack: "level"])
        #expect(level.size > 20 << 20)
        #expect(try Self.status(port, level.url) == 200)
    }

    @Test("60,000 empty files published twice to a 128 MiB data volume: no bytes to count, but a block and an inode each; unpacking stops before the reserve, nothing is left, and an upload still fits")
    func manyEmptyFiles() throws {
        let work = TemporaryDirectory("depot-patch-many")
        defer { work.remove() }
        let volume = try SmallVolume(in: work, size: "128m")
        defer { volume.unmount() }
        let data = volume.path
        let app = "com.example.many"
        let token = try prepareDataFolder(data, app: app)
        let log = CapturedLog()
        let server = try Self.start(data, log: log)
        defer { server.stop() }
        for zip in try Self.zipBombs(work.path + "/many", entries: 60_000, size: 0) {
            let answer = try Self.upload(server.port, app: app, token: token, "many", zip, type: "application/zip")
            #expect(answer.status == 201, "\(answer.bodyText)")
        }
        server.waitForPatches()
        let skipped = log.all.filter { $0.hasPrefix("patch skipped") && $0.contains("pack=many") }
        #expect(skipped.count == 1 && skipped.first?.contains("unpacking took the data volume") == true, "\(skipped)")
        #expect(FileSystem.contents(of: data + "/uploads").filter { $0.hasPrefix("patch-") }.isEmpty)
        let space = try #require(ScratchBudget.space(of: data))
        #expect(space.free > space.total / 4)
        #expect(try Self.upload(server.port, app: app, token: token, "after", bytes(16 << 20, seed: 3)).status == 201)
    }

    @Test("Unpacking stops at its limit, counted on the bytes really inflated (a directory that claims 4 KiB for 64 MiB): at most one chunk past it, and the reason given")
    func extractionStopsAtLimit() throws {
        let work = TemporaryDirectory("depot-zip-limit")
        defer { work.remove() }
        let made = try Processes.run("/usr/bin/python3", [Self.bomb, "4", String(16 << 20), "--declare", "1024", work.path + "/liar.zip:x"])
        #expect(made.status == 0, "\(made.stderr)")
        #expect(try ZipPack.inspect(work.path + "/liar.zip").installSize == 4 * 1024 + 1, "the directory's claim")
        let limit: Int64 = 8 << 20
        var asked: Int64 = 0
        #expect {
            try ZipPack.extract(work.path + "/liar.zip", into: work.path + "/tree") { written, _ in
                asked = written
                return written > limit ? "over \(limit)" : nil
            }
        } throws: { ($0 as? ZipPackError) == .limitReached("over \(limit)") }
        func bytes(under path: String) -> Int64 {
            FileSystem.contents(of: path).reduce(0) { sum, name in
                let child = path + "/" + name
                return sum + (FileSystem.isDirectory(child) ? bytes(under: child) : FileSystem.fileSize(child) ?? 0)
            }
        }
        #expect(bytes(under: work.path + "/tree") <= limit, "the chunk that crossed the limit was not written")
        #expect(asked > limit && asked < limit + (1 << 20))
    }

    @Test("An entry whose bytes do not match its CRC-32 is refused as damaged (server and device unpack alike); a `./` path is refused before anything is written")
    func crcAndDotPaths() throws {
        let work = TemporaryDirectory("depot-zip-crc")
        defer { work.remove() }
        let script = """
            import struct, sys, zipfile
            d = sys.argv[1]
            with zipfile.ZipFile(d + "/good.zip", "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("level/a.bin", b"x" * 100000)
            data = bytearray(open(d + "/good.zip", "rb").read())
            local = data.index(b"PK\\x03\\x04")
            central = data.index(b"PK\\x01\\x02")
            for at in (local + 14, central + 16):
                data[at] ^= 0xFF
            open(d + "/bad-crc.zip", "wb").write(bytes(data))
            with zipfile.ZipFile(d + "/dot.zip", "w") as z:
                z.writestr("./a.bin", b"a")
                z.writestr("a.bin", b"b")
            """
        let made = try Processes.run("/usr/bin/python3", ["-c", script, work.path])
        #expect(made.status == 0, "\(made.stderr)")
        try ZipPack.extract(work.path + "/good.zip", into: work.path + "/good")
        #expect(FileSystem.fileSize(work.path + "/good/level/a.bin") == 100_000)
        #expect {
            try ZipPack.extract(work.path + "/bad-crc.zip", into: work.path + "/bad")
        } throws: { "\($0)".contains("CRC-32") }
        #expect {
            try ZipPack.extract(work.path + "/dot.zip", into: work.path + "/dot")
        } throws: { "\($0)".contains(". component") }
        #expect(FileSystem.contents(of: work.path + "/dot").isEmpty)

        // One entry 300 folders deep: each folder made is counted, not the one entry.
        let deep = try Processes.run("/usr/bin/python3", ["-c", """
            import sys, zipfile
            with zipfile.ZipFile(sys.argv[1] + "/deep.zip", "w") as z:
                z.writestr("/".join(["d"] * 300) + "/f.bin", b"f")
            """, work.path])
        #expect(deep.status == 0, "\(deep.stderr)")
        var counted = 0
        try ZipPack.extract(work.path + "/deep.zip", into: work.path + "/deep") { _, entries in
            counted = max(counted, entries)
            return nil
        }
        #expect(counted == 301, "300 folders and a file: \(counted)")
    }

    @Test("A patch over the scratch limit is skipped before anything is written; one within it is made")
    func scratchLimit() async throws {
        try await withServer(configure: { $0.patchDepth = 2; $0.patchLimits = PatchLimits(scratchBytes: 40 << 20, reserve: 0) }) { origin in
            let keys = try origin.clientConfiguration().trustedKeys()
            // 8 MiB: about 4 × 8 MiB of scratch fits in 40 MiB.
            let small = PatchTests.random(8 << 20, seed: 3)
            try put(origin, "small", small)
            try put(origin, "small", PatchTests.revise(small, inserted: 10_000, seed: 5))
            origin.server.waitForPatches()
            #expect(try Self.manifest(origin.port, app: origin.app, keys: keys)[pack: "small"]?.patches?.count == 1)
            // 12 MiB: 4 × 12 MiB does not.
            let large = PatchTests.random(12 << 20, seed: 4)
            try put(origin, "large", large)
            try put(origin, "large", PatchTests.revise(large, inserted: 10_000, seed: 6))
            origin.server.waitForPatches()
            let live = try Self.manifest(origin.port, app: origin.app, keys: keys)
            #expect(live[pack: "large"]?.patches == nil && live[pack: "small"]?.patches?.count == 1)
            let rendered = String(decoding: origin.server.origin.metrics.render(inFlightRequests: 0), as: UTF8.self)
            #expect(rendered.contains("depot_patches_skipped_total{app=\"\(origin.app)\",reason=\"scratch_limit\"} 1"))
        }
    }

    @Test("Start-up removes every patch scratch file and folder a crash left, and makes the patches left unmade; apps take turns, one pack each")
    func startUpAndTurns() throws {
        let work = TemporaryDirectory("depot-patch-turns")
        defer { work.remove() }
        let data = work.path + "/data"
        let (busy, quiet) = ("com.example.busy", "com.example.quiet")
        let busyToken = try prepareDataFolder(data, app: busy)
        let quietToken = try prepareDataFolder(data, app: quiet)
        // Without patches: the busy app changes four packs, the quiet app one.
        do {
            let server = try Self.start(data, log: CapturedLog(), depth: 0)
            defer { server.stop() }
            for round in 0..<2 {
                for pack in ["a", "b", "c", "d"] {
                    let base = PatchTests.random(3 << 20, seed: UInt64(pack.utf8.first!))
                    let answer = try Self.upload(server.port, app: busy, token: busyToken, pack, round == 0 ? base : PatchTests.revise(base, inserted: 5_000, seed: 9))
                    #expect(answer.status == 201)
                }
            }
            let base = PatchTests.random(3 << 20, seed: 1)
            #expect(try Self.upload(server.port, app: quiet, token: quietToken, "only", base).status == 201)
            #expect(try Self.upload(server.port, app: quiet, token: quietToken, "only", PatchTests.revise(base, inserted: 5_000, seed: 9)).status == 201)
        }
        // A crash in the middle of a zip patch: its trees and files stay in uploads/.
        for leftover in ["patch-0011223344556677.new-tree/level/deep", "patch-0011223344556677.old-tree/level"] {
            try FileSystem.createDirectory(data + "/uploads/" + leftover, mode: 0o755)
            try FileSystem.writeAtomically(Array(repeating: 1, count: 4096), to: data + "/uploads/" + leftover + "/file.bin")
        }
        try FileSystem.writeAtomically([1, 2, 3], to: data + "/uploads/patch-0011223344556677.new")

        let log = CapturedLog()
        let server = try Self.start(data, log: log)
        defer { server.stop() }
        // (The patch maker, started with the server, may already be writing its own scratch files.)
        let left = FileSystem.contents(of: data + "/uploads").filter { $0.hasPrefix("patch-0011223344556677") }
        #expect(left.isEmpty, "\(left)")
        server.waitForPatches()
        let order = log.all.filter { $0.hasPrefix("made patches") }.compactMap { line in [busy, quiet].first { line.contains("app=\($0) ") } }
        #expect(order.count == 5, "\(order)")
        #expect(order.prefix(2) == [busy, quiet], "the quiet app's one pack waits for one of the busy app's four, not all: \(order)")
        let busyKeys = try AppStore(folder: DataFolder(data)).clientConfiguration(busy).trustedKeys()
        #expect(try Self.manifest(server.port, app: busy, keys: busyKeys).packs.allSatisfy { $0.patches?.count == 1 })
    }

    @Test("A patch release passes the allowance guard: one that would exceed the shipped builds' allowances is not released, and is logged and counted")
    func allowanceGuard() async throws {
        let log = CapturedLog()
        try await withServer(configure: { $0.patchDepth = 2; $0.logger = log.logger() }) { origin in
            let v1 = PatchTests.random(2 << 20, seed: 11)
            try put(origin, "level", v1, policy: "essential")
            let envelope = try ChannelBindingTests.envelope(origin, "/v1/apps/\(origin.app)/manifest")
            let live = try Envelope.decode(envelope).verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())
            // Room for the next revision's manifest, not for the patch entries it would gain.
            var allowances = BuildAllowances()
            allowances.essentialDownloadAllowance = Int64(envelope.count) + live.packs[0].size + 64
            try AppStore(folder: DataFolder(origin.data.path)).setAllowances(origin.app, allowances)
            try put(origin, "level", PatchTests.revise(v1, inserted: 0, seed: 13), policy: "essential")
            origin.server.waitForPatches()
            let after = try Self.manifest(origin.port, app: origin.app, keys: origin.clientConfiguration().trustedKeys())
            #expect(after.version == 2 && after[pack: "level"]?.revision == 2 && after[pack: "level"]?.patches == nil)
            #expect(log.all.contains { $0.hasPrefix("patches not released") && $0.contains("BAEssentialDownloadAllowance") }, "\(log.all.filter { $0.contains("patch") })")
            let rendered = String(decoding: origin.server.origin.metrics.render(inFlightRequests: 0), as: UTF8.self)
            #expect(rendered.contains("depot_patches_skipped_total{app=\"\(origin.app)\",reason=\"allowance\"} 1"))
            // The unreleased patch's blob is no longer held: the collector takes it with release 1's pack.
            _ = try origin.server.collectGarbage(retention: 0, grace: 0, dryRun: false)
            let stored = FileSystem.contents(of: origin.data.path + "/blobs").flatMap { FileSystem.contents(of: origin.data.path + "/blobs/" + $0) }
            #expect(stored == [after[pack: "level"]?.sha256 ?? "?"], "\(stored)")
        }
    }

    @Test("Promoting a release whose patch blob was swept: the channel's copy leaves the patch out (every URL answers 200), and the patch maker makes one for that channel")
    func promotionWithSweptPatch() async throws {
        try await withServer(configure: { $0.patchDepth = 2 }) { origin in
            let keys = try origin.clientConfiguration().trustedKeys()
            let v1 = PatchTests.random(2 << 20, seed: 21)
            try put(origin, "level", v1)
            try put(origin, "level", PatchTests.revise(v1, inserted: 1_000, seed: 23), query: "&channel=beta")
            origin.server.waitForPatches()
            let beta = try Self.manifest(origin.port, app: origin.app, channel: "beta", keys: keys)
            let patch = try #require(beta[pack: "level"]?.patches?.first)
            #expect(beta.version == 3)
            // Swept as garbage collection does once no channel serves the release (here, by hand).
            FileSystem.remove(origin.data.path + "/blobs/\(patch.sha256.prefix(2))/\(patch.sha256)")
            #expect(try ChannelBindingTests.promote(origin, "production", to: 3) == 201)
            let promoted = try Self.manifest(origin.port, app: origin.app, keys: keys)
            #expect(promoted.version == 3 && promoted[pack: "level"]?.patches == nil, "\(promoted.packs)")
            for pack in promoted.packs {
                for url in [pack.url] + (pack.patches ?? []).map(\.url) { #expect(try Self.status(origin.port, url) == 200, "\(url)") }
            }
            origin.server.waitForPatches()
            let patched = try Self.manifest(origin.port, app: origin.app, keys: keys)
            let remade = try #require(patched[pack: "level"]?.patches?.first, "production's live release gets its own patch")
            #expect(patched.version == 4 && remade.fromRevision == 1)
            #expect(try Self.status(origin.port, remade.url) == 200)
        }
    }

    @Test("--base stays meaningful across a patch release: the release a publisher's last publish printed is accepted after the origin added patches; another publisher's content is still refused")
    func baseAcrossPatchRelease() async throws {
        try await withServer(configure: { $0.patchDepth = 2 }) { origin in
            let v1 = PatchTests.random(2 << 20, seed: 31)
            #expect(try put(origin, "level", v1, query: "&base=0").status == 201)
            let v2 = PatchTests.revise(v1, inserted: 1_000, seed: 33)
            let second = try put(origin, "level", v2, query: "&base=1")
            #expect(second.bodyText.contains("\"release\" : 2,"), "\(second.bodyText)")
            origin.server.waitForPatches()
            let keys = try origin.clientConfiguration().trustedKeys()
            #expect(try Self.manifest(origin.port, app: origin.app, keys: keys).version == 3, "the origin released patches as release 3")
            // The publisher's next publish names release 2, what it was told: accepted.
            let third = try put(origin, "level", PatchTests.revise(v2, inserted: 1_000, seed: 35), query: "&base=2")
            #expect(third.bodyText.contains("\"release\" : 4,"), "\(third.bodyText)")
            origin.server.waitForPatches()
            // Another publisher adds a pack; a publish still based on release 4 is refused.
            #expect(try put(origin, "other", bytes(1000, seed: 1)).status == 201)
            let head = "PUT /v1/apps/\(origin.app)/packs/level?release=true&base=4 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(origin.token)\r\nContent-Length: 10\r\nConnection: close\r\n\r\n"
            let refused = try #require(try RawHTTP.send(port: origin.port, head, body: Array(repeating: 9, count: 10)).first)
            #expect(refused.status == 409 && refused.bodyText.contains("another publish came first"), "\(refused.status) \(refused.bodyText)")
        }
    }
}
