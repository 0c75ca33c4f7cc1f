import Foundation
import Synchronization

/// Progress of a long transfer on stderr: a bar redrawn in place on a terminal, and plain
/// lines at every tenth otherwise (logs, CI), so that output stays readable in both.
final class ProgressReporter: Sendable {
    private struct State {
        var lastDraw = ContinuousClock.now - .seconds(1)
        var lastTenth = -1
        var start = ContinuousClock.now
        var startBytes: Int64 = -1
        var drawn = false
    }

    private let label: String
    private let terminal: Bool
    private let state = Mutex(State())

    init(label: String) {
        self.label = label
        terminal = isatty(STDERR_FILENO) == 1 && ProcessInfo.processInfo.environment["TERM"] != "dumb"
    }

    /// Reports `done` of `total` bytes.
    func update(_ done: Int64, of total: Int64) {
        let line: String? = state.withLock { state in
            let now = ContinuousClock.now
            if state.startBytes < 0 {
                state.startBytes = done
                state.start = now
            }
            let fraction = total > 0 ? Double(done) / Double(total) : 1
            let elapsed = now - state.start
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let rate = seconds > 0.2 ? Double(done - state.startBytes) / seconds : 0
            let rateText = rate > 0 ? "  \(Self.bytes(Int64(rate)))/s" : ""
            if terminal {
                guard now - state.lastDraw >= .milliseconds(100) || done == total else { return nil }
                state.lastDraw = now
                state.drawn = true
                let width = 30
                let filled = Int(fraction * Double(width))
                let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled)
                let eta = rate > 0 && done < total ? "  \(Int(Double(total - done) / rate))s left" : ""
                return "\r\u{1B}[2K\(label) \(bar) \(Int(fraction * 100))%  \(Self.bytes(done))/\(Self.bytes(total))\(rateText)\(eta)"
            }
            let tenth = Int(fraction * 10)
            guard tenth > state.lastTenth else { return nil }
            state.lastTenth = tenth
            return "\(label): \(tenth * 10)% (\(Self.bytes(done)) of \(Self.bytes(total)))\(rateText)\n"
        }
        if let line { FileHandle.standardError.write(Data(line.utf8)) }
    }

    /// Prints a line of its own, above the bar.
    func note(_ text: String) {
        let redraw = state.withLock { state -> Bool in
            defer { state.lastDraw = ContinuousClock.now - .seconds(1) }
            return state.drawn
        }
        FileHandle.standardError.write(Data(((redraw ? "\r\u{1B}[2K" : "") + text + "\n").utf8))
    }

    /// Ends the bar's line, if one was drawn.
    func finish() {
        if state.withLock({ $0.drawn }) { FileHandle.standardError.write(Data("\n".utf8)) }
    }

    static func bytes(_ count: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(count) B" : String(format: "%.1f %@", value, units[unit])
    }
}
