import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Whether a token check's time tells a guesser how much of the guess was right.
@Suite("Token timing", .serialized, .enabled(if: HeavyTests.enabled, "run alone by Deploy/setup.sh test, with DEPOT_HEAVY_TESTS=1"))
struct TokenTimingTests {
    /// Times `body` for two inputs in back-to-back batches (the order alternating) and returns
    /// the median of the per-round ratios (first / second): a burst of load from elsewhere falls
    /// on both halves of a round, so it moves a round's ratio little and the median not at all.
    static func medianRatio(rounds: Int = 61, batch: Int, _ first: String, _ second: String, _ body: (String) -> Void) -> Double {
        func time(_ input: String) -> Double {
            let start = ContinuousClock.now
            for _ in 0..<batch { body(input) }
            let elapsed = ContinuousClock.now - start
            return Double(elapsed.components.attoseconds) / 1e18 + Double(elapsed.components.seconds)
        }
        var ratios: [Double] = []
        for round in 0..<rounds {
            if round % 2 == 0 {
                let a = time(first)
                ratios.append(a / time(second))
            } else {
                let b = time(second)
                ratios.append(time(first) / b)
            }
        }
        return ratios.sorted()[ratios.count / 2]
    }

    @Test("A guess sharing all but the last character of a real token takes as long to refuse as one sharing none (median of paired, interleaved batches within 5%); the same harness sees an early-exit comparison leak")
    func noTimingLeak() throws {
        let data = TemporaryDirectory("depot-timing")
        defer { data.remove() }
        let folder = DataFolder(data.path)
        try folder.prepare()
        let store = TokenStore(folder: folder)
        for _ in 0..<3 { _ = try store.create(app: "com.example.other", role: .publisher) }
        let (token, _) = try store.create(app: "com.example.timing", role: .publisher)
        let nearMiss = String(token.dropLast()) + (token.last == "A" ? "B" : "A")
        let farMiss = String(repeating: "~", count: token.count)
        #expect(store.check(nearMiss) == .unknown && store.check(farMiss) == .unknown)
        guard case .valid = store.check(token) else { Issue.record("the real token is refused"); return }

        // The harness can see a leak of this size: an early-exit comparison of the raw strings.
        let secret = Array(token.utf8)
        func leakyEquals(_ guess: String) -> Bool {
            var index = 0
            for byte in guess.utf8 {
                guard index < secret.count, secret[index] == byte else { return false }
                index += 1
            }
            return index == secret.count
        }
        var sink = false
        let leaky = Self.medianRatio(batch: 5_000, nearMiss, farMiss) { sink = sink != leakyEquals($0) }
        #expect(leaky > 1.5, "an early-exit comparison takes longer for the near miss: \(leaky)")

        // The origin's check: the presented token is hashed and compared with every stored hash
        // in constant time, so how much of the guess was right cannot show.
        let origin = Self.medianRatio(batch: 500, nearMiss, farMiss) { sink = sink != (store.check($0) == .unknown) }
        #expect(abs(origin - 1) < 0.05, "near miss / far miss time of TokenStore.check: \(origin)")
        print("TokenTimingTests: near miss / far miss time, TokenStore.check \(origin), an early-exit comparison \(leaky)")
    }
}
