import DepotCore
import Foundation
import Synchronization

/// The drafts of the apps' next releases on disk: `apps/<app>/staging/<pack>.json`, one small
/// file per staged change, so that staging a pack writes one file however large the draft is
/// (a draft of 10,000 packs no longer rewrites 10,000 entries per upload). Each file is written
/// atomically; a draft is read once and then kept in memory (the origin is its only writer).
/// A draft in the first format (`staging.json`, one file) is converted on first read.
final class DraftStore: Sendable {
    /// One staged change of one pack.
    struct Change: Codable, Equatable {
        var upsert: PackEntry?
        var removal: Bool?
        /// The channels of the token of trusted publishing that staged it; nil: any token's.
        var scope: [String]? = nil
    }

    let folder: DataFolder
    private let cache = Mutex<[String: Staging]>([:])

    init(folder: DataFolder) { self.folder = folder }

    private func directory(_ app: String) -> String { folder.app(app) + "/staging" }
    private func path(_ app: String, _ pack: String) -> String { directory(app) + "/" + pack + ".json" }

    /// The app's draft.
    func draft(_ app: String) throws -> Staging {
        if let cached = cache.withLock({ $0[app] }) { return cached }
        var staging = Staging()
        for name in FileSystem.contents(of: directory(app)) where name.hasSuffix(".json") && !name.hasPrefix(".") {
            let pack = String(name.dropLast(5))
            let change = try StoredJSON.read(Change.self, from: directory(app) + "/" + name)
            if let entry = change.upsert { staging.upserts[pack] = entry } else if change.removal == true { staging.removals.insert(pack) }
            if let scope = change.scope { staging.scopes[pack] = scope }
        }
        if FileSystem.exists(folder.staging(app)) {
            // The first format: fold it in, write it the new way, then drop it.
            let legacy = try StoredJSON.read(Staging.self, from: folder.staging(app))
            var merged = Staging(upserts: staging.upserts.merging(legacy.upserts) { _, new in new }, removals: staging.removals.union(legacy.removals))
            // (The first format had no scopes: a pack it names is a change of every channel's.)
            merged.scopes = staging.scopes.filter { legacy.upserts[$0.key] == nil && !legacy.removals.contains($0.key) }
            try write(app, from: Staging(), to: merged)
            FileSystem.remove(folder.staging(app))
            try FileSystem.syncDirectory(folder.app(app))
            staging = merged
        }
        cache.withLock { $0[app] = staging }
        return staging
    }

    /// Makes `staging` the app's draft, writing only the packs whose change differs.
    func save(_ app: String, _ staging: Staging) throws {
        let before = try draft(app)
        try write(app, from: before, to: staging)
        cache.withLock { $0[app] = staging }
    }

    private func write(_ app: String, from before: Staging, to after: Staging) throws {
        let packs = Set(before.upserts.keys).union(after.upserts.keys).union(before.removals).union(after.removals)
        var removedAny = false
        for pack in packs {
            let old = Change(upsert: before.upserts[pack], removal: before.removals.contains(pack) ? true : nil, scope: before.scopes[pack])
            let new = Change(upsert: after.upserts[pack], removal: after.removals.contains(pack) ? true : nil, scope: after.scopes[pack])
            guard old != new else { continue }
            if new.upsert == nil && new.removal == nil {
                FileSystem.remove(path(app, pack))
                removedAny = true
            } else {
                try FileSystem.createDirectory(directory(app))
                try StoredJSON.write(new, to: path(app, pack))
            }
        }
        if removedAny { try FileSystem.syncDirectory(directory(app)) }
    }
}
