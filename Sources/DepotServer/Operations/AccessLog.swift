import DepotHTTP
import Foundation
import Logging

/// The access log: one structured line per exchange. Never a header, so never a token or
/// credentials.
struct AccessLog: Sendable {
    let logger: Logger

    func record(_ record: HTTPExchangeRecord) {
        logger.info("access", metadata: [
            "method": .string(record.method), "path": .string(record.path), "status": .stringConvertible(record.status),
            "bytes": .stringConvertible(record.bodyBytes), "duration_ms": .string(Self.milliseconds(record.duration)),
            "route": .string(record.route), "client": .string(record.clientAddress ?? "-"),
            "complete": .stringConvertible(record.completedNormally),
        ])
    }

    private static func milliseconds(_ duration: Duration) -> String {
        let ms = Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
        return String(format: "%.3f", ms)
    }
}
