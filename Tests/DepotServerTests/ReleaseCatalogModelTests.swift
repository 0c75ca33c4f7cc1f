import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// The release catalog (issue 63) against the release files it caches: a seeded run of publishes
/// on two channels, rollbacks (an earlier container published again: a new revision), packs
/// dropped and added back, restarts (a new store reading the catalog), a catalog removed and a
/// torn last line; after every step, checked from outside: the index a fresh store builds (from
/// the catalog and whatever files it lacks) equals the index of every release file read whole,
/// and no pack revision ever names two containers across all releases (what makes versions only
/// go up on every channel).
@Suite("Release catalog: a seeded model")
struct ReleaseCatalogModelTests {
    static let app = "com.example.model"

    static func entry(_ id: String, content: Int, key: String) -> PackEntry {
        let sha = Hex.encode(SHA256Hasher.hash(Array("\(id) \(content)".utf8)))
        let plain = Hex.encode(SHA256Hasher.hash(Array("plain \(id) \(content)".utf8)))
        return PackEntry(
            id: id, revision: 1, url: "http://127.0.0.1:8080/v1/apps/\(app)/blobs/\(sha)", size: Int64(1_000 + content), sha256: sha,
            installSize: 900, plaintextSHA256: plain, policy: .onDemand, tags: [], keyID: key, contentType: "application/octet-stream"
        )
    }

    /// Every release file's entries, read whole: the reference.
    static func reference(_ store: ReleaseStore, depth: Int) throws -> ReleaseIndex {
        var index = ReleaseIndex()
        index.depth = depth
        let head = store.head(app)
        for version in ReleaseStore.versions(in: store.folder.releases(app)) where version <= head {
            index.add(try store.load(app, version).manifest.allEntries)
        }
        return index
    }

    @Test("200 seeded steps, 3 seeds: the catalog's index equals the files', and no revision names two containers", arguments: [UInt64(1), 2, 3])
    func catalogMatchesTheFiles(seed: UInt64) throws {
        let work = TemporaryDirectory("depot-catalog-model")
        defer { work.remove() }
        let folder = DataFolder(work.path + "/data")
        try folder.prepare()
        let apps = AppStore(folder: folder)
        _ = try apps.create(Self.app)
        let key = try apps.packKeys(Self.app).current
        let depth = 3
        func open() -> ReleaseStore { ReleaseStore(folder: folder, apps: apps, manifestLifetime: 90 * 86_400, lineageDepth: depth) }
        var store = open()
        var random = SeededRandom(seed: seed)
        func pick(_ count: Int) -> Int { random.next(count) }
        var contents: [String: Int] = [:]
        var made = 0
        for step in 0..<200 {
            let roll = pick(100)
            let channel = pick(3) == 0 ? "beta" : ReleaseStore.production
            var what = ""
            if roll < 55 {
                // A pack changed (or added): new content.
                let id = "p\(pick(6))"
                made += 1
                contents[id] = made
                what = "change \(id) on \(channel)"
                _ = try store.publish(Self.app, channel: channel, rolloutChange: .content, change: { packs in
                    var packs = packs.filter { $0.id != id }
                    packs.append(Self.entry(id, content: made, key: key))
                    return packs
                })
            } else if roll < 70 {
                // A rollback: an earlier release's packs published again.
                let head = store.head(Self.app)
                guard head > 0 else { continue }
                let earlier = pick(head) + 1
                guard let old = try store.release(Self.app, earlier)?.manifest.packs else { continue }
                what = "roll \(channel) back to release \(earlier)"
                _ = try store.publish(Self.app, channel: channel, rolloutChange: .content, change: { _ in old })
            } else if roll < 80 {
                // A pack dropped.
                let id = "p\(pick(6))"
                what = "drop \(id) on \(channel)"
                _ = try store.publish(Self.app, channel: channel, rolloutChange: .content, change: { packs in
                    packs.contains { $0.id == id } && packs.count > 1 ? packs.filter { $0.id != id } : nil
                })
            } else if roll < 90 {
                what = "restart"
                store = open()
            } else if roll < 95 {
                what = "catalog removed, restart"
                FileSystem.remove(folder.catalog(Self.app))
                store = open()
            } else {
                what = "torn last line, restart"
                if let bytes = try? FileSystem.readFile(folder.catalog(Self.app)), bytes.count > 20 {
                    try FileSystem.writeAtomically(Array(bytes.dropLast(pick(20) + 1)), to: folder.catalog(Self.app))
                }
                store = open()
            }
            // Checked from outside: a fresh store (the catalog) against every file read whole.
            let fresh = try open().index(Self.app)
            let expected = try Self.reference(store, depth: depth)
            #expect(fresh.highestRevisions == expected.highestRevisions, "seed \(seed) step \(step) (\(what)): highest revisions")
            #expect(fresh.blobs == expected.blobs, "seed \(seed) step \(step) (\(what)): blobs")
            #expect(fresh.lineage == expected.lineage, "seed \(seed) step \(step) (\(what)): lineage")
            // And the store in use (its index kept up to date by each publish) agrees too.
            #expect(try store.index(Self.app).highestRevisions == expected.highestRevisions, "seed \(seed) step \(step) (\(what)): the running index")
            var containers: [String: String] = [:]
            for version in ReleaseStore.versions(in: folder.releases(Self.app)) {
                for entry in try store.load(Self.app, version).manifest.allEntries {
                    let key = "\(entry.id)@\(entry.revision)"
                    if let other = containers.updateValue(entry.sha256, forKey: key) {
                        #expect(other == entry.sha256, "seed \(seed) step \(step) (\(what)): \(key) names two containers")
                    }
                }
            }
        }
    }
}
