import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Incremental backups (issue 63): `depot backup --previous EARLIER` hard-links the blobs the
/// earlier backup holds instead of copying them, so a nightly backup costs what changed; each
/// backup stays a whole folder a restore uses alone. A blob of the earlier backup that is not
/// what a copy would make (another size, a link, another owner's file) is copied instead; so is a
/// release record whose bytes differ from the earlier backup's (records are linked only when equal).
@Suite("Backups: incremental", .serialized)
struct IncrementalBackupTests {
    /// A data folder holding `count` blobs of a few hundred bytes, stored as the origin stores them.
    static func addBlobs(_ data: String, from first: Int, count: Int) throws {
        let store = FileBlobStore(folder: DataFolder(data))
        for index in first..<(first + count) {
            let bytes = Array("blob \(index) ".utf8) + [UInt8](repeating: UInt8(index % 251), count: 200 + index % 300)
            let path = data + "/uploads/blob-\(index)"
            try FileSystem.writeAtomically(bytes, to: path)
            try store.put(temporaryFile: path, sha256: Hex.encode(SHA256Hasher.hash(bytes)))
        }
    }

    static func inode(_ path: String) -> UInt64? {
        var info = stat()
        return lstat(path, &info) == 0 ? UInt64(info.st_ino) : nil
    }

    @Test("A backup with --previous links the 400 blobs it holds and copies the 5 new ones; it restores alone once the earlier backup is removed, every blob byte-identical; a tampered or linked blob in the earlier backup is copied, not linked")
    func linksWhatTheEarlierBackupHolds() throws {
        let work = TemporaryDirectory("depot-incremental")
        defer { work.remove() }
        let data = work.path + "/data"
        try DataFolder(data).prepare()
        try Self.addBlobs(data, from: 0, count: 400)
        let full = try Processes.run(Processes.depotBinary, ["backup", "--data", data, work.path + "/monday"])
        #expect(full.status == 0, "\(full.stderr)")
        try Self.addBlobs(data, from: 400, count: 5)
        let blobs = FileBlobStore(folder: DataFolder(data)).enumerate().map(\.sha256).sorted()
        #expect(blobs.count == 405)
        // The earlier backup's copy of one blob altered (another size), another replaced by a
        // link to a file outside it: neither may be linked into the new backup.
        let tampered = DataFolder(work.path + "/monday").blob(blobs[0])
        try FileSystem.writeAtomically(Array("not the blob".utf8), to: tampered)
        let planted = DataFolder(work.path + "/monday").blob(blobs[1])
        try FileManager.default.removeItem(atPath: planted)
        try FileSystem.writeAtomically(Array("outside".utf8), to: work.path + "/outside")
        try FileManager.default.createSymbolicLink(atPath: planted, withDestinationPath: work.path + "/outside")

        let incremental = try Processes.run(Processes.depotBinary, ["backup", "--data", data, "--previous", work.path + "/monday", work.path + "/tuesday"])
        #expect(incremental.status == 0, "\(incremental.stderr)")
        #expect(incremental.stdout.contains("398 blobs"), "\(incremental.stdout)")
        let monday = DataFolder(work.path + "/monday"), tuesday = DataFolder(work.path + "/tuesday")
        var linked = 0
        for blob in blobs where Self.inode(tuesday.blob(blob)) == Self.inode(monday.blob(blob)) { linked += 1 }
        #expect(linked == 398, "\(linked) blobs share the earlier backup's file")
        #expect(Self.inode(tuesday.blob(blobs[0])) != Self.inode(tampered))
        #expect(try FileSystem.readFile(tuesday.blob(blobs[1])) == FileSystem.readFile(DataFolder(data).blob(blobs[1])))

        // The earlier backup gone, the later one restores alone.
        try FileManager.default.removeItem(atPath: work.path + "/monday")
        let restored = work.path + "/restored"
        let restore = try Processes.run(Processes.depotBinary, ["restore", "--data", restored, work.path + "/tuesday"])
        #expect(restore.status == 0, "\(restore.stderr)")
        for blob in blobs {
            let bytes = try FileSystem.readFile(DataFolder(restored).blob(blob))
            #expect(Hex.encode(SHA256Hasher.hash(bytes)) == blob)
        }
        // Not a backup: refused before anything is written.
        let wrong = try Processes.run(Processes.depotBinary, ["backup", "--data", data, "--previous", work.path + "/outside", work.path + "/wednesday"])
        #expect(wrong.status != 0 && wrong.stderr.contains("is not a backup"), "\(wrong.stderr)")
        #expect(!FileSystem.exists(work.path + "/wednesday"))
    }

    @Test("Release records the earlier backup holds with the same bytes are linked, not copied; one altered there (same size) or missing there is copied; the later backup restores alone with every record byte-identical")
    func linksUnchangedRecords() throws {
        let work = TemporaryDirectory("depot-incremental-records")
        defer { work.remove() }
        let data = work.path + "/data"
        try HistoryFixture.build(data: data, shape: HistoryFixture.Shape(releases: 12, window: 2, windowPacks: 5, channels: 2, bigManifestPacks: 3))
        let app = HistoryFixture.historyApps[0]
        let full = try Processes.run(Processes.depotBinary, ["backup", "--data", data, work.path + "/monday"])
        #expect(full.status == 0, "\(full.stderr)")
        let monday = DataFolder(work.path + "/monday"), tuesday = DataFolder(work.path + "/tuesday"), source = DataFolder(data)
        // In the earlier backup: release 3 altered in place (its size kept), release 4 gone.
        var altered = try FileSystem.readFile(monday.release(app, 3))
        altered[altered.count / 2] ^= 0x20
        try FileManager.default.removeItem(atPath: monday.release(app, 3))
        try FileSystem.writeAtomically(altered, to: monday.release(app, 3))
        try FileManager.default.removeItem(atPath: monday.release(app, 4))

        let incremental = try Processes.run(Processes.depotBinary, ["backup", "--data", data, "--previous", work.path + "/monday", work.path + "/tuesday"])
        #expect(incremental.status == 0, "\(incremental.stderr)")
        let records = FileSystem.contents(of: source.releases(app)).filter { $0.hasSuffix(".json") }.compactMap { Int($0.prefix(6)) }.sorted()
        #expect(records.count == 12)
        for release in records {
            let shared = Self.inode(tuesday.release(app, release)) == Self.inode(monday.release(app, release))
            #expect(shared == (release != 3 && release != 4), "release \(release): linked \(shared)")
            #expect(try FileSystem.readFile(tuesday.release(app, release)) == FileSystem.readFile(source.release(app, release)))
        }
        #expect(incremental.stdout.contains(" release records ("), "\(incremental.stdout)")

        // The earlier backup gone, the later one restores alone.
        try FileManager.default.removeItem(atPath: work.path + "/monday")
        let restored = work.path + "/restored"
        let restore = try Processes.run(Processes.depotBinary, ["restore", "--data", restored, "--accept-missing", work.path + "/tuesday"])
        #expect(restore.status == 0, "\(restore.stderr)")
        for release in records {
            #expect(try FileSystem.readFile(DataFolder(restored).release(app, release)) == FileSystem.readFile(source.release(app, release)))
        }
    }

    @Test("Release records are the origin's numbered files: releases, roots, signed copies and statements, six digits or more as the origin writes them (a restored origin's are ten)")
    func recordNames() {
        for record in [
            "apps/a/releases/000012.json", "apps/a/releases/1795929196.json", "apps/a/roots/000002.json",
            "apps/a/signed/beta/000040.json", "apps/a/statements/production/1795929197.json",
        ] { #expect(TreeCopier.isRecord(record), "\(record)") }
        for other in [
            "apps/a/releases/12.json", "apps/a/releases/0000012.json", "apps/a/releases/00001x.json", "apps/a/releases/٠٠٠٠١٢.json",
            "apps/a/releases/000012.json.tmp", "apps/a/catalog", "apps/a/channels/beta", "apps/a/signed/000040.json",
            "apps/a/statements/production/x/000040.json", "apps/a/rollouts/production.json", "blobs/ab/000012.json", "apps/a/head",
        ] { #expect(!TreeCopier.isRecord(other), "\(other)") }
    }
}
