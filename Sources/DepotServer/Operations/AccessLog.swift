import DepotHTTP
import Logging

/// The access log: one structured line per exchange. Never a header, so never a token or
/// credentials. Values are plain strings built without Foundation formatting (the log is on
/// every request's path).
struct AccessLog: Sendable {
    let logger: Logger

    func record(_ record: HTTPExchangeRecord) {
        guard logger.logLevel <= .info else { return }
        logger.info("access", metadata: [
            "method": .string(record.method), "path": .string(record.path), "status": .string(String(record.status)),
            "bytes": .string(String(record.bodyBytes)), "duration_ms": .string(Self.milliseconds(record.duration)),
            "route": .string(record.route), "client": .string(record.clientAddress ?? "-"),
            "complete": .string(record.completedNormally ? "true" : "false"),
        ])
    }

    /// Milliseconds with three decimals (`0.123`), by integer arithmetic.
    static func milliseconds(_ duration: Duration) -> String {
        let micros = duration.components.seconds * 1_000_000 + duration.components.attoseconds / 1_000_000_000_000
        let fraction = String(micros % 1000)
        return String(micros / 1000) + "." + String(repeating: "0", count: 3 - fraction.count) + fraction
    }
}
