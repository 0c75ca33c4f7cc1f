import Foundation

/// When a failed HTTP exchange is worth another attempt, and how long to wait first: the
/// one policy of the downloader and the uploader.
public struct RetryPolicy: Sendable, Hashable {
    /// Attempts after the first.
    public var retries: Int
    /// The first wait; it doubles per retry up to ``maximumDelay``.
    public var baseDelay: TimeInterval
    public var maximumDelay: TimeInterval
    /// Each wait is multiplied by a random factor in this range, so that clients that failed
    /// together do not come back together.
    public var jitter: ClosedRange<Double>

    public init(retries: Int, baseDelay: TimeInterval, maximumDelay: TimeInterval, jitter: ClosedRange<Double> = 0.5...1.5) {
        self.retries = max(0, retries)
        self.baseDelay = baseDelay
        self.maximumDelay = maximumDelay
        self.jitter = jitter
    }

    /// Downloads: 5 retries from 0.5 s, up to 30 s between attempts.
    public static let downloads = RetryPolicy(retries: 5, baseDelay: 0.5, maximumDelay: 30)
    /// Uploads: 12 retries from 0.25 s doubling to 8 s (about a minute), which outlasts the
    /// origin's default 30 s connection timeout (the time it may take to notice that an earlier
    /// attempt's connection died).
    public static let uploads = RetryPolicy(retries: 12, baseDelay: 0.25, maximumDelay: 8, jitter: 0.8...1.2)

    /// Statuses that say "try again later": any 5xx, 408 and 429.
    public static func isRetryable(status: Int) -> Bool { status >= 500 || status == 408 || status == 429 }

    /// The wait before retry number `attempt` (1 for the first retry).
    public func delay(beforeRetry attempt: Int) -> TimeInterval {
        min(maximumDelay, baseDelay * pow(2, Double(max(0, attempt - 1)))) * Double.random(in: jitter)
    }

    /// Waits before retry number `attempt`; returns early if the task is cancelled.
    public func wait(beforeRetry attempt: Int) async {
        try? await Task.sleep(for: .milliseconds(Int(delay(beforeRetry: attempt) * 1000)))
    }
}
