import Foundation
import Synchronization

/// The origin's calendar time: release dates, retention, report days, rollouts, its own expiries.
///
/// `Date()`, unless `DEPOT_CLOCK_FILE` names a file when the process starts: then the time is
/// the number of seconds since 1970 that file holds, read at every call (the year-of-life test
/// and `Deploy/bench/year.sh` run an origin and its CLI through simulated days by rewriting it).
/// For tests only: `depot serve` warns when it is set and `depot restore` refuses to run. The
/// file must be a plain file of this process's user that no one else may write, holding a
/// time between 2001 and 2286; one that is not, or cannot be read, gives the last time read
/// from it (`Date()` before the first). Durations (timeouts, rates, rests) are measured with
/// `ContinuousClock`, never with this; times that others check stay on `Date()`: S3's
/// signatures and the bucket's writer lease (shared with other hosts), an OIDC issuer's token
/// times, App Attest certificates.
public enum WallClock {
    /// The file read for the time, or nil (the system's clock).
    public static let file: String? = {
        guard let path = ProcessInfo.processInfo.environment["DEPOT_CLOCK_FILE"], !path.isEmpty else { return nil }
        return path
    }()

    /// The last time read from ``file``.
    private static let last = Mutex<Double?>(nil)

    /// Now, as the origin counts it.
    public static func now() -> Date {
        guard let file else { return Date() }
        if let seconds = seconds(in: file) {
            last.withLock { $0 = seconds }
            return Date(timeIntervalSince1970: seconds)
        }
        return last.withLock { $0 }.map(Date.init(timeIntervalSince1970:)) ?? Date()
    }

    /// The seconds `path` holds (a decimal number, whitespace around it), or nil: not a plain
    /// file of this user, writable by others, unreadable, or not a time between 2001 and 2286.
    static func seconds(in path: String) -> Double? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid(), info.st_mode & 0o022 == 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, 63) }
        guard count > 0, let text = String(bytes: buffer.prefix(count), encoding: .utf8),
              let seconds = Double(text.trimmingCharacters(in: .whitespacesAndNewlines)), seconds.isFinite,
              seconds >= 1e9, seconds < 1e10 else { return nil }
        return seconds
    }
}
