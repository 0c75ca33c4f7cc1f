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
    let origin: Origin
    private let http: HTTPServer

    /// Opens the data folder (creating its folders, cleaning what a crash left) and starts listening.
    public init(configuration: OriginConfiguration) throws {
        MemoryTrim.configureAllocator()
        origin = try Origin(configuration: configuration)
        http = try HTTPServer(configuration: configuration.http, handler: origin)
        let host = configuration.http.host.contains(":") ? "[\(configuration.http.host)]" : configuration.http.host
        origin.urls.base = configuration.publicURL ?? "http://\(host):\(http.port)"
        // Uploads a crash interrupted after their pack was verified: staged now that the URLs
        // their entries carry are known (a request for one meanwhile is answered 409, busy).
        origin.finishUploadsLeftByACrash()
        let http = self.http
        origin.operations.setInFlightProvider { http.inFlightRequests }
        refresher = ManifestRefresher(origin: origin, configuration: configuration)
    }

    private let refresher: ManifestRefresher

    /// What start-up did with a data folder a backup was copied back into by hand (its
    /// `backup.json`): the floor release numbers continue from, and when the backup was taken.
    public var restored: DataRestore.Outcome? { origin.restored }

    /// The bound port.
    public var port: UInt16 { http.port }
    /// The base URL manifests point at.
    public var publicURL: String { origin.urls.base }

    /// Counts the device reports accepted so far and writes them now, each day compacted to its
    /// snapshot (`<day>.json`) and put in the bucket (the origin appends them to the day's log
    /// every second), and runs the rollout guard on them.
    public func flushReports() { origin.reports.flush(final: true) }

    /// Waits until the patches scheduled so far are made and released.
    public func waitForPatches() { origin.patchMaker?.waitUntilIdle() }

    /// Maintenance passes finished (re-signing, the sweep, expired uploads; the first runs at start-up).
    public var maintenancePasses: Int { refresher.passes.load(ordering: .acquiring) }

    /// Removes resumable uploads past their expiry now (the periodic sweep does it every
    /// `refreshInterval`); returns how many.
    @discardableResult
    public func removeExpiredUploads() -> Int { origin.uploads.removeExpired() }

    /// The blob answers kept ready: how many, the bytes they count and the kept blobs held open.
    public var blobAnswers: (answers: Int, memory: Int, files: Int) { origin.answers.figures }

    /// Sweeps (or, with `dryRun`, lists) unneeded blobs now, as the periodic sweep does.
    public func collectGarbage(retention: TimeInterval, grace: TimeInterval, dryRun: Bool) throws -> (blobs: [String], bytes: Int64) {
        try origin.garbage.collect(retention: retention, grace: grace, dryRun: dryRun)
    }

    /// Stops listening and joins the server's threads.
    public func stop() {
        refresher.stop()
        origin.patchMaker?.stop()
        http.stop()
        origin.flushReports()
        origin.releaseFolderLock()
    }

    /// Stops accepting, lets requests in flight finish for up to `gracePeriod`, then stops.
    /// Returns how many requests were cut off.
    @discardableResult
    public func shutdown(gracePeriod: Duration) -> Int {
        refresher.stop()
        origin.patchMaker?.stop()
        let cut = http.shutdown(gracePeriod: gracePeriod)
        origin.flushReports()
        origin.releaseFolderLock()
        return cut
    }
}

