import DepotCore
import DepotTestSupport
import Foundation
import Synchronization
import Testing

/// The token exchange behind an edge (issue 50): every CI job and every attacker arrive from the
/// edge's address, so the origin takes the client from a trusted edge's `X-Forwarded-For`, and
/// budgets the exchange per app once a token could be the app's.
extension TrustedPublishingTests {
    @Test("Behind a trusted edge each job has its own address and each app its own budget: junk from many forwarded addresses, for one app, for an app that does not exist and malformed for a third, leaves the third app's jobs exchanging at their first try")
    func floodBehindEdge() throws {
        let setup = try Setup(environment: ["DEPOT_TRUSTED_PROXIES": "127.0.0.1/32"])
        let other = "com.example.other"
        let created = try Processes.run(Processes.depotBinary, ["apps", "create", other, "--data", setup.data])
        #expect(created.status == 0, "\(created.stderr)")
        try setup.trust(["--issuer", setup.issuer.url, "--allow-http", "--audience", "noisy", "--claim", "repository=studio/levels"])
        let trusted = try Processes.run(Processes.depotBinary, [
            "apps", "trust", other, "--data", setup.data, "--issuer", setup.issuer.url, "--allow-http", "--audience", "quiet", "--claim", "repository=studio/quiet",
        ])
        #expect(trusted.status == 0, "\(trusted.stderr)")
        let jobs = try (0..<3).map { _ in try setup.issuer.mint(["aud": "quiet", "repository": "studio/quiet"]) }
        // The issuer's keys fetched (the exchange's 503s while they are, asked again).
        #expect(try setup.exchange(jobs[0], app: other).status == 201)

        // Junk that passes every cheap check for the noisy app (its issuer, a well-formed token)
        // and fails at the signature; junk for an app that does not exist; junk that is not a
        // JWT for the quiet app. Each request from another forwarded address.
        let valid = try setup.issuer.mint(["aud": "noisy", "repository": "studio/levels"]).split(separator: ".")
        let forged = valid[0] + "." + valid[1] + "." + String(valid[2].reversed())
        let junk: [(app: String, jwt: String)] = [(Self.app, forged), ("com.example.nope", forged), (other, "x.y.z")]
        let port = setup.port
        let stop = Atomic(false)
        let statuses = Mutex<[String: [Int: Int]]>([:])
        let flooders = (0..<4).map { thread in
            Thread {
                var index = 0
                while !stop.load(ordering: .relaxed) {
                    let (app, jwt) = junk[index % junk.count]
                    let address = "198.51.\(thread).\(index % 250 + 1)"
                    if let answer = try? Setup.attempt(port: port, jwt, app: app, forwardedFor: address) {
                        statuses.withLock { $0[app, default: [:]][answer.status, default: 0] += 1 }
                    }
                    index += 1
                }
            }
        }
        let began = ContinuousClock.now
        for flooder in flooders { flooder.start() }
        defer { stop.store(true, ordering: .relaxed) }
        Thread.sleep(forTimeInterval: 1.5)
        // The quiet app's jobs, each from its own runner's address, at their first try.
        for (index, job) in jobs.enumerated().dropFirst() {
            let answer = try setup.attempt(job, app: other, forwardedFor: "203.0.113.\(index)")
            #expect(answer.status == 201, "the quiet app's job during the flood: \(answer.status) \(answer.bodyText)")
            Thread.sleep(forTimeInterval: 0.5)
        }
        stop.store(true, ordering: .relaxed)
        Thread.sleep(forTimeInterval: 0.3)
        let seen = statuses.withLock { $0 }
        let total = seen.values.flatMap(\.values).reduce(0, +)
        print("junk behind the edge: \(total) requests in \(ContinuousClock.now - began): \(seen)")
        #expect(total > 60, "the flood was \(total) requests: \(seen)")
        // Forged tokens naming the noisy app's issuer spend no budget, not even that app's (the
        // budget is charged after the signature verified); all junk is refused on its own terms,
        // never by a rate limit (behind the edge, each forwarded address has its own).
        #expect(Set(seen[Self.app]?.keys.map { $0 } ?? []) == [401], "\(seen)")
        #expect(Set(seen["com.example.nope"]?.keys.map { $0 } ?? []) == [404], "\(seen)")
        #expect(Set(seen[other]?.keys.map { $0 } ?? []) == [401], "\(seen)")
    }

    @Test("X-Forwarded-For from a peer that is not a trusted proxy is ignored: its requests share the peer's budget")
    func untrustedForwardedFor() throws {
        let setup = try Setup(environment: ["DEPOT_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.1"])
        var statuses: [Int] = []
        for index in 0..<14 {
            statuses.append(try setup.attempt("x.y.z", forwardedFor: "198.51.100.\(index + 1)").status)
        }
        #expect(statuses.prefix(10).allSatisfy { $0 == 401 } && statuses.suffix(2).allSatisfy { $0 == 429 }, "\(statuses)")
    }
}
