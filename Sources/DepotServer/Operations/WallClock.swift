import Foundation

/// The origin's calendar time: release dates, retention, report days, rollouts, expiries.
///
/// `Date()`, unless `DEPOT_CLOCK_FILE` names a file when the process starts: then the time is
/// the number of seconds since 1970 that file holds, read at every call (the year-of-life test
/// and `Deploy/bench/year.sh` run an origin and its CLI through a simulated year by rewriting
/// it). A file that cannot be read or holds no number gives `Date()`. Durations (timeouts,
/// rates, rests) are measured with `ContinuousClock`, never with this.
public enum WallClock {
    /// The file read for the time, or nil (the system's clock).
    static let file: String? = {
        guard let path = ProcessInfo.processInfo.environment["DEPOT_CLOCK_FILE"], !path.isEmpty else { return nil }
        return path
    }()

    /// Now, as the origin counts it.
    public static func now() -> Date {
        guard let file, let seconds = seconds(in: file) else { return Date() }
        return Date(timeIntervalSince1970: seconds)
    }

    /// The seconds `path` holds (a decimal number, whitespace around it), or nil.
    static func seconds(in path: String) -> Double? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, 63) }
        guard count > 0, let text = String(bytes: buffer.prefix(count), encoding: .utf8) else { return nil }
        return Double(text.trimmingCharacters(in: .whitespacesAndNewlines))
    }
}
