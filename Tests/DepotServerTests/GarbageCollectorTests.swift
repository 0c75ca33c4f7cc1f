import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
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
        let collector = GarbageCollector(releases: releases, blobs: FileBlobStore(folder: folder), inFlight: { [name] })
        #expect(try collector.collect(retention: 0, grace: 0, now: Date().addingTimeInterval(7200)).blobs.isEmpty)
        #expect(FileBlobStore(folder: folder).contains(name))
    }
}
