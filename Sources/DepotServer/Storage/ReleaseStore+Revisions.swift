import DepotCore

/// What an app's releases hold, read once from its release files and kept up to date by every
/// publish: the highest revision each pack id ever had, and every blob any release names.
struct ReleaseIndex: Sendable {
    var highestRevisions: [String: Int] = [:]
    /// Releases are immutable, so this set only grows.
    var blobs: Set<String> = []

    mutating func add(_ packs: [PackEntry]) {
        for pack in packs {
            highestRevisions[pack.id] = max(highestRevisions[pack.id] ?? 0, pack.revision)
            blobs.formUnion(pack.blobs)
        }
    }
}

/// Pack revisions (the `version` devices compare): raised above every revision a pack ever had;
/// and which blobs an app's releases name.
extension ReleaseStore {
    /// Versions that only go up, on every channel: a pack whose container differs from the one
    /// `base` has gets a revision above any it ever had in any release of the app (so a device
    /// moving between channels, or reinstalling a pack that was dropped, sees it rise); an
    /// unchanged one keeps its revision. Call under the publish lock.
    ///
    /// `candidates`: a rollout's entries on the channel; a pack with a candidate's container
    /// keeps the candidate's revision (completing a rollout changes nothing for the devices that
    /// took it).
    ///
    /// `floor`: a restored folder's ``ReleaseFloor``: a pack that gets a new revision (or is new
    /// to the app's releases) gets at least it, above any revision devices saw before the restore.
    func raisingRevisions(_ packs: [PackEntry], over base: [PackEntry], candidates: [PackEntry] = [], app: String, floor: Int = 0) throws -> [PackEntry] {
        let highest = try index(app).highestRevisions
        let before = Dictionary(base.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        let offered = Dictionary(candidates.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        return packs.map { pack in
            var pack = pack
            if let old = before[pack.id], old.sha256 == pack.sha256 {
                pack.revision = old.revision
            } else if let candidate = offered[pack.id], candidate.sha256 == pack.sha256 {
                pack.revision = candidate.revision
            } else {
                if let top = highest[pack.id], pack.revision <= top { pack.revision = top + 1 }
                // Above `top` already: the floor, when higher, is too.
                if pack.revision < floor { pack.revision = floor }
            }
            return pack
        }
    }

    /// Whether two pack lists hold the same content: the same packs, containers and revisions,
    /// whatever patches they name.
    static func sameContent(_ a: [PackEntry], _ b: [PackEntry]) -> Bool {
        func content(_ packs: [PackEntry]) -> [PackEntry] {
            packs.map { pack in
                var pack = pack
                pack.patches = nil
                return pack
            }.sorted { $0.id < $1.id }
        }
        return content(a) == content(b)
    }

    /// Whether a release of `app` (one made visible: at or below `head`) names blob `sha256`:
    /// what `GET /v1/apps/{app}/blobs/{sha256}` answers for. A draft's blob is not served.
    func releaseNames(_ sha256: String, app: String) throws -> Bool {
        try index(app).blobs.contains(sha256)
    }

    /// Whether anything of any app names blob `sha256`: a release file (visible or not yet), or
    /// a draft. Blobs are content-addressed and shared by every app, so a removal asks this of
    /// all of them. Call under ``exclusively(_:)``.
    func anyAppNames(_ sha256: String) throws -> Bool {
        for app in FileSystem.contents(of: folder.apps) where FileSystem.isDirectory(folder.app(app)) {
            if try index(app).blobs.contains(sha256) { return true }
            if try staging(app).upserts.values.contains(where: { $0.sha256 == sha256 }) { return true }
            // A release written but not yet visible (a publish in progress elsewhere is excluded by
            // the lock; one a crash left is removed at start-up, or made visible by a replica pull).
            let head = head(app)
            for version in Self.versions(in: folder.releases(app)) where version > head {
                if try load(app, version).manifest.allEntries.contains(where: { $0.blobs.contains(sha256) }) { return true }
            }
        }
        return false
    }

    /// Records a release's packs in its app's index (under the publish lock, once it is visible).
    func noteReleased(_ packs: [PackEntry], app: String) throws {
        _ = try index(app)
        indexes.withLock { $0.byApp[app]?.add(packs) }
    }

    /// The app's index (read from its release files once per process). A scan that raced a
    /// publish or a ``forget(_:)`` is used but not kept: the kept one is never older than the files.
    func index(_ app: String) throws -> ReleaseIndex {
        let (known, generation) = indexes.withLock { ($0.byApp[app], $0.generation) }
        if let known { return known }
        var index = ReleaseIndex()
        let head = head(app)
        for version in Self.versions(in: folder.releases(app)) where version <= head {
            index.add(try load(app, version).manifest.allEntries)
        }
        return indexes.withLock { indexes in
            if let kept = indexes.byApp[app] { return kept }
            if indexes.generation == generation { indexes.byApp[app] = index }
            return index
        }
    }
}
