import DepotCore
import Foundation
import Synchronization

/// The challenges of `POST …/attest/challenges`: 32 random bytes each, for one app, used once,
/// valid for ``lifetime``, kept in memory only (a restart drops them: the app asks again).
///
/// Bounded: at most ``perAddress`` outstanding per client address (``ReportRateLimiter/key(_:)``:
/// an IPv4 address or an IPv6 /64) and ``total`` in all, so a flood holds at most `total` × ~100
/// bytes. Past a bound the caller learns when the oldest challenge in its way expires. Expired
/// challenges leave in the order they were issued (the lifetime is one for all, so the queue of
/// issues is also the queue of expiries): each call does the expiry work that is due, no scan.
final class AttestChallenges: Sendable {
    struct Issued: Sendable {
        var app: String
        var address: String
        var expires: ContinuousClock.Instant
    }

    enum Refusal: Error, Equatable {
        /// The address holds ``perAddress`` unused challenges: the seconds until its oldest expires.
        case address(retryAfter: Int)
        /// ``total`` are outstanding: the seconds until the oldest of all expires.
        case full(retryAfter: Int)
    }

    let lifetime: Duration
    let perAddress: Int
    let total: Int

    private struct State {
        var outstanding: [[UInt8]: Issued] = [:]
        /// Per address, its outstanding challenges' expiries, oldest first (at most ``perAddress``).
        var byAddress: [String: [ContinuousClock.Instant]] = [:]
        /// Every challenge issued and not yet expired or taken, in the order issued; taken ones
        /// are skipped when they reach the front.
        var queue: [[UInt8]] = []
        var head = 0
    }

    private let state = Mutex(State())

    init(lifetime: Duration = .seconds(300), perAddress: Int = 16, total: Int = 65_536) {
        (self.lifetime, self.perAddress, self.total) = (lifetime, perAddress, total)
    }

    /// The lifetime in whole seconds (the answer's `expiresIn`).
    var lifetimeSeconds: Int { Int(lifetime.components.seconds) }

    /// A new challenge for `app`, asked from `address`.
    func issue(app: String, address: String, now: ContinuousClock.Instant = .now) throws(Refusal) -> [UInt8] {
        let challenge = SecureRandom.bytes(32)
        try state.withLock { (state) throws(Refusal) in
            expire(&state, now: now)
            if let mine = state.byAddress[address], mine.count >= perAddress {
                throw .address(retryAfter: Self.seconds(until: mine[0], from: now))
            }
            if state.outstanding.count >= total {
                var oldest = now
                for challenge in state.queue[state.head...] {
                    if let issued = state.outstanding[challenge] {
                        oldest = issued.expires
                        break
                    }
                }
                throw .full(retryAfter: Self.seconds(until: oldest, from: now))
            }
            let expires = now + lifetime
            state.outstanding[challenge] = Issued(app: app, address: address, expires: expires)
            state.byAddress[address, default: []].append(expires)
            state.queue.append(challenge)
        }
        return challenge
    }

    /// Takes `challenge` for `app`: true once, when it was issued for that app and has not
    /// expired; it is gone afterwards whatever the answer (a challenge is never tried twice).
    func take(_ challenge: [UInt8], app: String, now: ContinuousClock.Instant = .now) -> Bool {
        state.withLock { state in
            expire(&state, now: now)
            guard let issued = state.outstanding.removeValue(forKey: challenge) else { return false }
            Self.forget(&state, issued)
            return issued.app.utf8.elementsEqual(app.utf8) && now < issued.expires
        }
    }

    /// How many challenges are outstanding (expired ones still queued included).
    var count: Int { state.withLock { $0.outstanding.count } }

    private func expire(_ state: inout State, now: ContinuousClock.Instant) {
        while state.head < state.queue.count {
            let challenge = state.queue[state.head]
            if let issued = state.outstanding[challenge] {
                guard issued.expires <= now else { break }
                state.outstanding[challenge] = nil
                Self.forget(&state, issued)
            }
            state.head += 1
        }
        // The queue's consumed front is dropped once it is most of it, and challenges taken
        // early once they are most of the rest (amortised O(1) per challenge either way).
        if state.head > 1_024 && state.head * 2 > state.queue.count {
            state.queue.removeFirst(state.head)
            state.head = 0
        }
        if state.queue.count - state.head > 2 * max(total, 512) {
            let outstanding = state.outstanding
            state.queue = state.queue[state.head...].filter { outstanding[$0] != nil }
            state.head = 0
        }
    }

    /// Removes one of `issued.address`'s expiries (the earliest equal one: they are all alike).
    private static func forget(_ state: inout State, _ issued: Issued) {
        guard var mine = state.byAddress[issued.address] else { return }
        if let index = mine.firstIndex(of: issued.expires) { mine.remove(at: index) } else { mine.removeFirst() }
        state.byAddress[issued.address] = mine.isEmpty ? nil : mine
    }

    static func seconds(until instant: ContinuousClock.Instant, from now: ContinuousClock.Instant) -> Int {
        let left = now.duration(to: instant)
        return max(1, Int(left.components.seconds) + (left.components.attoseconds > 0 ? 1 : 0))
    }
}
