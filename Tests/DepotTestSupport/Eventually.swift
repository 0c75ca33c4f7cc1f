import Foundation

/// Waits for an event another thread or process brings about (a log line written after the
/// response, a manifest re-signed in the background): polls `condition` until it holds and
/// returns true. The bound only keeps a broken build from hanging the suite: two minutes, far
/// beyond what a busy 2-core machine needs, and never what a test asserts about speed.
public enum Eventually {
    public static let hangBound: Duration = .seconds(120)

    @discardableResult
    public static func wait(every interval: Duration = .milliseconds(20), _ condition: () throws -> Bool) rethrows -> Bool {
        let start = ContinuousClock.now
        while true {
            if try condition() { return true }
            if ContinuousClock.now - start > hangBound { return false }
            Thread.sleep(forTimeInterval: Double(interval.components.attoseconds) / 1e18 + Double(interval.components.seconds))
        }
    }

    @discardableResult
    public static func wait(every interval: Duration = .milliseconds(20), _ condition: () async throws -> Bool) async rethrows -> Bool {
        let start = ContinuousClock.now
        while true {
            if try await condition() { return true }
            if ContinuousClock.now - start > hangBound { return false }
            try? await Task.sleep(for: interval)
        }
    }
}
