import DepotCore
import Synchronization

/// The base of every URL a manifest or an answer carries (the CDN's or edge's URL), known once
/// the listener is bound; without a trailing slash.
final class PublicURL: Sendable {
    private let value = Mutex("")

    var base: String {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue.hasSuffix("/") ? String(newValue.dropLast()) : newValue } }
    }

    /// The URL of a channel's manifest: production's is the short one.
    func manifest(_ app: String, channel: String) -> String {
        base + "/v1/apps/\(app)" + (channel == ReleaseStore.production ? "" : "/channels/\(channel)") + "/manifest"
    }

    /// The URL of a managed app's download manifest for a channel (`BAManifestURL`).
    func downloadManifest(_ app: String, channel: String) -> String {
        base + "/v1/apps/\(app)" + (channel == ReleaseStore.production ? "" : "/channels/\(channel)") + "/download-manifest"
    }

    func blob(_ app: String, _ sha256: String) -> String { base + "/v1/apps/\(app)/blobs/\(sha256)" }
    func release(_ app: String, _ version: Int) -> String { base + "/v1/apps/\(app)/releases/\(version)" }
    func upload(_ app: String, _ id: String) -> String { "/v1/apps/\(app)/uploads/\(id)" }
}

extension BackgroundAssetsKeys {
    /// The keys of a channel's release for the app's mode: an unmanaged app's point at the
    /// signed envelope (`envelopeSize` bytes), a managed app's at the download manifest.
    init(release manifest: Manifest, envelopeSize: Int64, app settings: AppSettings?, channel: String, urls: PublicURL) {
        let app = manifest.app
        if let settings, settings.isManaged {
            self.init(
                manifest: manifest, manifestSize: Int64(DownloadManifest(release: manifest).encoded().count),
                manifestURL: urls.downloadManifest(app, channel: channel), appGroupID: settings.appGroup ?? ""
            )
        } else {
            self.init(manifest: manifest, manifestSize: envelopeSize, manifestURL: urls.manifest(app, channel: channel))
        }
    }
}
