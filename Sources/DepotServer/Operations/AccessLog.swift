import DepotHTTP
import Logging

/// The access log: one line per exchange. Never a header, so never a token or credentials.
///
/// The fields go in the message, in a fixed order (`access bytes=… client=… complete=…
/// duration_ms=… method=… path=… [query=…] route=… status=…`; the query only when there is
/// one: parameters a device adds, such as its platform), written into one buffer: a metadata
/// dictionary per request cost more than the rest of a blob GET's routing (hashing eight keys,
/// boxing eight values, sorting them in the handler).
struct AccessLog: Sendable {
    let logger: Logger
    /// Where lines go instead of through `logger` (which still decides whether they are written):
    /// the handler's own buffer, without a log event per request.
    var sink: (@Sendable (String) -> Void)?

    func record(_ record: HTTPExchangeRecord) {
        guard logger.logLevel <= .info else { return }
        if let sink { return sink(Self.line(record)) }
        logger.info(Logger.Message(stringLiteral: Self.line(record)))
    }

    static func line(_ record: HTTPExchangeRecord) -> String {
        // Device reports (answered or refused) are kept without any address.
        let client = record.method == "POST" && record.path.contains("/reports") ? "-" : record.clientAddress ?? "-"
        let capacity = 160 + record.path.utf8.count + record.query.utf8.count + record.method.utf8.count + record.route.utf8.count + client.utf8.count
        return TextAssembler.text(capacity: capacity) { line in
            line.append("access bytes=")
            line.append(record.bodyBytes)
            line.append(" client=")
            line.append(client)
            line.append(record.completedNormally ? " complete=true duration_ms=" : " complete=false duration_ms=")
            let micros = record.duration.components.seconds * 1_000_000 + record.duration.components.attoseconds / 1_000_000_000_000
            line.append(micros / 1000)
            line.append(byte: UInt8(ascii: "."))
            let fraction = micros % 1000
            line.append(byte: UInt8(48 + fraction / 100))
            line.append(byte: UInt8(48 + fraction / 10 % 10))
            line.append(byte: UInt8(48 + fraction % 10))
            line.append(" method=")
            line.append(record.method)
            line.append(" path=")
            line.append(record.path)
            if !record.query.isEmpty {
                line.append(" query=")
                line.append(record.query)
            }
            line.append(" route=")
            line.append(record.route)
            line.append(" status=")
            line.append(Int64(record.status))
        }
    }
}
