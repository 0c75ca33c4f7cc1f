import DepotCore

/// What a sync will do: a pure function of the manifest and the installed state.
public struct SyncPlan: Hashable, Sendable {
    /// Packs to download and install, in manifest order (essential first).
    public var downloads: [PackEntry]
    /// Installed pack ids that the manifest no longer lists.
    public var removals: [String]
    /// Installed packs that are already current.
    public var unchanged: [String]

    /// Plans: a pack is downloaded when it is not installed, or its revision or container hash changed.
    public static func make(manifest: Manifest, state: InstalledState, installedFileExists: (String) -> Bool = { _ in true }) -> SyncPlan {
        var downloads: [PackEntry] = []
        var unchanged: [String] = []
        for entry in manifest.packs {
            if let installed = state.packs[entry.id], installed.revision == entry.revision, installed.sha256 == entry.sha256,
               installedFileExists(entry.id) {
                unchanged.append(entry.id)
            } else {
                downloads.append(entry)
            }
        }
        let order: [PackEntry.Policy: Int] = [.essential: 0, .prefetch: 1, .onDemand: 2]
        downloads.sort { (order[$0.policy]!, $0.id) < (order[$1.policy]!, $1.id) }
        let listed = Set(manifest.packs.map(\.id))
        let removals = state.packs.keys.filter { !listed.contains($0) }.sorted()
        return SyncPlan(downloads: downloads, removals: removals, unchanged: unchanged)
    }
}
