import Logging
import Synchronization

/// A log handler that keeps every line in memory, for asserting on what a server logs.
public final class CapturedLog: Sendable {
    private let lines = Mutex<[String]>([])

    public init() {}

    /// Every line logged so far: message then `key=value` metadata.
    public var all: [String] { lines.withLock { $0 } }

    /// A logger writing here.
    public func logger() -> Logger {
        Logger(label: "test") { _ in Handler(log: self) }
    }

    struct Handler: LogHandler {
        let log: CapturedLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = metadata.merging(event.metadata ?? [:]) { $1 }
            let text = "\(event.message) " + merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            log.lines.withLock { $0.append(text) }
        }
    }
}
