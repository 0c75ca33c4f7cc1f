import Foundation
import Logging
import Synchronization

/// A swift-log handler for stderr that buffers lines instead of writing each one: the access
/// log costs one `write(2)` per 32 KiB rather than per request. Warnings and worse flush at
/// once; a timer flushes every 500 ms; ``flush()`` runs at shutdown.
/// Lines: `2026-11-22T03:17:32.123Z info assetdepot: access bytes=16 method=GET …`.
struct BufferedLogHandler: LogHandler {
    final class Sink: Sendable {
        static let shared = Sink()
        private let buffer = Mutex<[UInt8]>([])

        private init() {
            Thread.detachNewThread {
                while true {
                    usleep(500_000)
                    Sink.shared.flush()
                }
            }
        }

        func append(_ line: [UInt8], urgent: Bool) {
            let full = buffer.withLock { buffer -> Bool in
                buffer.append(contentsOf: line)
                return buffer.count >= 32 << 10
            }
            if full || urgent { flush() }
        }

        func flush() {
            let pending = buffer.withLock { buffer -> [UInt8] in
                let taken = buffer
                buffer.removeAll(keepingCapacity: true)
                return taken
            }
            guard !pending.isEmpty else { return }
            pending.withUnsafeBytes { bytes in
                var written = 0
                while written < bytes.count {
                    let n = write(2, bytes.baseAddress! + written, bytes.count - written)
                    if n <= 0 { if errno == EINTR { continue }; return }
                    written += n
                }
            }
        }
    }

    let label: String
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        // Bytes appended in place: the access log makes one line per request.
        var line: [UInt8] = []
        line.reserveCapacity(256)
        Self.appendTimestamp(to: &line)
        line.append(32)
        line.append(contentsOf: event.level.rawValue.utf8)
        line.append(32)
        line.append(contentsOf: label.utf8)
        line.append(contentsOf: ": ".utf8)
        line.append(contentsOf: event.message.description.utf8)
        let merged = metadata.isEmpty ? (event.metadata ?? [:]) : metadata.merging(event.metadata ?? [:]) { $1 }
        for (key, value) in merged.sorted(by: { $0.key < $1.key }) {
            line.append(32)
            line.append(contentsOf: key.utf8)
            line.append(61)
            if case .string(let text) = value { line.append(contentsOf: text.utf8) } else { line.append(contentsOf: value.description.utf8) }
        }
        line.append(10)
        Sink.shared.append(line, urgent: event.level >= .warning)
    }

    /// `2026-11-22T03:17:32` for the current second, kept until the second changes.
    private static let secondPrefix = Mutex<(second: Int, text: [UInt8])>((-1, []))

    private static func appendTimestamp(to line: inout [UInt8]) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let second = now.tv_sec
        let prefix = secondPrefix.withLock { cached -> [UInt8] in
            if cached.second == second { return cached.text }
            var seconds = second
            var parts = tm()
            gmtime_r(&seconds, &parts)
            func pad(_ value: Int32, _ width: Int) -> String {
                let text = String(value)
                return String(repeating: "0", count: max(0, width - text.count)) + text
            }
            let text = Array(("\(parts.tm_year + 1900)-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T\(pad(parts.tm_hour, 2)):"
                + "\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2))").utf8)
            cached = (second, text)
            return text
        }
        line.append(contentsOf: prefix)
        let millis = Int(now.tv_nsec / 1_000_000)
        line.append(46)
        line.append(UInt8(48 + millis / 100))
        line.append(UInt8(48 + millis / 10 % 10))
        line.append(UInt8(48 + millis % 10))
        line.append(90)
    }
}
