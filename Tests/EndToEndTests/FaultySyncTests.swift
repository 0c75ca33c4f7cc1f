import DepotClient
import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Synchronization
import Testing

/// Whole syncs through a proxy that fails at random: what a phone on a bad network, or a CDN
/// having a bad day, does to the client. The schedule comes from a seed (printed, and set with
/// `DEPOT_FAULT_SEED` to replay one); `DEPOT_FAULT_ROUNDS` sets how many fresh installs run
/// (2 in the default suite, more in `Deploy/reliability.sh`).
@Suite("Reliability: whole syncs through a proxy that fails at random")
struct FaultySyncTests {

    @Test("503s, 500s, stalls and bodies cut at random offsets: each run ends in bounded time, an installed pack is always whole, and runs again finish with every pack byte-identical")
    func randomFaults() async throws {
        let environment = ProcessInfo.processInfo.environment
        let seed = environment["DEPOT_FAULT_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64.max)
        let rounds = environment["DEPOT_FAULT_ROUNDS"].flatMap { Int($0) } ?? 2
        print("FaultySyncTests: DEPOT_FAULT_SEED=\(seed)")
        let sizes = ["tiny": 150_001, "small": 1 << 20, "medium": 3 * (1 << 20) + 17, "large": 6 << 20]
        let injected = Mutex<[String: Int]>([:])
        let proxy = try FaultyProxy { index, _ in
            var generator = SeededRandom(seed: seed ^ (UInt64(index) &* 0xD6E8_FEB8_6659_FD93))
            let roll = generator.next() % 100
            let behavior: FaultyProxy.Behavior = switch roll {
            case 0..<15: .respond(503)
            case 15..<20: .respond(500)
            case 20..<45: .cutAfter(Int(generator.next() % UInt64(6 << 20)))
            case 45..<50: .stall
            default: .forward
            }
            let name = switch behavior {
            case .respond(let status): "\(status)"
            case .cutAfter: "cut"
            case .stall: "stall"
            default: "forwarded"
            }
            injected.withLock { $0[name, default: 0] += 1 }
            return behavior
        }
        defer { proxy.stop() }
        try await withServer(configure: { $0.publicURL = "http://127.0.0.1:\(proxy.port)" }) { origin in
            proxy.upstreamPort = origin.port
            let work = TemporaryDirectory("depot-faults")
            defer { work.remove() }
            var expected: [String: String] = [:]
            for (index, (pack, size)) in sizes.sorted(by: { $0.key < $1.key }).enumerated() {
                let file = try work.file(pack, size: size, seed: UInt64(40 + index))
                try await publish(origin, file: file, pack: pack)
                expected[pack] = try SHA256Hasher.hexDigest(ofFile: file)
            }
            var totalRuns = 0
            for round in 0..<rounds {
                let destination = work.path + "/dest-\(round)"
                var sync = DepotSync(server: URL(string: "http://127.0.0.1:\(proxy.port)")!, configuration: try origin.clientConfiguration(), destination: destination)
                sync.timeout = 2
                var runs = 0
                var complete = false
                while !complete {
                    runs += 1
                    totalRuns += 1
                    #expect(runs <= 12, "round \(round) did not finish in 12 runs (seed \(seed))")
                    if runs > 12 { break }
                    let started = ContinuousClock.now
                    let report = try? await sync.sync()
                    let took = ContinuousClock.now - started
                    // A hang bound, not a speed claim: a pack's six attempts with 2 s timeouts and
                    // backoff take about 40 s at worst; three minutes means something never returned.
                    #expect(took < .seconds(180), "a run took \(took) (seed \(seed))")
                    // Whatever happened, a pack on disk is whole: exactly what was published.
                    let installed = FileSystem.contents(of: destination + "/packs")
                    #expect(Set(installed).isSubset(of: Set(sizes.keys)), "only installed packs, no temporary file: \(installed)")
                    for pack in installed {
                        #expect(try SHA256Hasher.hexDigest(ofFile: destination + "/packs/" + pack) == expected[pack], "\(pack) is partial or wrong (seed \(seed))")
                    }
                    complete = report?.failed.isEmpty == true && Set(installed) == Set(sizes.keys)
                }
                let state = try StateStore(destination: destination).read(app: origin.app)
                #expect(Set(state.packs.keys) == Set(sizes.keys), "the state records every pack (seed \(seed))")
                #expect(FileSystem.contents(of: destination + "/.depot/downloads").isEmpty, "no download left behind (seed \(seed))")
            }
            // The proxy sees connections. The socket engine opens one per request: at least the
            // manifest and three packs a round. URLSession keeps connections alive, so a round may
            // be a single connection (a new sync, a new session): at least one a round.
            #expect(proxy.requests.count >= (HTTPTransport.usesURLSession ? 1 : 4) * rounds, "the proxy saw the traffic")
            print("FaultySyncTests: \(rounds) fresh installs in \(totalRuns) runs; requests \(injected.withLock { $0 }.sorted { $0.key < $1.key })")
        }
    }
}
