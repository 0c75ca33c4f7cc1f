import DepotCore
import Foundation

/// What a sync did.
public struct SyncReport: Hashable, Sendable {
    /// The manifest version now installed.
    public var manifestVersion: Int
    /// Packs downloaded and installed.
    public var installed: [String]
    /// Packs removed because the manifest no longer lists them.
    public var removed: [String]
    /// Packs already current.
    public var unchanged: [String]
    /// Container bytes downloaded.
    public var bytesDownloaded: Int64
}

/// One sync of an app's packs into a destination folder: fetch and verify the manifest,
/// plan, download, verify, decrypt, install, record — the whole client pipeline.
public struct DepotSync: Sendable {
    /// The origin (or edge) base URL.
    public var server: URL
    /// What the app was given: trusted manifest keys and the pack key ring.
    public var configuration: ClientConfiguration
    /// The destination folder.
    public var destination: String
    var transport = HTTPTransport()

    public init(server: URL, configuration: ClientConfiguration, destination: String) {
        self.server = server
        self.configuration = configuration
        self.destination = destination
    }

    /// Runs the sync under the destination's exclusive lock.
    public func run(now: Date = Date()) async throws -> SyncReport {
        let store = try StateStore(destination: destination)
        var state = try store.load(app: configuration.app)
        let source = ManifestSource(
            url: ManifestSource.url(server: server, app: configuration.app), app: configuration.app,
            trustedKeys: try configuration.trustedKeys(), transport: transport
        )
        let manifest = try await source.fetch(floor: state.manifestVersion, now: now)
        state.manifestVersion = manifest.version
        try store.save(state)

        let plan = SyncPlan.make(manifest: manifest, state: state) { FileSystem.exists(store.packPath($0)) }
        let installer = Installer(keyRing: try configuration.keyRing())
        var bytes: Int64 = 0
        for entry in plan.downloads {
            guard let url = URL(string: entry.url), url.scheme == "http" || url.scheme == "https" else {
                throw ClientError.manifest("pack \(entry.id) has an invalid URL")
            }
            let download = store.downloads + "/" + entry.sha256
            defer { FileSystem.remove(download) }
            let response = try await transport.download(url, to: download)
            guard response.status == 200 else {
                throw ClientError.http(response.status, entry.url, String(decoding: response.body.prefix(300), as: UTF8.self))
            }
            try installer.install(entry, from: download, to: store.packPath(entry.id))
            bytes += entry.size
            state.packs[entry.id] = InstalledState.Pack(
                revision: entry.revision, sha256: entry.sha256, plaintextSHA256: entry.plaintextSHA256,
                installSize: entry.installSize, installedAt: now
            )
            try store.save(state)
        }
        for id in plan.removals {
            FileSystem.remove(store.packPath(id))
            state.packs[id] = nil
            try store.save(state)
        }
        return SyncReport(
            manifestVersion: manifest.version, installed: plan.downloads.map(\.id), removed: plan.removals,
            unchanged: plan.unchanged, bytesDownloaded: bytes
        )
    }
}
