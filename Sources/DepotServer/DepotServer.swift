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
        refresher = ManifestRefresher(origin: origin, interval: configuration.refreshInterval)
    }

    private let refresher: ManifestRefresher

    /// The bound port.
    public var port: UInt16 { http.port }
    /// The base URL manifests point at.
    public var publicURL: String { origin.publicURL }

    /// Stops listening and joins the server's threads.
    public func stop() {
        refresher.stop()
        http.stop()
    }

    /// Stops accepting, lets requests in flight finish for up to `gracePeriod`, then stops.
    /// Returns how many requests were cut off.
    @discardableResult
    public func shutdown(gracePeriod: Duration) -> Int {
        refresher.stop()
        return http.shutdown(gracePeriod: gracePeriod)
    }
}

/// Re-signs expiring manifests at start-up and then every `interval`, on a thread of its own.
final class ManifestRefresher: Sendable {
    private let stopped = Mutex(false)
    private let wake = DispatchSemaphore(value: 0)

    init(origin: Origin, interval: TimeInterval) {
        Thread.detachNewThread { [self] in
            repeat {
                do {
                    for app in try origin.releases.refreshExpiring() {
                        origin.logger.notice("re-signed the live manifest before it expires", metadata: ["app": .string(app)])
                    }
                } catch {
                    origin.logger.error("could not re-sign expiring manifests: \(error)")
                }
            } while wake.wait(timeout: .now() + interval) == .timedOut && !stopped.withLock({ $0 })
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
