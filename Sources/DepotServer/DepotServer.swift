import DepotCore
import DepotHTTP
import Foundation
import Synchronization

/// The AssetDepot origin: a data folder served over HTTP.
///
/// ```swift
/// let server = try DepotServer(configuration: OriginConfiguration(dataPath: "depot-data"))
/// print(server.publicURL)
/// server.stop()
/// ```
public final class DepotServer: Sendable {
    private let origin: Origin
    private let http: HTTPServer

    /// Opens the data folder (creating its folders, cleaning what a crash left) and starts listening.
    public init(configuration: OriginConfiguration) throws {
        origin = try Origin(configuration: configuration)
        http = try HTTPServer(configuration: configuration.http, handler: origin)
        let host = configuration.http.host.contains(":") ? "[\(configuration.http.host)]" : configuration.http.host
        origin.publicURL = configuration.publicURL ?? "http://\(host):\(http.port)"
        let http = self.http
        origin.setInFlightProvider { http.inFlightRequests }
        refresher = ManifestRefresher(origin: origin, configuration: configuration)
    }

    private let refresher: ManifestRefresher

    /// The bound port.
    public var port: UInt16 { http.port }
    /// The base URL manifests point at.
    public var publicURL: String { origin.publicURL }

    /// Removes resumable uploads past their expiry now (the periodic sweep does it every
    /// `refreshInterval`); returns how many.
    @discardableResult
    public func removeExpiredUploads() -> Int { origin.uploads.removeExpired() }

    /// Sweeps (or, with `dryRun`, lists) unneeded blobs now, as the periodic sweep does.
    public func collectGarbage(retention: TimeInterval, grace: TimeInterval, dryRun: Bool) throws -> (blobs: [String], bytes: Int64) {
        try origin.releases.collectGarbage(retention: retention, grace: grace, dryRun: dryRun)
    }

    /// Stops listening and joins the server's threads.
    public func stop() {
        refresher.stop()
        http.stop()
        origin.releaseFolderLock()
    }

    /// Stops accepting, lets requests in flight finish for up to `gracePeriod`, then stops.
    /// Returns how many requests were cut off.
    @discardableResult
    public func shutdown(gracePeriod: Duration) -> Int {
        refresher.stop()
        let cut = http.shutdown(gracePeriod: gracePeriod)
        origin.releaseFolderLock()
        return cut
    }
}

/// Re-signs manifests, sweeps unneeded blobs and expired resumable uploads at start-up and then every `refreshInterval`,
/// on a thread of its own.
final class ManifestRefresher: Sendable {
    private let stopped = Mutex(false)
    private let wake = DispatchSemaphore(value: 0)

    init(origin: Origin, configuration: OriginConfiguration) {
        Thread.detachNewThread { [self] in
            repeat {
                do {
                    for app in try origin.releases.refreshExpiring() {
                        origin.logger.notice("re-signed the live manifest", metadata: ["app": .string(app)])
                    }
                    let swept = try origin.releases.collectGarbage(retention: configuration.blobRetention, grace: configuration.blobGrace)
                    let expired = origin.uploads.removeExpired()
                    if expired > 0 { origin.logger.notice("removed expired resumable uploads", metadata: ["count": .stringConvertible(expired)]) }
                    if !swept.blobs.isEmpty {
                        origin.logger.notice("removed unneeded blobs", metadata: ["count": .stringConvertible(swept.blobs.count), "bytes": .stringConvertible(swept.bytes)])
                    }
                } catch {
                    origin.logger.error("maintenance failed: \(error)")
                }
            } while wake.wait(timeout: .now() + configuration.refreshInterval) == .timedOut && !stopped.withLock({ $0 })
        }
    }

    func stop() {
        let wasRunning = stopped.withLock { value -> Bool in
            defer { value = true }
            return !value
        }
        if wasRunning { wake.signal() }
    }
}

/// Maintenance of a data folder that no server is using (it holds the folder's lock meanwhile).
public struct OfflineMaintenance {
    private let lock: FileDescriptor
    private let releases: ReleaseStore
    private let uploads: ResumableUploads

    /// Takes the folder's lock; fails with `data_folder_busy` while a server runs on it.
    public init(dataPath: String) throws {
        let folder = DataFolder(dataPath)
        guard folder.exists else { throw DepotError.notFound("a data folder at \(dataPath)") }
        lock = try folder.lockExclusively()
        releases = ReleaseStore(folder: folder, apps: AppStore(folder: folder), manifestLifetime: 90 * 86_400)
        uploads = ResumableUploads(folder: folder)
    }

    /// Removes resumable uploads past their expiry; returns how many.
    public func removeExpiredUploads() -> Int { uploads.removeExpired() }

    /// Removes (or lists, with `dryRun`) blobs no live release, recent release or draft needs.
    public func collectGarbage(retention: TimeInterval, grace: TimeInterval, dryRun: Bool) throws -> (blobs: [String], bytes: Int64) {
        _ = lock
        return try releases.collectGarbage(retention: retention, grace: grace, dryRun: dryRun)
    }
}
