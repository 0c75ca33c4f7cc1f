import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// On Apple platforms `F_FULLFSYNC` flushes everything the drive holds, whatever file it is
/// called on, and costs about as much for one file as for all: an install makes each file and
/// folder durable with ordered syncs and flushes the drive once, when the staged copy is whole.
/// Counted through the sync helper's seam (`SyncTally`), which counts on Linux what each call
/// would be on a device.
@Suite("One drive flush per install")
struct InstallFlushTests {
    static let ring = InstalledCopyTests.ring

    @Test("A 200-file zip pack installs with exactly one full flush (and an ordered sync per file); its patch too, each file synced once")
    func zipPack() throws {
        let work = TemporaryDirectory("depot-flushes")
        defer { work.remove() }
        let store = try StateStore(destination: work.path + "/group")
        var v1: [String: [UInt8]] = [:]
        for index in 0..<200 { v1["level\(index / 50)/file\(index).bin"] = InstalledCopyTests.bytes(600 + index, UInt8(index % 251)) }
        try InstalledCopyTests.zip(v1, to: work.path + "/v1.zip", work: work.path)
        let one = try InstalledCopyTests.pack("levels", revision: 1, plaintext: FileSystem.readFile(work.path + "/v1.zip"), zip: true, at: work.path + "/v1.pack")
        let installer = Installer(keyRing: Self.ring)

        let (_, install) = try SyncTally.measure { try installer.install(one, from: work.path + "/v1.pack", to: store.packPath("levels")) }
        #expect(install[.full] == 1, "one F_FULLFSYNC for the whole install, not one per file: \(install[.full])")
        #expect(install[.ordered] >= 200, "every file is still synced (ordered): \(install[.ordered])")
        #expect(InstalledCopy.measure(store.packPath("levels"))?.files == 200)

        // A patch of the tree: every file written once and synced once, one flush at its root.
        var v2 = v1
        for index in stride(from: 0, to: 200, by: 7) { v2["level\(index / 50)/file\(index).bin"]![3] ^= 0xff }
        try InstalledCopyTests.zip(v2, to: work.path + "/v2.zip", work: work.path)
        try ZipPack.extract(work.path + "/v2.zip", into: work.path + "/v2-tree")
        try TreePatch.make(base: store.packPath("levels"), target: work.path + "/v2-tree", to: work.path + "/tree.patch")
        let patchEntry = try InstalledCopyTests.pack("levels-patch", revision: 2, plaintext: FileSystem.readFile(work.path + "/tree.patch"), zip: false, at: work.path + "/patch.pack")
        let patch = PackPatch(fromRevision: 1, fromPlaintextSHA256: one.plaintextSHA256, url: "https://cdn.example/p", size: patchEntry.size, sha256: patchEntry.sha256)
        let two = try InstalledCopyTests.pack("levels", revision: 2, plaintext: FileSystem.readFile(work.path + "/v2.zip"), zip: true, at: work.path + "/v2.pack", patches: [patch])
        let (_, patched) = try SyncTally.measure { try installer.installPatch(two, patch: patch, from: work.path + "/patch.pack", to: store.packPath("levels")) }
        #expect(patched[.full] == 1, "one F_FULLFSYNC for the patched tree: \(patched[.full])")
        #expect(patched[.ordered] < 200 + 20, "each file synced once, not twice: \(patched[.ordered])")
        #expect(try FileSystem.readFile(store.packPath("levels") + "/level0/file0.bin") == v2["level0/file0.bin"]!)
    }

    @Test("A single-file pack installs with exactly one full flush")
    func filePack() throws {
        let work = TemporaryDirectory("depot-flushes-file")
        defer { work.remove() }
        let store = try StateStore(destination: work.path + "/group")
        let entry = try InstalledCopyTests.pack("movie", revision: 1, plaintext: InstalledCopyTests.bytes(90_000, 3), zip: false, at: work.path + "/movie.pack")
        let installer = Installer(keyRing: Self.ring)
        // The second install switches over an installed copy (the exchange path).
        for _ in 0..<2 {
            let (_, tally) = try SyncTally.measure { try installer.install(entry, from: work.path + "/movie.pack", to: store.packPath("movie")) }
            #expect(tally[.full] == 1, "\(tally[.full]) full flushes")
        }
        #expect(try FileSystem.readFile(store.packPath("movie")) == InstalledCopyTests.bytes(90_000, 3))
    }
}
