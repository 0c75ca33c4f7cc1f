import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Logging
import Testing

/// The collector's two guards for a blob between being stored and being staged: its time is
/// when it was stored, and a blob a publish is storing right now is left alone whatever its age.
@Suite("Garbage collection of blobs being published")
struct GarbageCollectorTests {
    static func storedBlob(_ folder: DataFolder, seed: UInt8) throws -> String {
        let bytes = [UInt8](repeating: seed, count: 1000)
        let (path, file) = try folder.scratchFile()
        try file.write(bytes)
        try file.close()
        // Written an hour ago, as a resumable upload's container can be.
        var times = [timespec(tv_sec: time(nil) - 3600, tv_nsec: 0), timespec(tv_sec: time(nil) - 3600, tv_nsec: 0)]
        utimensat(AT_FDCWD, path, &times, 0)
        let name = Hex.encode(SHA256Hasher.hash(bytes))
        try FileBlobStore(folder: folder).put(temporaryFile: path, sha256: name)
        return name
    }

    @Test("A blob's time is when it was stored, not when its bytes were written: a grace of a minute keeps it")
    func storedTime() throws {
        let data = TemporaryDirectory("depot-gc")
        defer { data.remove() }
        let folder = DataFolder(data.path)
        try folder.prepare()
        let name = try Self.storedBlob(folder, seed: 1)
        let listed = try #require(FileBlobStore(folder: folder).enumerate().first { $0.sha256 == name })
        #expect(abs(listed.modified.timeIntervalSinceNow) < 60)
        let releases = ReleaseStore(folder: folder, apps: AppStore(folder: folder), manifestLifetime: 86_400)
        let collector = GarbageCollector(releases: releases, blobs: FileBlobStore(folder: folder))
        #expect(try collector.collect(retention: 0, grace: 60).blobs.isEmpty)
        #expect(try collector.collect(retention: 0, grace: 0, now: Date().addingTimeInterval(1)).blobs == [name], "unneeded and past the grace: removed")
    }

    @Test("A blob a publish is storing and staging is never collected, whatever its age")
    func inFlight() throws {
        let data = TemporaryDirectory("depot-gc")
        defer { data.remove() }
        let folder = DataFolder(data.path)
        try folder.prepare()
        let name = try Self.storedBlob(folder, seed: 2)
        let releases = ReleaseStore(folder: folder, apps: AppStore(folder: folder), manifestLifetime: 86_400)
        let storing = BlobsInFlight()
        storing.begin(name)
        let collector = GarbageCollector(releases: releases, blobs: FileBlobStore(folder: folder), inFlight: storing)
        #expect(try collector.collect(retention: 0, grace: 0, now: Date().addingTimeInterval(7200)).blobs.isEmpty)
        #expect(FileBlobStore(folder: folder).contains(name))
    }
}

@Suite("Staging the same container twice")
struct RestagingTests {
    @Test("An upload finished again after a crash stages the very blob it staged before: the blob stays")
    func sameBlobTwice() throws {
        let data = TemporaryDirectory("depot-restage")
        defer { data.remove() }
        let folder = DataFolder(data.path)
        try folder.prepare()
        let apps = AppStore(folder: folder)
        try apps.create("com.example.game")
        let releases = ReleaseStore(folder: folder, apps: apps, manifestLifetime: 86_400)
        let blobs = FileBlobStore(folder: folder)
        let publisher = Publisher(
            folder: folder, apps: apps, blobs: blobs, releases: releases, urls: PublicURL(), metrics: OriginMetrics(),
            logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }, maximumPackSize: 1 << 30, settings: { apps.settings($0) }
        )
        let keys = try apps.packKeys("com.example.game")
        let plaintext = [UInt8](repeating: 5, count: 3000)
        let container = try PackEncryptor.encrypt(plaintext, header: PackHeader(keyID: keys.current), masterKey: keys.ring[keys.current]!)
        let summary = PackSummary(
            size: Int64(container.count), sha256: Hex.encode(SHA256Hasher.hash(container)), plaintextSize: 3000,
            plaintextSHA256: Hex.encode(SHA256Hasher.hash(plaintext)), keyID: keys.current
        )
        let parameters = try UploadParameters.parse(
            app: "com.example.game", pack: "level", policy: nil, tags: [], sha256: nil, checksumName: "", contentType: nil, release: false, base: nil,
            force: false, channel: nil
        )
        for _ in 0..<2 {
            let (path, file) = try folder.scratchFile()
            try file.write(container)
            try file.close()
            _ = try publisher.store(container: path, summary: summary, keys: keys.ring, for: parameters)
        }
        #expect(blobs.contains(summary.sha256), "the staged blob is still stored")
        #expect(try releases.staging("com.example.game").upserts["level"]?.sha256 == summary.sha256)
    }
}
