import DepotCore
import DepotHTTP

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
    }

    /// The bound port.
    public var port: UInt16 { http.port }
    /// The base URL manifests point at.
    public var publicURL: String { origin.publicURL }

    /// Stops listening and joins the server's threads.
    public func stop() { http.stop() }

    /// Stops accepting, lets requests in flight finish for up to `gracePeriod`, then stops.
    /// Returns how many requests were cut off.
    @discardableResult
    public func shutdown(gracePeriod: Duration) -> Int { http.shutdown(gracePeriod: gracePeriod) }
}
