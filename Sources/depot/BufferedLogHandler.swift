import Foundation
import Logging
import Synchronization

/// A swift-log handler for stderr that buffers lines instead of writing each one: the access
/// log costs one `write(2)` per 32 KiB rather than per request. Warnings and worse flush at
/// once; a timer flushes every 500 ms; ``flush()`` runs at shutdown.
/// Lines: `2026-11-22T03:17:32.123Z info assetdepot: access bytes=16 method=GET …`.
///
/// Each thread appends to a buffer of its own (a lane), so that server threads logging every
/// request never wait on one lock or write into the same memory (one shared buffer cost the
/// origin about a tenth of its requests per second on two cores). Lines stay whole; lines of
/// different threads reach stderr in flush order, each with its timestamp.
struct BufferedLogHandler: LogHandler {
    final class Sink: Sendable {
        static let shared = Sink()

        /// One thread's pending bytes and the timestamp text of its current second.
        final class Lane: Sendable {
            struct State {
                var buffer: [UInt8] = []
                var second = -1
                var secondPrefix: [UInt8] = []
            }
            let state = Mutex(State())
        }

        private let lanes = Mutex<[Lane]>([])
        /// Held while writing, so that two flushes never interleave their bytes.
        private let writing = Mutex(())
        /// The calling thread's lane, through a POSIX thread-specific key.
        private let key: pthread_key_t = {
            var key = pthread_key_t()
            pthread_key_create(&key, nil)
            return key
        }()

        private init() {
            Thread.detachNewThread {
                while true {
                    usleep(500_000)
                    Sink.shared.flush()
                }
            }
        }

        private func lane() -> Lane {
            if let existing = pthread_getspecific(key) { return Unmanaged<Lane>.fromOpaque(existing).takeUnretainedValue() }
            let made = Lane()
            // The list keeps the lane (and flushes it) for as long as the process runs.
            lanes.withLock { $0.append(made) }
            pthread_setspecific(key, Unmanaged.passUnretained(made).toOpaque())
            return made
        }

        /// Appends one line, written in place: the access log makes one per request.
        func append(level: Logger.Level, label: String, message: String, metadata: Logger.Metadata) {
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            let full = lane().state.withLock { state -> Bool in
                if state.second != now.tv_sec {
                    state.second = now.tv_sec
                    state.secondPrefix = Self.secondText(now.tv_sec)
                }
                state.buffer.append(contentsOf: state.secondPrefix)
                let millis = Int(now.tv_nsec / 1_000_000)
                state.buffer.append(46)
                state.buffer.append(UInt8(48 + millis / 100))
                state.buffer.append(UInt8(48 + millis / 10 % 10))
                state.buffer.append(UInt8(48 + millis % 10))
                state.buffer.append(90)
                state.buffer.append(32)
                state.buffer.append(contentsOf: level.rawValue.utf8)
                state.buffer.append(32)
                state.buffer.append(contentsOf: label.utf8)
                state.buffer.append(contentsOf: ": ".utf8)
                state.buffer.append(contentsOf: message.utf8)
                for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
                    state.buffer.append(32)
                    state.buffer.append(contentsOf: key.utf8)
                    state.buffer.append(61)
                    if case .string(let text) = value { state.buffer.append(contentsOf: text.utf8) } else { state.buffer.append(contentsOf: value.description.utf8) }
                }
                state.buffer.append(10)
                return state.buffer.count >= 32 << 10
            }
            if full || level >= .warning { flush() }
        }

        /// Writes every lane's pending lines.
        func flush() {
            writing.withLock { _ in
                for lane in lanes.withLock({ $0 }) { drain(lane) }
            }
        }

        /// Writes one lane's pending lines.
        private func drain(_ lane: Lane) {
            let pending = lane.state.withLock { state -> [UInt8] in
                let taken = state.buffer
                state.buffer.removeAll(keepingCapacity: true)
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

        /// `2026-11-22T03:17:32` for a second since the epoch.
        private static func secondText(_ second: Int) -> [UInt8] {
            var seconds = second
            var parts = tm()
            gmtime_r(&seconds, &parts)
            func pad(_ value: Int32, _ width: Int) -> String {
                let text = String(value)
                return String(repeating: "0", count: max(0, width - text.count)) + text
            }
            return Array(("\(parts.tm_year + 1900)-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T\(pad(parts.tm_hour, 2)):"
                + "\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2))").utf8)
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
        let merged = metadata.isEmpty ? (event.metadata ?? [:]) : metadata.merging(event.metadata ?? [:]) { $1 }
        Sink.shared.append(level: event.level, label: label, message: event.message.description, metadata: merged)
    }
}
