import DepotHTTP
import Metrics
import Prometheus
import Synchronization

/// The origin's metrics, through swift-metrics into a Prometheus registry of its own (so that
/// several servers in one process, as in tests, keep separate counts).
final class OriginMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory
    private let counters = Mutex<[String: Metrics.Counter]>([:])
    private let timers = Mutex<[String: Metrics.Timer]>([:])
    private let inFlight: Metrics.Gauge

    init() {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = [
            .milliseconds(1), .milliseconds(5), .milliseconds(25), .milliseconds(100), .milliseconds(500),
            .seconds(1), .seconds(5), .seconds(30), .seconds(120), .seconds(600),
        ]
        self.factory = factory
        inFlight = Metrics.Gauge(label: "depot_http_requests_in_flight", factory: factory)
    }

    private func counter(_ label: String, _ dimensions: [(String, String)]) -> Metrics.Counter {
        let key = label + dimensions.map { "|\($0.0)=\($0.1)" }.joined()
        return counters.withLock { cache in
            if let hit = cache[key] { return hit }
            let made = Metrics.Counter(label: label, dimensions: dimensions, factory: factory)
            cache[key] = made
            return made
        }
    }

    func record(_ exchange: HTTPExchangeRecord) {
        counter("depot_http_requests_total", [("route", exchange.route), ("status", String(exchange.status))]).increment()
        if exchange.bodyBytes > 0 {
            counter("depot_http_response_body_bytes_total", [("route", exchange.route)]).increment(by: Int(exchange.bodyBytes))
        }
        let timer = timers.withLock { cache in
            if let hit = cache[exchange.route] { return hit }
            let made = Metrics.Timer(label: "depot_http_request_duration_seconds", dimensions: [("route", exchange.route)], factory: factory)
            cache[exchange.route] = made
            return made
        }
        timer.recordNanoseconds(Int64(exchange.duration.components.seconds) * 1_000_000_000 + exchange.duration.components.attoseconds / 1_000_000_000)
    }

    func published(app: String, changed: Bool) {
        counter("depot_publishes_total", [("app", app), ("result", changed ? "published" : "unchanged")]).increment()
    }

    func uploaded(bytes: Int64) {
        counter("depot_upload_plaintext_bytes_total", []).increment(by: Int(bytes))
    }

    /// The Prometheus text exposition.
    func render(inFlightRequests: Int) -> [UInt8] {
        inFlight.record(inFlightRequests)
        return registry.emitToBuffer()
    }
}
