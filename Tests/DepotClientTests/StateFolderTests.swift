import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// The state (floors, install id, accepted envelopes) in a folder of its own, outside the packs'
/// `Library/Caches`: a purge of the packs leaves the anti-rollback floor where it was.
@Suite("The state outside the packs' folder")
struct StateFolderTests {
    @Test("A state kept under the packs by a former build moves to the state folder whole (floor, install id, envelopes); a purge of the packs then leaves it")
    func migrationAndPurge() throws {
        let work = TemporaryDirectory("depot-state-folder")
        defer { work.remove() }
        let packs = work.path + "/Library/Caches/assets"
        let stateFolder = work.path + "/Library/Application Support/depot"
        let app = "com.example.game"

        // A former build's layout: everything under the packs' folder.
        let old = try StateStore(destination: packs)
        let id = try old.installID(app: app)
        try old.withExclusiveControl(app: app) { $0.raiseFloor(channel: "production", to: 42) }
        try FileSystem.writeAtomically(Array("envelope".utf8), to: old.cachedEnvelope(channel: "production"))
        #expect(FileSystem.exists(packs + "/.depot/state.json"))

        // The same folder named another way is the same folder: nothing moves, nothing goes.
        let link = work.path + "/link-to-depot"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: packs + "/.depot")
        for same in [packs + "/.depot/", packs + "/./.depot", packs + "/packs/../.depot", link] {
            let kept = try StateStore(destination: packs, stateFolder: same)
            #expect(try kept.read(app: app).floor(channel: "production") == 42 && FileSystem.exists(packs + "/.depot/state.json"), "\(same)")
            #expect(try FileSystem.readFile(kept.cachedEnvelope(channel: "production")) == Array("envelope".utf8))
        }

        let store = try StateStore(destination: packs, stateFolder: stateFolder)
        #expect(store.cachedEnvelope(channel: "production") == stateFolder + "/manifest-production.json")
        #expect(try FileSystem.readFile(store.cachedEnvelope(channel: "production")) == Array("envelope".utf8))
        var state = try store.read(app: app)
        #expect(state.installID == id && state.floor(channel: "production") == 42)
        #expect(!FileSystem.exists(packs + "/.depot/state.json") && !FileSystem.exists(packs + "/.depot/manifest-production.json"))

        // Killed after the state was copied and before the old one went: the next open keeps the
        // copy (raised since) and removes the old one.
        try store.withExclusiveControl(app: app) { $0.raiseFloor(channel: "production", to: 43) }
        try FileSystem.writeAtomically(FileSystem.readFile(stateFolder + "/state.json").map { $0 }, to: packs + "/.depot/state.json")
        try store.withExclusiveControl(app: app) { $0.raiseFloor(channel: "production", to: 44) }
        state = try StateStore(destination: packs, stateFolder: stateFolder).read(app: app)
        #expect(state.floor(channel: "production") == 44 && !FileSystem.exists(packs + "/.depot/state.json"))

        // The system purges Library/Caches whole: the floor and the install id stay.
        try FileManager.default.removeItem(atPath: work.path + "/Library/Caches")
        let after = try StateStore(destination: packs, stateFolder: stateFolder)
        state = try after.read(app: app)
        #expect(state.installID == id && state.floor(channel: "production") == 44)
        #expect(FileSystem.isDirectory(packs + "/packs") && FileSystem.isDirectory(packs + "/.depot/arrived"))
        // Without a state folder the same purge forgets the floor (the former layout's exposure).
        try FileManager.default.removeItem(atPath: work.path + "/Library/Caches")
        let oldLayout = try StateStore(destination: packs)
        #expect(try oldLayout.read(app: app).floor(channel: "production") == 0)
    }
}
