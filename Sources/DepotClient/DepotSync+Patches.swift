import DepotCore
import Foundation

/// Patches in a sync: a pack whose installed copy is a patch's base is updated by the patch
/// first, and by the whole pack (in the same sync) if anything about the patch fails.
extension DepotSync {
    /// One pack by its patch: the patch's container downloaded (resumable, exact size), then
    /// applied to the installed copy; the installed copy changes only once the result verified.
    func patchAndInstall(
        _ entry: PackEntry, patch: PackPatch, downloader: Downloader, installer: Installer, store: StateStore, now: Date,
        events: AsyncStream<DownloadEvent>.Continuation
    ) async -> Result<Int64, ClientError> {
        guard let url = URL(string: patch.url), url.scheme == "http" || url.scheme == "https" else {
            return .failure(ClientError.manifest("the patch of pack \(entry.id) has an invalid URL"))
        }
        if let refusal = rules?.refusal(for: url) { return .failure(ClientError.manifest("the patch of pack \(entry.id) refused: \(refusal)")) }
        let item = DownloadItem(id: entry.id, url: url, size: patch.size, sha256: patch.sha256, path: store.downloads + "/" + patch.sha256)
        defer {
            FileSystem.remove(item.path)
            FileSystem.remove(item.path + ".etag")
        }
        if case .failure(let error) = await downloader.download(item, events: events) { return .failure(error) }
        do {
            let app = configuration.app
            try await BlockingCall.run {
                let staged = try installer.stagePatch(entry, patch: patch, from: item.path, onto: store.packPath(entry.id))
                try store.switchIn(staged, as: entry, app: app, now: now)
            }
            return .success(patch.size)
        } catch {
            return .failure(error as? ClientError ?? ClientError.install(entry.id, error))
        }
    }
}

/// What the patches of one round did, gathered from the concurrent downloads.
final class PatchOutcomes: Sendable {
    private let state = Locked<(patched: [String: Int64], fallbacks: [String: String])>(([:], [:]))

    func patched(_ entry: PackEntry, _ patch: PackPatch) { state.withLock { $0.patched[entry.id] = entry.size - patch.size } }
    func fellBack(_ id: String, _ why: String) { state.withLock { $0.fallbacks[id] = why } }

    func record(into report: inout SyncReport) {
        let (patched, fallbacks) = state.withLock { $0 }
        report.patched = (report.patched + patched.keys).sorted()
        report.bytesSaved += patched.values.reduce(0, +)
        report.patchFallbacks.merge(fallbacks) { $1 }
    }
}
