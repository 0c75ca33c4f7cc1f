import DepotCore
import DepotHTTP
import Foundation
import Metrics
import Prometheus
import Synchronization

/// The origin's metrics, through swift-metrics into a Prometheus registry of its own (so that
/// several servers in one process, as in tests, keep separate counts).
final class OriginMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory
    private let counters = Mutex<[String: Metrics.Counter]>([:])
    /// The handles of each route, resolved once: its timer, its bytes counter, a counter per status.
    private let routes = Mutex<[String: RouteMetrics]>([:])
    private let inFlight: Metrics.Gauge
    /// What each scrape reads anew (``Observations``): the data volume's gauges, and one expiry
    /// gauge per live channel, removed when its channel is.
    private let observed: Mutex<(volume: [String: Prometheus.Gauge], expiries: [String: Prometheus.Gauge])> = Mutex(([:], [:]))
    /// The channels whose rollout-halt counters the last scrape served (`app` NUL `channel`).
    private let haltChannels = Mutex<Set<String>>([])

    /// What `/metrics` reads at each scrape, for the alerts in `Deploy/prometheus/alerts.yml`.
    struct Observations {
        /// Free and total bytes of the data folder's volume (as an unprivileged writer sees them).
        var volume: (free: Int64, total: Int64)?
        /// The share of the volume patch making leaves free (`--patch-disk-reserve`).
        var reserve: Double
        /// How long a signed manifest is valid (`--manifest-lifetime-days`).
        var manifestLifetime: TimeInterval
        /// When the manifest each channel of each app serves expires.
        var expiries: [(app: String, channel: String, expiresAt: Date)]
        /// Every app.
        var apps: [String]
        /// How many data-folder files this process cannot read (``StateHealth``).
        var unreadableFiles = 0
        /// When the newest root of trust of each app that has one expires.
        var rootExpiries: [(app: String, expiresAt: Date)] = []
        /// Live envelopes' bytes kept in memory, and live releases sent from their files.
        var manifestMemory = 0
        var manifestsOnFile = 0
        /// Release files' bytes kept in memory for the release route (at most 8 MiB).
        var releaseMemory = 0
        /// Apps whose patches are being made or wait their turn (0: patch making is idle).
        var patchAppsWaiting = 0
        /// Release files this process decoded since it started.
        var releaseFilesRead = 0
    }

    /// Why a patch can be skipped (``patchSkipped(app:reason:)``).
    static let patchSkipReasons = ["scratch_limit", "disk_reserve", "oversized_zip", "too_many_entries", "allowance"]

    private final class RouteMetrics: Sendable {
        let timer: Metrics.Timer
        let bytes: Metrics.Counter
        let statuses: Mutex<[Int: Metrics.Counter]> = Mutex([:])
        init(timer: Metrics.Timer, bytes: Metrics.Counter) {
            self.timer = timer
            self.bytes = bytes
        }
    }

    init() {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = [
            .milliseconds(1), .milliseconds(5), .milliseconds(25), .milliseconds(100), .milliseconds(500),
            .seconds(1), .seconds(5), .seconds(30), .seconds(120), .seconds(600),
        ]
        self.factory = factory
        inFlight = Metrics.Gauge(label: "depot_http_requests_in_flight", factory: factory)
        // Prometheus's convention for what is running: a constant 1 labelled with the version.
        registry.makeGauge(
            descriptor: MetricNameDescriptor(metricName: "depot_build_info", unitName: "", helpText: "The running depot's version (the value is always 1)"),
            labels: [("version", AssetDepotVersion.current)]
        ).set(Double(1))
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
        let route = routes.withLock { cache in
            if let hit = cache[exchange.route] { return hit }
            let made = RouteMetrics(
                timer: Metrics.Timer(label: "depot_http_request_duration_seconds", dimensions: [("route", exchange.route)], factory: factory),
                bytes: Metrics.Counter(label: "depot_http_response_body_bytes_total", dimensions: [("route", exchange.route)], factory: factory)
            )
            cache[exchange.route] = made
            return made
        }
        let requests = route.statuses.withLock { cache in
            if let hit = cache[exchange.status] { return hit }
            let made = counter("depot_http_requests_total", [("route", exchange.route), ("status", String(exchange.status))])
            cache[exchange.status] = made
            return made
        }
        requests.increment()
        if exchange.bodyBytes > 0 { route.bytes.increment(by: Int(exchange.bodyBytes)) }
        route.timer.recordNanoseconds(Int64(exchange.duration.components.seconds) * 1_000_000_000 + exchange.duration.components.attoseconds / 1_000_000_000)
    }

    func published(app: String, changed: Bool) {
        counter("depot_publishes_total", [("app", app), ("result", changed ? "published" : "unchanged")]).increment()
    }

    /// A patch not made or not released: one of ``patchSkipReasons``.
    /// CPU seconds a background pass spent (`work`: `patches`, `maintenance`).
    func backgroundWork(_ work: String, seconds: Double) {
        guard seconds > 0 else { return }
        Metrics.FloatingPointCounter(label: "depot_background_cpu_seconds_total", dimensions: [("work", work)], factory: factory).increment(by: seconds)
    }

    /// A maintenance pass finished, or patch making ran out of work (`work`: `maintenance`, `patches`).
    func backgroundPass(_ work: String) {
        counter("depot_background_passes_total", [("work", work)]).increment()
    }

    func patchSkipped(app: String, reason: String) {
        counter("depot_patches_skipped_total", [("app", app), ("reason", reason)]).increment()
    }

    /// A rollout halted: `by` is `automatic` (its failure rate crossed the threshold) or `hand`.
    func rolloutHalted(app: String, channel: String, by: String) {
        counter("depot_rollouts_halted_total", [("app", app), ("channel", channel), ("by", by)]).increment()
    }

    /// A device report: `counted`, or why it was refused (`rate_limited`, `invalid`, `unknown_revision`, `too_large`).
    func report(app: String, result: String) {
        counter("depot_reports_total", [("app", app), ("result", result)]).increment()
    }

    /// An OIDC token exchange: `issued`, or the check that refused it.
    func oidcExchange(result: String) {
        counter("depot_oidc_exchanges_total", [("result", result)]).increment()
    }

    /// App Attest: `route` `challenge` (`issued`, or `rate_limited`, `too_many_challenges`, `busy`,
    /// `not_configured`, `read_only`) or `keys` (`accepted`, or `rate_limited`, `too_large`,
    /// `invalid`, `unknown_challenge`, `key_known`, `not_configured`, `read_only`, or the
    /// verifier's check that refused it: `format`, `chain`, `nonce`, `key_id`, `app_id`, `counter`,
    /// `environment`, `credential_id`).
    func attestation(app: String, route: String, result: String) {
        counter("depot_attest_total", [("app", app), ("route", route), ("result", result)]).increment()
    }

    func uploaded(bytes: Int64) {
        counter("depot_upload_plaintext_bytes_total", []).increment(by: Int(bytes))
    }

    /// The Prometheus text exposition.
    func render(inFlightRequests: Int, observations: Observations? = nil) -> [UInt8] {
        inFlight.record(inFlightRequests)
        if let observations { observe(observations) }
        return registry.emitToBuffer()
    }

    private func observe(_ observations: Observations) {
        observed.withLock { observed in
            func volume(_ name: String, _ help: String, _ value: Double) {
                let gauge = observed.volume[name] ?? registry.makeGauge(descriptor: MetricNameDescriptor(metricName: name, unitName: "", helpText: help))
                observed.volume[name] = gauge
                gauge.set(value)
            }
            if let space = observations.volume {
                volume("depot_data_volume_free_bytes", "Free bytes of the data folder's volume", Double(space.free))
                volume("depot_data_volume_size_bytes", "Total bytes of the data folder's volume", Double(space.total))
            } else {
                // Unreadable now: no figure rather than the last one.
                for name in ["depot_data_volume_free_bytes", "depot_data_volume_size_bytes"] {
                    if let gauge = observed.volume.removeValue(forKey: name) { registry.unregisterGauge(gauge) }
                }
            }
            volume("depot_patch_disk_reserve_ratio", "The share of the data volume patch making leaves free", observations.reserve)
            volume("depot_manifest_lifetime_seconds", "How long a signed manifest is valid", observations.manifestLifetime)
            volume("depot_state_unreadable_files", "Data-folder files the origin cannot read (their names are in the log and on /healthz)", Double(observations.unreadableFiles))
            volume("depot_manifest_memory_bytes", "Live envelopes' bytes kept in memory (at most --manifest-memory)", Double(observations.manifestMemory))
            volume("depot_manifests_on_file", "Live releases past the memory budget, sent from their files", Double(observations.manifestsOnFile))
            volume("depot_patch_apps_waiting", "Apps whose patches are being made or wait their turn (0: idle)", Double(observations.patchAppsWaiting))
            volume("depot_release_files_read", "Release files decoded since the process started (start-up and background work read few; see docs/Operating.md)", Double(observations.releaseFilesRead))
            volume("depot_release_memory_bytes", "Release files' bytes kept in memory for GET …/releases/{n} (at most 8 MiB; the rest go by sendfile)", Double(observations.releaseMemory))
            var seen: Set<String> = []
            for expiry in observations.expiries {
                let key = expiry.app + "\u{0}" + expiry.channel
                seen.insert(key)
                let gauge = observed.expiries[key] ?? registry.makeGauge(
                    descriptor: MetricNameDescriptor(
                        metricName: "depot_manifest_expiry_timestamp_seconds", unitName: "",
                        helpText: "When the signed manifest a channel serves expires (the origin signs it again with a third of its lifetime left)"
                    ), labels: [("app", expiry.app), ("channel", expiry.channel)]
                )
                observed.expiries[key] = gauge
                gauge.set(expiry.expiresAt.timeIntervalSince1970)
            }
            for (key, gauge) in observed.expiries where !key.hasPrefix("\u{1}") && !seen.contains(key) {
                registry.unregisterGauge(gauge)
                observed.expiries[key] = nil
            }
            // Roots of trust, keyed apart from channels ("\u{1}" and the app).
            var roots: Set<String> = []
            for root in observations.rootExpiries {
                let key = "\u{1}" + root.app
                roots.insert(key)
                let gauge = observed.expiries[key] ?? registry.makeGauge(
                    descriptor: MetricNameDescriptor(
                        metricName: "depot_root_expiry_timestamp_seconds", unitName: "",
                        helpText: "When the newest root of trust of an app expires: devices pinning it then take no new manifest until the next version is signed (depot root sign) and added"
                    ), labels: [("app", root.app)]
                )
                observed.expiries[key] = gauge
                gauge.set(root.expiresAt.timeIntervalSince1970)
            }
            for (key, gauge) in observed.expiries where key.hasPrefix("\u{1}") && !roots.contains(key) {
                registry.unregisterGauge(gauge)
                observed.expiries[key] = nil
            }
        }
        // The event counters the alert rules watch, at 0 before their first event: Prometheus's
        // increase() sees nothing in a series' first sample, so a counter that first appeared at
        // 1 (an app's first skipped patch, a channel's first halt) would never alert.
        for app in observations.apps {
            for reason in Self.patchSkipReasons { _ = counter("depot_patches_skipped_total", [("app", app), ("reason", reason)]) }
            _ = counter("depot_reports_total", [("app", app), ("result", "shed")])
        }
        var channels: Set<String> = []
        for expiry in observations.expiries {
            channels.insert(expiry.app + "\u{0}" + expiry.channel)
            for by in Self.haltedBy { _ = counter("depot_rollouts_halted_total", [("app", expiry.app), ("channel", expiry.channel), ("by", by)]) }
        }
        // A channel that went away takes its halt counters with it (as its expiry gauge).
        let gone = haltChannels.withLock { known in
            defer { known = channels }
            return known.subtracting(channels)
        }
        for key in gone {
            let parts = key.split(separator: "\u{0}", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 2 else { continue }
            for by in Self.haltedBy { forget("depot_rollouts_halted_total", [("app", parts[0]), ("channel", parts[1]), ("by", by)]) }
        }
    }

    /// Who halts a rollout (``rolloutHalted(app:channel:by:)``).
    static let haltedBy = ["automatic", "hand"]

    /// Removes a counter from the exposition (a channel that no longer exists).
    private func forget(_ label: String, _ dimensions: [(String, String)]) {
        let key = label + dimensions.map { "|\($0.0)=\($0.1)" }.joined()
        counters.withLock { $0.removeValue(forKey: key) }?.destroy()
    }
}
