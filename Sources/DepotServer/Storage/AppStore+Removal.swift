import DepotCore
import Foundation

/// Removing an app (`depot apps remove`), with the origin stopped.
extension AppStore {
    /// What ``remove(_:)`` removed.
    public struct Removal: Sendable {
        /// Whether the app's folder was there (false: a removal a crash interrupted, finished now).
        public var hadFolder: Bool
        public var releases: Int
        public var tokens: Int
        public var packKey: Bool
    }

    /// Removes an app: its tokens first (nothing can publish to it from then on), then its
    /// folder (releases, channels, settings, drafts, rollouts, reports, trust rules, attested
    /// keys) in one
    /// rename into `uploads/` (start-up removes what a crash leaves there), then its pack keys.
    /// The folder's ``ReleaseFloor`` is raised above the app's highest release first, so that
    /// the id made again never reuses a release number or pack revision.
    /// Its blobs stay until garbage collection finds nothing naming them. Call holding the data
    /// folder's exclusive lock (``DataFolder/lockExclusively()``: no origin running): an origin
    /// keeps its apps' manifests in memory. Run again after a crash, it finishes the removal.
    ///
    /// Refused (`409 backup_running`) while `depot backup` copies the folder: a backup that
    /// copied the app's releases and then found its pack key gone would restore an app no
    /// device can read.
    public func remove(_ id: String) throws -> Removal {
        guard Identifier.isValidApp(id) else { throw DepotError.invalidID("app id") }
        guard let removal = try BackupLock.exclusively(folder, { try removeHoldingBackupLock(id) }) else {
            throw DepotError.conflict("backup_running", "a backup of \(folder.root) is running (depot backup holds backup.lock): nothing was removed; remove the app once it has finished")
        }
        return removal
    }

    private func removeHoldingBackupLock(_ id: String) throws -> Removal {
        let hasFolder = FileSystem.isDirectory(folder.app(id)), hasKey = FileSystem.exists(folder.packKeys(id))
        guard hasFolder || hasKey else { throw DepotError.notFound("app \(id)") }
        let releases = ReleaseStore.versions(in: folder.releases(id)).count
        // The id made again later continues above every number (and pack revision) its devices
        // and edges saw: `/releases/{n}` is immutable, and a device refuses a lower version.
        if hasFolder, let highest = ReleaseFloor.highestReleases(folder)[id], highest > 0 {
            try ReleaseFloor.raise(folder, toAtLeast: highest + 1)
        }
        let tokens = try TokenStore(folder: folder).removeAll(app: id)
        if hasFolder {
            try FileSystem.createDirectory(folder.uploads)
            let trash = folder.uploads + "/removed-app-" + Hex.encode(SecureRandom.bytes(6))
            try systemCall("rename", path: folder.app(id)) { rename(folder.app(id), trash) }
            try FileSystem.syncDirectory(folder.apps)
            try? FileManager.default.removeItem(atPath: trash)
        }
        if hasKey {
            try systemCall("unlink", path: folder.packKeys(id)) { unlink(folder.packKeys(id)) }
            try FileSystem.syncDirectory(folder.keys)
        }
        return Removal(hadFolder: hasFolder, releases: releases, tokens: tokens, packKey: hasKey)
    }
}
