import DepotCore
import DepotHTTP
import Foundation
import Synchronization

/// What operators and browsers call: health, metrics, and the dashboard's static files.
final class OperationsHandlers: Sendable {
    let metrics: OriginMetrics
    let staticFiles: StaticFiles?
    /// The SHA-256 of the token `/metrics` asks for, or nil: metrics are off.
    private let metricsTokenDigest: [UInt8]?
    private let inFlightProvider = Mutex<(@Sendable () -> Int)?>(nil)
    /// What each scrape reads of the volume and the releases (on the scraping request's thread).
    private let observe: @Sendable () -> OriginMetrics.Observations?
    /// The data folder whose unreadable files make `/healthz` answer 503 (``StateHealth``).
    private let dataRoot: String?

    init(
        metrics: OriginMetrics, staticFiles: StaticFiles?, metricsToken: String? = nil, dataRoot: String? = nil,
        observe: @escaping @Sendable () -> OriginMetrics.Observations? = { nil }
    ) {
        self.metrics = metrics
        self.dataRoot = dataRoot
        self.observe = observe
        self.staticFiles = staticFiles
        metricsTokenDigest = metricsToken.map { SHA256Hasher.hash(Array($0.utf8)) }
    }

    /// Where `/metrics` reads the number of requests in flight.
    func setInFlightProvider(_ provider: @escaping @Sendable () -> Int) {
        inFlightProvider.withLock { $0 = provider }
    }

    /// `GET /healthz`: 200 `{"status":"ok","version":…}`, or 503 `{"status":"unreadable",…}`
    /// naming the data-folder files this process cannot read (a load balancer or an alert sees
    /// it; the paths are the folder's own, which the edges keep off the public name).
    func health(_ context: RequestContext) -> HTTPResponse {
        let problems = dataRoot.map { StateHealth.shared.problems(under: $0) } ?? []
        var body = "{\"status\":\"" + (problems.isEmpty ? "ok" : "unreadable") + "\",\"version\":\"" + AssetDepotVersion.current + "\""
        if !problems.isEmpty {
            let listed = problems.prefix(20).map { ["file": $0.path, "error": $0.error] }
            let encoded = (try? JSONSerialization.data(withJSONObject: listed, options: [.sortedKeys, .withoutEscapingSlashes])).map { String(decoding: $0, as: UTF8.self) } ?? "[]"
            body += ",\"unreadable\":" + encoded + ",\"count\":\(problems.count)"
        }
        var response = HTTPResponse.bytes(Array((body + "}\n").utf8), contentType: "application/json")
        if !problems.isEmpty { response.status = 503 }
        response.headers.add("Cache-Control", "no-store")
        return response
    }

    /// `GET /metrics`: the Prometheus text exposition, which names every app that published. Only
    /// with the metrics token (`Authorization: Bearer …`, compared in constant time); without one
    /// configured, metrics are off (404) on the public listener.
    func metrics(_ context: RequestContext) throws -> HTTPResponse {
        guard let expected = metricsTokenDigest else {
            throw DepotError.notFound("/metrics: metrics are off; start depot serve with --metrics-token-file to serve them to a scraper holding that token")
        }
        let header = context.request.headers["Authorization"] ?? ""
        let offered = header.utf8.count > 7 && header.prefix(7).lowercased() == "bearer " ? String(header.dropFirst(7)).trimmingWhitespace : ""
        let digest = SHA256Hasher.hash(Array(offered.utf8))
        guard zip(digest, expected).reduce(UInt8(0), { $0 | ($1.0 ^ $1.1) }) == 0 else {
            throw DepotError(.unauthorized, "metrics_token", "/metrics needs the metrics token: Authorization: Bearer <the token in --metrics-token-file>")
        }
        let inFlight = inFlightProvider.withLock { $0 }?() ?? 0
        var response = HTTPResponse.bytes(metrics.render(inFlightRequests: inFlight, observations: observe()), contentType: "text/plain; version=0.0.4; charset=utf-8")
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
