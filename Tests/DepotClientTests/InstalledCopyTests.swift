import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// What the state says is installed is what is on disk: a copy purged in part, truncated, or
/// switched in by an install killed before it recorded it is planned again (whole, never
/// patched); a patch whose base cannot be read is an integrity failure; a patch already
/// scheduled is not scheduled again.
@Suite("Installed copies as the planner sees them")
struct InstalledCopyTests {
    static let ring = try! KeyRing(["k1": [UInt8](repeating: 7, count: 32)])

    /// `files` zipped (stored) at `path`.
    static func zip(_ files: [String: [UInt8]], to path: String, work: String) throws {
        let folder = work + "/zip-src-" + FileSystem.lastComponent(of: path)
        for (name, bytes) in files {
            try FileSystem.createDirectory(FileSystem.directory(of: folder + "/" + name))
            try FileSystem.writeAtomically(bytes, to: folder + "/" + name)
        }
        let script = "import os, sys, zipfile\nz = zipfile.ZipFile(sys.argv[2], 'w')\nfor root, _, names in os.walk(sys.argv[1]):\n    for n in sorted(names):\n        p = os.path.join(root, n); z.write(p, os.path.relpath(p, sys.argv[1]))\nz.close()"
        let result = try Processes.run("/usr/bin/env", ["python3", "-c", script, folder, path])
        #expect(result.status == 0, "\(result.stderr)")
    }

    /// A container of `plaintext` and the entry that lists it.
    static func pack(_ id: String, revision: Int, plaintext: [UInt8], zip: Bool, at path: String, patches: [PackPatch]? = nil) throws -> PackEntry {
        let container = try PackEncryptor.encrypt(plaintext, header: PackHeader(keyID: "k1", segmentSize: 4096), masterKey: ring["k1"]!)
        try FileSystem.writeAtomically(container, to: path)
        if zip { try FileSystem.writeAtomically(plaintext, to: path + ".zip-plain") }
        return PackEntry(
            id: id, revision: revision, url: "https://cdn.example/\(id)", size: Int64(container.count), sha256: Hex.encode(SHA256Hasher.hash(container)),
            installSize: zip ? try ZipPack.inspect(path + ".zip-plain").installSize : Int64(plaintext.count), plaintextSHA256: Hex.encode(SHA256Hasher.hash(plaintext)), policy: .prefetch, tags: [], keyID: "k1",
            contentType: zip ? ZipPack.contentType : "application/octet-stream", patches: patches
        )
    }

    static func bytes(_ count: Int, _ seed: UInt8) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) } }

    @Test("A tree missing one file, a file truncated in place, a copy another install switched in: each is planned again, whole")
    func partial() throws {
        let work = TemporaryDirectory("depot-copies")
        defer { work.remove() }
        let store = try StateStore(destination: work.path + "/group")
        try Self.zip(["a.bin": Self.bytes(5000, 1), "sub/b.bin": Self.bytes(7000, 2), "sub/empty": []], to: work.path + "/v1.zip", work: work.path)
        let zipEntry = try Self.pack("levels", revision: 1, plaintext: FileSystem.readFile(work.path + "/v1.zip"), zip: true, at: work.path + "/levels.pack")
        let fileEntry = try Self.pack("movie", revision: 1, plaintext: Self.bytes(9000, 3), zip: false, at: work.path + "/movie.pack")
        let installer = Installer(keyRing: Self.ring)
        for entry in [zipEntry, fileEntry] {
            try installer.install(entry, from: work.path + "/\(entry.id).pack", to: store.packPath(entry.id))
            let copy = try #require(InstalledCopy.measure(store.packPath(entry.id)))
            try store.withExclusiveControl(app: "a") { $0.packs[entry.id] = InstalledState.Pack(entry, installedAt: Date(), copy: copy) }
        }
        #expect(InstalledCopy.measure(store.packPath("levels"))?.files == 3)
        // Each next revision offers a patch from the installed one: a whole copy takes it.
        func next(_ entry: PackEntry) -> PackEntry {
            var next = entry
            next.revision = 2
            next.sha256 = String(repeating: "e", count: 64)
            next.patches = [PackPatch(fromRevision: 1, fromPlaintextSHA256: entry.plaintextSHA256, url: "https://cdn.example/p", size: 10, sha256: String(repeating: "d", count: 64))]
            return next
        }
        func plan(_ packs: [PackEntry]) throws -> Plan {
            let manifest = Manifest(app: "a", version: 1, publishedAt: Date(), expiresAt: Date() + 60, packs: packs)
            return Planner.plan(manifest: manifest, state: try store.read(app: "a"), request: Planner.Request(kind: .periodic), installedCopyIsWhole: store.isWhole)
        }
        #expect(try plan([zipEntry, fileEntry]).unchanged == ["levels", "movie"])
        #expect(try plan([next(zipEntry), next(fileEntry)]).downloads.allSatisfy { $0.patch != nil })

        // The system purges one file of the tree (even the empty one), and truncates the file pack.
        try FileManager.default.removeItem(atPath: store.packPath("levels") + "/sub/empty")
        let truncated = try FileDescriptor(path: store.packPath("movie"), flags: O_WRONLY)
        #expect(ftruncate(truncated.rawValue, 100) == 0)
        try truncated.close()
        var planned = try plan([zipEntry, fileEntry])
        #expect(planned.unchanged.isEmpty && planned.downloads.map(\.entry.id) == ["levels", "movie"])
        planned = try plan([next(zipEntry), next(fileEntry)])
        #expect(planned.downloads.count == 2 && planned.downloads.allSatisfy { $0.patch == nil }, "a damaged copy is no patch's base")

        // Installed again: whole. Then another install's copy, switched in but never recorded
        // (the process killed between the two): same files and sizes, another inode.
        for entry in [zipEntry, fileEntry] {
            try installer.install(entry, from: work.path + "/\(entry.id).pack", to: store.packPath(entry.id))
            let copy = try #require(InstalledCopy.measure(store.packPath(entry.id)))
            try store.withExclusiveControl(app: "a") { $0.packs[entry.id] = InstalledState.Pack(entry, installedAt: Date(), copy: copy) }
        }
        #expect(try plan([zipEntry, fileEntry]).unchanged == ["levels", "movie"])
        try installer.install(fileEntry, from: work.path + "/movie.pack", to: store.packPath("movie"))
        #expect(try plan([zipEntry, fileEntry]).downloads.map(\.entry.id) == ["movie"])
    }

    @Test("A tree patch whose base file is gone fails as an integrity error (the whole pack comes next), and leaves the installed tree")
    func treePatchBase() throws {
        let work = TemporaryDirectory("depot-copies-patch")
        defer { work.remove() }
        let store = try StateStore(destination: work.path + "/group")
        let v1: [String: [UInt8]] = ["a.bin": Self.bytes(50_000, 1), "b.bin": Self.bytes(30_000, 2)]
        var v2 = v1
        v2["a.bin"]![100] ^= 0xff
        try Self.zip(v1, to: work.path + "/v1.zip", work: work.path)
        try Self.zip(v2, to: work.path + "/v2.zip", work: work.path)
        let one = try Self.pack("levels", revision: 1, plaintext: FileSystem.readFile(work.path + "/v1.zip"), zip: true, at: work.path + "/v1.pack")
        let installer = Installer(keyRing: Self.ring)
        try installer.install(one, from: work.path + "/v1.pack", to: store.packPath("levels"))
        try ZipPack.extract(work.path + "/v2.zip", into: work.path + "/v2-tree")
        try TreePatch.make(base: store.packPath("levels"), target: work.path + "/v2-tree", to: work.path + "/tree.patch")
        let patchEntry = try Self.pack("levels-patch", revision: 2, plaintext: FileSystem.readFile(work.path + "/tree.patch"), zip: false, at: work.path + "/patch.pack")
        let patch = PackPatch(fromRevision: 1, fromPlaintextSHA256: one.plaintextSHA256, url: "https://cdn.example/p", size: patchEntry.size, sha256: patchEntry.sha256)
        let two = try Self.pack("levels", revision: 2, plaintext: FileSystem.readFile(work.path + "/v2.zip"), zip: true, at: work.path + "/v2.pack", patches: [patch])

        try FileManager.default.removeItem(atPath: store.packPath("levels") + "/b.bin")
        #expect {
            try installer.installPatch(two, patch: patch, from: work.path + "/patch.pack", to: store.packPath("levels"))
        } throws: { ($0 as? ClientError)?.kind == .integrity }
        #expect(FileSystem.contents(of: store.packPath("levels")) == ["a.bin"])
        #expect(FileSystem.contents(of: store.packs) == ["levels"], "nothing staged is left")
        // With the base whole again, the same patch applies.
        try FileSystem.writeAtomically(v1["b.bin"]!, to: store.packPath("levels") + "/b.bin")
        try installer.installPatch(two, patch: patch, from: work.path + "/patch.pack", to: store.packPath("levels"))
        #expect(try FileSystem.readFile(store.packPath("levels") + "/a.bin") == v2["a.bin"]!)
    }

    @Test("A copy about to be switched in with other than the manifest's install size is refused; nothing is installed")
    func installSize() throws {
        let work = TemporaryDirectory("depot-copies-size")
        defer { work.remove() }
        var entry = try Self.pack("movie", revision: 1, plaintext: Self.bytes(9000, 3), zip: false, at: work.path + "/movie.pack")
        entry.installSize = 8999
        #expect { try Installer(keyRing: Self.ring).install(entry, from: work.path + "/movie.pack", to: work.path + "/movie") } throws: {
            ($0 as? ClientError)?.kind == .integrity
        }
        #expect(!FileSystem.exists(work.path + "/movie") && FileSystem.contents(of: work.path).allSatisfy { !$0.hasPrefix(".tmp-") })
    }

    @Test("A download of the revision the system already has (scheduled or delivered, whole or a patch) is not scheduled again, nor charged")
    func scheduledPatch() {
        var entry = PackEntry(
            id: "movie", revision: 3, url: "https://cdn.example/m", size: 1000, sha256: String(repeating: "a", count: 64), installSize: 900,
            plaintextSHA256: String(repeating: "b", count: 64), policy: .prefetch, tags: [], keyID: "k1", contentType: "application/octet-stream"
        )
        entry.patches = [PackPatch(fromRevision: 2, fromPlaintextSHA256: String(repeating: "c", count: 64), url: "https://cdn.example/p", size: 40, sha256: String(repeating: "d", count: 64))]
        var state = InstalledState(app: "a")
        state.packs["movie"] = InstalledState.Pack(revision: 2, sha256: String(repeating: "9", count: 64), plaintextSHA256: String(repeating: "c", count: 64), installSize: 900, installedAt: Date())
        let manifest = Manifest(app: "a", version: 1, publishedAt: Date(), expiresAt: Date() + 60, packs: [entry])
        func plan(_ scheduled: Set<String>) -> Plan {
            Planner.plan(manifest: manifest, state: state, request: Planner.Request(kind: .periodic, allowance: 40, scheduled: scheduled))
        }
        #expect(plan([]).downloads.map(\.identifier) == ["movie@3-from-2"])
        for scheduled in ["movie@3-from-2", "movie@3"] {
            let again = plan([scheduled])
            #expect(again.downloads.isEmpty && again.deferred.isEmpty && again.alreadyScheduled == [scheduled], "\(scheduled)")
        }
        // Any download of that revision stands for it (a patch from another base, dropped at
        // install if its base is not there, after which the next plan asks for the whole pack).
        #expect(plan(["movie@3-from-1"]).alreadyScheduled == ["movie@3-from-1"])
        #expect(plan(["movie@2", "level@3"]).downloads.map(\.identifier) == ["movie@3-from-2"])
        // A pack id may itself hold "-from-": the revision is read after the "@".
        entry.id = "cut-from-1"
        let odd = Manifest(app: "a", version: 1, publishedAt: Date(), expiresAt: Date() + 60, packs: [entry])
        state.packs["cut-from-1"] = state.packs["movie"]
        let oddPlan = Planner.plan(manifest: odd, state: state, request: Planner.Request(kind: .periodic, scheduled: ["cut-from-1@3-from-1"]))
        #expect(oddPlan.downloads.isEmpty && oddPlan.alreadyScheduled == ["cut-from-1@3-from-1"])
    }
}
