import DepotCore
import Foundation

/// One whole pack in a sync: downloaded and installed at once.
extension DepotSync {
    /// One pack: the download and its installation run at once, the installer decrypting what
    /// the downloader has written so far (``DownloadFollower``) and starting over if an attempt
    /// rewinds the file. The installed copy changes only after the whole container verified, and
    /// is switched in with its record as one step (``StateStore/switchIn(_:as:app:now:)``).
    func downloadAndInstall(
        _ item: DownloadItem, entry: PackEntry, downloader: Downloader, installer: Installer, store: StateStore, now: Date,
        events: AsyncStream<DownloadEvent>.Continuation
    ) async -> Result<Int64, ClientError> {
        let follower: DownloadFollower
        do {
            follower = try DownloadFollower(path: item.path, total: item.size)
        } catch {
            return .failure((error as? SystemError)?.isNoSpace == true ? .noSpace(store.downloads) : .install(entry.id, error))
        }
        let app = configuration.app
        let downloading = Task { await downloader.download(item, follower: follower, events: events) }
        let installing = Task {
            do {
                return try await BlockingCall.run {
                    while true {
                        let pass = follower.beginPass()
                        do {
                            return try installer.stage(entry, from: follower, scratch: item.path + ".plain", besides: store.packPath(entry.id))
                        } catch where follower.rewound(since: pass) {
                            continue
                        }
                    }
                }
            } catch {
                // A tampered or undecryptable pack: no reason to download the rest.
                downloading.cancel()
                throw error
            }
        }
        let downloaded = await withTaskCancellationHandler { await downloading.value } onCancel: { downloading.cancel() }
        if case .failure = downloaded { follower.abandon() }
        let installed = await installing.result
        if case .success(let staged) = installed, case .failure = downloaded { Installer.removeTree(staged.path) }
        switch (downloaded, installed) {
        case (.success, .success(let staged)):
            do {
                try await BlockingCall.run { try store.switchIn(staged, as: entry, app: app, now: now) }
                return .success(entry.size)
            } catch {
                return .failure(error as? ClientError ?? ClientError.install(entry.id, error))
            }
        case (.failure(let error), .failure) where follower.starved:
            return .failure(error)
        case (_, .failure(let error)):
            // A container that fails its checks is not worth resuming.
            FileSystem.remove(item.path)
            FileSystem.remove(item.path + ".etag")
            return .failure(error as? ClientError ?? ClientError.install(entry.id, error))
        case (.failure(let error), .success):
            return .failure(error)
        }
    }
}
