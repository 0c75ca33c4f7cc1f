import DepotCore
import Synchronization

/// What an app's releases hold, kept up to date by every publish and read at start-up from its
/// ``ReleaseCatalog`` (release files only for what the catalog lacks): the highest revision
/// each pack id ever had, every blob any release names, and each pack's newest revisions (what
/// patches start from).
struct ReleaseIndex: Sendable {
    /// One revision of a pack, as patch making needs it.
    struct Revision: Sendable, Equatable {
        var revision: Int
        var sha256: String
        var size: Int64
        var installSize: Int64
        var plaintextSHA256: String
        var keyID: String
        var isZip: Bool
        /// The patches a release named for this container (the newest seen), if any.
        var patches: [PackPatch]?

        init(_ entry: PackEntry) {
            (revision, sha256, size, installSize, plaintextSHA256, keyID) = (entry.revision, entry.sha256, entry.size, entry.installSize, entry.plaintextSHA256, entry.keyID)
            isZip = ZipPack.isZip(contentType: entry.contentType)
            patches = entry.patches
        }
    }

    /// How many revisions of each pack are kept at most: the newest and the 16 earlier ones the
    /// largest `--patch-depth` makes patches from.
    static let lineageDepth = 17

    /// How many revisions of each pack this index keeps (the origin's `--patch-depth` and one,
    /// at most ``lineageDepth``).
    var depth = ReleaseIndex.lineageDepth

    var highestRevisions: [String: Int] = [:]
    /// Releases are immutable, so this set only grows.
    var blobs: Set<String> = []
    /// Per pack id, its newest revisions, highest first, at most ``lineageDepth``.
    var lineage: [String: [Revision]] = [:]

    /// Whether `entry` would add nothing to an index of any depth: its revision is not above the
    /// pack's highest, its blobs are known, and its very revision and container are kept with
    /// the same patches (or it is below every kept revision of a full lineage). A rollback (an
    /// old container under a new revision) or a pack added again is never "known".
    func knows(_ entry: PackEntry) -> Bool {
        guard let highest = highestRevisions[entry.id], entry.revision <= highest, entry.blobs.allSatisfy(blobs.contains) else { return false }
        let kept = lineage[entry.id] ?? []
        guard let same = kept.first(where: { $0.revision == entry.revision }) else {
            return kept.count >= Self.lineageDepth && (kept.last?.revision ?? 0) > entry.revision
        }
        return same.sha256 == entry.sha256 && (entry.patches == nil || same.patches == entry.patches)
    }

    mutating func add(_ packs: [PackEntry]) {
        for pack in packs {
            highestRevisions[pack.id] = max(highestRevisions[pack.id] ?? 0, pack.revision)
            blobs.formUnion(pack.blobs)
            var revisions = lineage[pack.id] ?? []
            if let place = revisions.firstIndex(where: { $0.revision == pack.revision }) {
                // A revision is one container; a release that names patches for it updates them.
                if revisions[place].sha256 == pack.sha256, let patches = pack.patches { revisions[place].patches = patches }
            } else {
                guard revisions.count < depth || pack.revision > revisions.last!.revision else { continue }
                let place = revisions.firstIndex { $0.revision < pack.revision } ?? revisions.count
                revisions.insert(Revision(pack), at: place)
                if revisions.count > depth { revisions.removeLast() }
            }
            lineage[pack.id] = revisions
        }
    }

    /// The pack's earlier revisions a patch to `entry` can start from, newest first, at most
    /// `depth`: lower revisions with other plaintext, encrypted (not a managed archive), zips
    /// patched from zips only.
    func earlierRevisions(of entry: PackEntry, depth: Int) -> [Revision] {
        let zip = ZipPack.isZip(contentType: entry.contentType)
        let earlier = (lineage[entry.id] ?? []).filter {
            $0.revision < entry.revision && $0.plaintextSHA256 != entry.plaintextSHA256 && !$0.keyID.isEmpty && $0.isZip == zip
        }
        return Array(earlier.prefix(depth))
    }

    /// Patches a release already names for this very container and revision.
    func patches(for entry: PackEntry) -> [PackPatch]? {
        lineage[entry.id]?.first { $0.revision == entry.revision && $0.sha256 == entry.sha256 }?.patches
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

    /// Records a release in its app's index and catalog (under the publish lock, once it is
    /// visible: `head` names it). A catalog that cannot be written is read again from the
    /// release files at the next start.
    func noteReleased(_ manifest: Manifest, app: String) throws {
        let index = try index(app)
        let line = ReleaseCatalog.Line(manifest, newTo: index)
        // Every entry into the index in memory (cheap), only the new ones into the catalog line.
        indexes.withLock { $0.byApp[app]?.add(manifest.allEntries) }
        try? catalog(app).append([line])
    }

    func catalog(_ app: String) -> ReleaseCatalog { ReleaseCatalog(path: folder.catalog(app)) }

    /// The app's index: read once per process from its catalog, and from the release files the
    /// catalog lacks (appended to it). A scan that raced a publish or a ``forget(_:)`` is used
    /// but not kept: the kept one is never older than the files.
    func index(_ app: String) throws -> ReleaseIndex {
        let (known, generation) = indexes.withLock { ($0.byApp[app], $0.generation) }
        if let known { return known }
        var index = ReleaseIndex()
        index.depth = lineageDepth
        let head = head(app)
        let present = Set(Self.versions(in: folder.releases(app)).filter { $0 <= head })
        var covered = Set<Int>()
        let catalog = catalog(app)
        for line in catalog.lines() where present.contains(line.version) {
            index.add(line.entries)
            covered.insert(line.version)
        }
        var missing: [ReleaseCatalog.Line] = []
        for version in present.subtracting(covered).sorted() {
            let manifest = try load(app, version).manifest
            let line = ReleaseCatalog.Line(manifest, newTo: index)
            index.add(manifest.allEntries)
            missing.append(line)
        }
        let (result, kept) = indexes.withLock { indexes -> (ReleaseIndex, Bool) in
            if let kept = indexes.byApp[app] { return (kept, false) }
            guard indexes.generation == generation else { return (index, false) }
            indexes.byApp[app] = index
            return (index, true)
        }
        // The builder whose index was kept adds what the catalog lacked, outside the lock a
        // blob request takes (a line appended twice by a racing command reads the same).
        if kept, !missing.isEmpty { try? catalog.append(missing) }
        return result
    }
}
