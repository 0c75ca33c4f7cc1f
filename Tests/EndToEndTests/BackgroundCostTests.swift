import DepotCore
import DepotHTTP
@testable import DepotServer
import DepotTestSupport
import Foundation
import Logging
import Synchronization
import Testing

/// What the origin does by itself does not grow with history (issue 63): counted, not timed, as
/// `CostTests` counts requests. Two data folders with the same live set (two apps with three
/// channels each and a live release of 35 packs, a 100-pack app) and 30 or 3,000 releases of
/// history each, dated half an hour apart; on each, an origin with patches on publishes a real
/// pack twice and stops; then a second origin is started on it (the restart measured), a third
/// revision of the pack is published and patched, and a sweep is run. The release files read
/// (``ReleaseStore/releaseFilesRead``: every envelope the process decodes) by each step must be
/// the same at both sizes (within a read per channel: at 1× a channel's release can fall within
/// the retention), and bounded by the live set: start-up (the catalog, the patch maker's kept state, the first
/// maintenance pass), a publish and its patches, a sweep (the releases made since the last pass).
/// Before issue 63 each patch-maker turn read every release of the app, start-up every release
/// file, and each sweep every release file.
@Suite("Cost: background work", .serialized, .enabled(if: HeavyTests.enabled, "run with the heavy suites, DEPOT_HEAVY_TESTS=1"))
struct BackgroundCostTests {
    struct Figures: Equatable, CustomStringConvertible {
        var start = 0
        var publish = 0
        var sweep = 0
        var description: String { "start-up \(start), a publish and its patches \(publish), a sweep \(sweep) release files read" }
    }

    static func shape(_ factor: Int) -> HistoryFixture.Shape {
        HistoryFixture.Shape(releases: 30 * factor, window: 3, windowPacks: 35, channels: 3, bigManifestPacks: 100)
    }

    static func origin(_ data: String) throws -> DepotServer {
        var configuration = OriginConfiguration(
            dataPath: data, http: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 2), logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        )
        configuration.patchDepth = 3
        configuration.publicURL = HistoryFixture.publicURL
        // Ten releases of each history app (half an hour apart) fall within it.
        configuration.blobRetention = 5.25 * 3600
        return try DepotServer(configuration: configuration)
    }

    /// Publishes a new revision of pack `real` (64 KiB, one region changed per revision) and
    /// releases it.
    static func publish(_ server: DepotServer, token: String, revision: Int) throws {
        var bytes = [UInt8](repeating: 0, count: 64 << 10)
        for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: index &* 31 &+ index >> 9) }
        for index in (revision * 4096)..<(revision * 4096 + 512) { bytes[index] = UInt8(truncatingIfNeeded: revision) }
        let app = HistoryFixture.historyApps[0]
        let answer = try RawHTTP.send(
            port: server.port, "PUT /v1/apps/\(app)/packs/real?release=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nContent-Length: \(bytes.count)\r\nConnection: close\r\n\r\n",
            body: bytes, timeout: RawHTTP.changeWait
        )
        #expect(answer.first?.status == 201, "publish: \(answer.first?.status ?? 0) \(answer.first?.bodyText ?? "")")
    }

    /// Waits for the origin's first maintenance pass and its patches.
    static func settle(_ server: DepotServer) {
        #expect(Eventually.wait { server.maintenancePasses >= 1 }, "the first maintenance pass never ended")
        server.waitForPatches()
    }

    static func measure(_ factor: Int) throws -> Figures {
        let work = TemporaryDirectory("depot-background-cost")
        defer { work.remove() }
        let data = work.path + "/data"
        try HistoryFixture.build(data: data, shape: shape(factor), spacing: 1800)
        let app = HistoryFixture.historyApps[0]
        let token = try TokenStore(folder: DataFolder(data)).create(app: app, role: .publisher).token
        do {
            let first = try origin(data)
            defer { first.stop() }
            settle(first)
            try publish(first, token: token, revision: 1)
            try publish(first, token: token, revision: 2)
            first.waitForPatches()
        }
        var figures = Figures()
        let before = ReleaseStore.releaseFilesRead.load(ordering: .relaxed)
        let second = try origin(data)
        defer { second.stop() }
        settle(second)
        let started = ReleaseStore.releaseFilesRead.load(ordering: .relaxed)
        figures.start = started - before
        try publish(second, token: token, revision: 3)
        second.waitForPatches()
        let published = ReleaseStore.releaseFilesRead.load(ordering: .relaxed)
        figures.publish = published - started
        // The patches were made and released: revision 3 names patches from revisions 2 and 1.
        let manifest = try RawHTTP.send(port: second.port, "GET /v1/apps/\(app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        let payload = try Envelope.decode(manifest?.body ?? []).payload
        let real = try Manifest.decode(Array(Data(base64Encoded: payload) ?? Data()))[pack: "real"]
        #expect(real?.revision == 3 && real?.patches?.map(\.fromRevision).sorted() == [1, 2], "pack real: \(String(describing: real))")
        _ = try second.collectGarbage(retention: 5.25 * 3600, grace: 3600, dryRun: true)
        figures.sweep = ReleaseStore.releaseFilesRead.load(ordering: .relaxed) - published
        return figures
    }

    @Test("Start-up, a publish with its patches, and a sweep read as many release files with 3,000 releases of history as with 30")
    func backgroundWorkIsBoundedByWhatIsLive() throws {
        let small = try Self.measure(1)
        let large = try Self.measure(100)
        print("background work at 1×: \(small); at 100×: \(large)")
        // The same at both sizes, but for where the channels fall against the retention (at 1× a
        // channel's release can be one of the last ten): at most one read per channel (8) apart.
        #expect(abs(small.start - large.start) <= 8 && small.publish == large.publish && abs(small.sweep - large.sweep) <= 8, "1×: \(small); 100×: \(large)")
        // Bounded by the live set: a few reads per channel (8 channels in all); a sweep reads the
        // releases made since the last pass (the publish and the release of its patches: the
        // record of the retention's blobs, ``RetainedBlobs``), not the retention's ten again.
        #expect(large.start <= 64 && large.publish <= 10 && large.sweep <= 4, "\(large)")
    }

    @Test("Start-up reads no release file when the catalog holds them all; without a catalog it reads each once and writes the catalog, which the next start reads instead")
    func startUpReadsTheCatalog() throws {
        let work = TemporaryDirectory("depot-catalog")
        defer { work.remove() }
        let data = work.path + "/data"
        try HistoryFixture.build(data: data, shape: Self.shape(10), spacing: 1800)
        let folder = DataFolder(data)
        func indexReads() throws -> (reads: Int, index: ReleaseIndex) {
            let store = ReleaseStore(folder: folder, apps: AppStore(folder: folder), manifestLifetime: 90 * 86_400)
            let before = ReleaseStore.releaseFilesRead.load(ordering: .relaxed)
            let index = try store.index(HistoryFixture.historyApps[0])
            _ = try store.history.snapshot(HistoryFixture.historyApps[0])
            return (ReleaseStore.releaseFilesRead.load(ordering: .relaxed) - before, index)
        }
        let fromCatalog = try indexReads()
        #expect(fromCatalog.reads == 0)
        // An origin of an earlier version: no catalog. Each release read once, the catalog written.
        let catalog = folder.catalog(HistoryFixture.historyApps[0])
        try FileManager.default.removeItem(atPath: catalog)
        let rebuilt = try indexReads()
        #expect(rebuilt.reads == 300, "\(rebuilt.reads) release files read")
        #expect(rebuilt.index.highestRevisions == fromCatalog.index.highestRevisions && rebuilt.index.blobs == fromCatalog.index.blobs && rebuilt.index.lineage == fromCatalog.index.lineage)
        #expect(try indexReads().reads == 0)
        // A torn last line (a crash mid-append) costs that release's file, nothing else.
        let bytes = try FileSystem.readFile(catalog)
        try FileSystem.writeAtomically(Array(bytes.dropLast(40)), to: catalog)
        let torn = try indexReads()
        #expect(torn.reads == 1 && torn.index.blobs == fromCatalog.index.blobs, "\(torn.reads) read")
    }
}
