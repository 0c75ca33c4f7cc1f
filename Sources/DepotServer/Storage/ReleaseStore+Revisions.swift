import DepotCore

/// Pack revisions (the `version` devices compare): raised above every revision a pack ever had.
extension ReleaseStore {
    /// Versions that only go up, on every channel: a pack whose container differs from the one
    /// `base` has gets a revision above any it ever had in any release of the app (so a device
    /// moving between channels, or reinstalling a pack that was dropped, sees it rise); an
    /// unchanged one keeps its revision. Call under the publish lock.
    func raisingRevisions(_ packs: [PackEntry], over base: [PackEntry], app: String) throws -> [PackEntry] {
        let highest = try highestRevisions(app)
        let before = Dictionary(base.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        return packs.map { pack in
            var pack = pack
            if let old = before[pack.id], old.sha256 == pack.sha256 {
                pack.revision = old.revision
            } else if let top = highest[pack.id], pack.revision <= top {
                pack.revision = top + 1
            }
            return pack
        }
    }

    /// The highest revision of each pack id over the app's releases (read once per process).
    func highestRevisions(_ app: String) throws -> [String: Int] {
        if let known = highestRevisions.withLock({ $0[app] }) { return known }
        var highest: [String: Int] = [:]
        let head = head(app)
        for version in Self.versions(in: folder.releases(app)) where version <= head {
            for pack in try load(app, version).manifest.packs { highest[pack.id] = max(highest[pack.id] ?? 0, pack.revision) }
        }
        highestRevisions.withLock { $0[app] = highest }
        return highest
    }
}
