import Foundation
import Synchronization

/// The token exchange's rate limits, in two stages, so that no one's noise starves another
/// app's CI jobs:
///
/// - before anything is decoded, a bucket per client address (5 a second, 10 at once): one
///   sender floods only itself. The address is the client's, not the edge's (`--trusted-proxy`):
///   behind an edge every job and every attacker would otherwise be one address.
/// - once a token passed the checks that cost nothing (its app exists, it is a JWT, a rule of the
///   app names its issuer), a bucket per app (5 a second, 10 at once) and one for all (50 a
///   second, 100 at once) before keys are looked up, signatures verified and tokens minted. Junk
///   for an app that does not exist, or that is no JWT of its issuers, costs no app anything; an
///   app's own noise spends its own budget, and at most its share of the one for all.
///
/// Nothing refuses a sender for others' traffic before decoding: a flood from many addresses
/// costs the origin the cheap checks, as every anonymous route does, and its expensive work is
/// bounded by the second stage.
struct ExchangeLimits: Sendable {
    let addresses: AddressBuckets
    let apps: ReportRateLimiter

    init(perAddress: Double = 5, perApp: Double = 5, total: Double = 50) {
        addresses = AddressBuckets(rate: perAddress)
        apps = ReportRateLimiter(perAddress: perApp, total: total)
    }
}

/// A token bucket per key (a client address: ``ReportRateLimiter/key(_:)``), with a burst of
/// twice the rate, and no bucket of all. At most ``remembered`` keys are kept: when that many
/// were active in the last two seconds (their buckets not yet full again), a new key is let
/// through unremembered rather than refused, so that a flood from many addresses never refuses
/// an address that sent nothing.
final class AddressBuckets: Sendable {
    static let remembered = 4_096

    private struct Bucket {
        var tokens: Double
        var at: ContinuousClock.Instant
    }

    let rate: Double
    private let state = Mutex<(buckets: [String: Bucket], prunedAt: ContinuousClock.Instant?)>(([:], nil))

    init(rate: Double) { self.rate = rate }

    /// Takes one token from `key`'s bucket: nil when allowed, else the whole seconds to wait.
    func take(_ key: String, now: ContinuousClock.Instant = .now) -> Int? {
        state.withLock { state in
            var bucket = state.buckets[key] ?? Bucket(tokens: rate * 2, at: now)
            let elapsed = Double((now - bucket.at).components.seconds) + Double((now - bucket.at).components.attoseconds) / 1e18
            bucket.tokens = min(rate * 2, bucket.tokens + max(0, elapsed) * rate)
            bucket.at = now
            guard bucket.tokens >= 1 else {
                state.buckets[key] = bucket
                return max(1, Int(((1 - bucket.tokens) / rate).rounded(.up)))
            }
            bucket.tokens -= 1
            if state.buckets[key] == nil, state.buckets.count >= Self.remembered {
                // Forget the full buckets (idle two seconds), at most every half second: under a
                // flood of new addresses the filter would otherwise run for each of them.
                if state.prunedAt.map({ now - $0 >= .milliseconds(500) }) ?? true {
                    let idle = Duration.seconds(2)
                    state.buckets = state.buckets.filter { now - $0.value.at < idle }
                    state.prunedAt = now
                }
                guard state.buckets.count < Self.remembered else { return nil }
            }
            state.buckets[key] = bucket
            return nil
        }
    }
}
