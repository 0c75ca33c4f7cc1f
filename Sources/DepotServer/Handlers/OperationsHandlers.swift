import DepotHTTP
import Synchronization

/// What operators and browsers call: health, metrics, and the dashboard's static files.
final class OperationsHandlers: Sendable {
    let metrics: OriginMetrics
    let staticFiles: StaticFiles?
    private let inFlightProvider = Mutex<(@Sendable () -> Int)?>(nil)

    init(metrics: OriginMetrics, staticFiles: StaticFiles?) {
        self.metrics = metrics
        self.staticFiles = staticFiles
    }

    /// Where `/metrics` reads the number of requests in flight.
    func setInFlightProvider(_ provider: @escaping @Sendable () -> Int) {
        inFlightProvider.withLock { $0 = provider }
    }

    /// `GET /healthz`.
    func health(_ context: RequestContext) -> HTTPResponse {
        var response = HTTPResponse.bytes(Array("{\"status\":\"ok\"}\n".utf8), contentType: "application/json")
        response.headers.add("Cache-Control", "no-store")
        return response
    }

    /// `GET /metrics`: the Prometheus text exposition.
    func metrics(_ context: RequestContext) -> HTTPResponse {
        let inFlight = inFlightProvider.withLock { $0 }?() ?? 0
        var response = HTTPResponse.bytes(metrics.render(inFlightRequests: inFlight), contentType: "text/plain; version=0.0.4; charset=utf-8")
        response.headers.add("Cache-Control", "no-store")
        return response
    }

    /// `GET /…`: a file of the dashboard folder.
    func staticFile(_ context: RequestContext) throws -> HTTPResponse {
        let request = context.request
        guard let staticFiles, let response = staticFiles.response(for: request.pathSegments, request: request) else {
            throw DepotError.notFound("\(request.path)")
        }
        return response
    }
}
