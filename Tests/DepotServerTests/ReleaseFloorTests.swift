import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// A restored folder's release floor (`release-floor`): what it raises and what it leaves alone.
@Suite("The release floor of a restored data folder")
struct ReleaseFloorTests {
    static func pack(_ id: String, revision: Int, byte: Character) -> PackEntry {
        PackEntry(
            id: id, revision: revision, url: "http://x/b", size: 100, sha256: String(repeating: byte, count: 64), installSize: 90,
            plaintextSHA256: String(repeating: "b", count: 64), policy: .onDemand, tags: [], keyID: "k", contentType: "application/octet-stream"
        )
    }

    @Test("Changed and new packs get at least the floor; unchanged ones keep their revision; rollout candidates from before the restore too")
    func revisions() throws {
        let data = TemporaryDirectory("depot-floor")
        defer { data.remove() }
        let folder = DataFolder(data.path)
        try folder.prepare()
        let releases = ReleaseStore(folder: folder, apps: AppStore(folder: folder), manifestLifetime: 86_400)
        let floor = 1_795_000_000
        let base = [Self.pack("a", revision: 3, byte: "a"), Self.pack("b", revision: 5, byte: "b")]
        let edited = [Self.pack("a", revision: 3, byte: "a"), Self.pack("b", revision: 5, byte: "c"), Self.pack("n", revision: 1, byte: "d")]
        let raised = try releases.raisingRevisions(edited, over: base, app: "com.example.x", floor: floor)
        #expect(raised.map(\.revision) == [3, floor, floor])
        #expect(try releases.raisingRevisions(edited, over: base, app: "com.example.x").map(\.revision) == [3, 5, 1], "no floor: as before")

        // A release from before the restore offered as a rollout: its changed pack goes above the floor.
        let live = Manifest(app: "com.example.x", version: floor, publishedAt: Date(), expiresAt: Date(), packs: [Self.pack("a", revision: 3, byte: "a")])
        let old = Manifest(app: "com.example.x", version: 2, publishedAt: Date(), expiresAt: Date(), packs: [Self.pack("a", revision: 2, byte: "z")])
        let candidate = Rollouts.candidate(old, over: live, release: 2, fraction: 0.1, highest: ["a": floor + 4], floor: floor, isMissing: { _ in false })
        #expect(candidate.packs.map(\.revision) == [floor + 5])
        let before = Rollouts.candidate(old, over: live, release: 2, fraction: 0.1, highest: ["a": 3], floor: floor, isMissing: { _ in false })
        #expect(before.packs.map(\.revision) == [floor])
    }

    @Test("A restore's floor: the clock, above the folder's highest release and the previous floor; 15-digit release numbers parse, 16 do not")
    func restoreFloor() throws {
        let data = TemporaryDirectory("depot-floor")
        defer { data.remove() }
        let folder = DataFolder(data.path)
        try folder.prepare()
        try FileSystem.createDirectory(folder.releases("com.example.x"))
        try FileSystem.writeAtomically(Array("7\n".utf8), to: folder.head("com.example.x"))
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        #expect(try ReleaseFloor.raiseForRestore(folder, now: now) == 1_700_000_000)
        #expect(ReleaseFloor.read(folder) == 1_700_000_000)
        #expect(try ReleaseFloor.raiseForRestore(folder, now: now) == 1_700_000_001, "a second restore in the same second: the previous floor + 1")
        try FileSystem.writeAtomically(Array("1800000000\n".utf8), to: folder.head("com.example.x"))
        #expect(try ReleaseFloor.raiseForRestore(folder, now: now) == 1_800_000_001, "a clock behind the folder's numbers")
        #expect(ReleaseNumber.parse("999999999999999") == 999_999_999_999_999)
        #expect(ReleaseNumber.parse("9999999999999999") == nil)
    }
}
