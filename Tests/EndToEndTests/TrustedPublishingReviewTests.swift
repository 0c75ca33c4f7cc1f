import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// The outside review of trusted publishing (issue 50), findings reproduced against the real
/// `depot serve` and the loopback issuer: claims and issuers compared as Unicode, a rotation
/// answered 401 while the refetch allowance is spent. (The exchange behind an edge:
/// `TrustedPublishingEdgeTests.swift`.)
extension TrustedPublishingTests {
    @Test("Claims, audiences and issuers are compared byte for byte: a Kelvin sign is not a K, and a look-alike issuer is never fetched")
    func exactComparison() throws {
        let setup = try Setup()
        let issuer = setup.issuer.url + "/Kiosk"
        try setup.trust([
            "--issuer", issuer, "--allow-http", "--audience", "Kiosk", "--claim", "repository=studio/levels", "--claim", "ref=refs/heads/Kiosk-release",
        ])
        let good: [String: Any] = ["iss": issuer, "aud": "Kiosk", "repository": "studio/levels", "ref": "refs/heads/Kiosk-release"]
        let accepted = try setup.exchange(setup.issuer.mint(good))
        #expect(accepted.status == 201, "\(accepted.bodyText)")
        let kelvin = "\u{212A}iosk"
        #expect(kelvin == "Kiosk", "Swift's == is canonical equivalence: the trap")
        let lookAlike = good.merging(["iss": setup.issuer.url + "/" + kelvin]) { $1 }
        for (name, claims, kid, expected) in [
            ("a Kelvin sign in ref", good.merging(["ref": "refs/heads/\(kelvin)-release"]) { $1 }, nil, "oidc_claims"),
            ("a Kelvin sign in the audience", good.merging(["aud": kelvin]) { $1 }, nil, "oidc_audience"),
            ("a Kelvin sign in the issuer", lookAlike, nil, "oidc_issuer"),
            // A kid the origin does not hold made it fetch keys, with the token's spelling of iss.
            ("a Kelvin sign in the issuer, a new kid", lookAlike, "attacker-key", "oidc_issuer"),
        ] as [(String, [String: Any], String?, String)] {
            let answer = try setup.exchange(setup.issuer.mint(claims, kid: kid))
            #expect(answer.status == 401 && Self.code(answer) == expected, "\(name): \(answer.status) \(answer.bodyText)")
        }
        // Only the rule's own issuer was ever fetched.
        let paths = try setup.issuer.fetches().paths
        #expect(!paths.isEmpty && paths.allSatisfy { $0.hasPrefix("/Kiosk/") }, "\(paths)")
    }

    @Test("Right after a rotation, with the refetch allowance spent by someone else, a job's token naming the new key is answered 503 with Retry-After, never 401, and depot publish --oidc gets through by asking again")
    func rotationWithAllowanceSpent() throws {
        let setup = try Setup()
        try setup.trust(["--issuer", setup.issuer.url, "--allow-http", "--audience", "assetdepot", "--claim", "repository=studio/levels", "--channel", "beta"])
        let good: [String: Any] = ["aud": "assetdepot", "repository": "studio/levels"]
        #expect(try setup.exchange(setup.issuer.mint(good)).status == 201)
        // Someone spends the allowance with made-up kids (each new: it could be a key just published).
        var last: RawHTTP.Response?
        for index in 0..<10 {
            last = try setup.attempt(setup.issuer.mint(good, kid: "made-up-\(index)"))
            if let answer = last, answer.status == 503, Self.code(answer) == "oidc_keys_fetching" {
                Thread.sleep(forTimeInterval: 0.2)
                continue
            }
            break
        }
        #expect(last.map(Self.code) != "oidc_keys_fetching", "the allowance was never spent: \(last?.bodyText ?? "")")
        let kid = try #require((try JSONSerialization.jsonObject(with: Data(setup.issuer.post("/rotate"))) as? [String: String])?["kid"])
        let first = try setup.attempt(try setup.issuer.mint(good, key: kid))
        #expect(first.status == 503 && (first.header("Retry-After").flatMap(Int.init) ?? 0) >= 1, "\(first.status) \(first.bodyText)")
        #expect(Self.code(first) != "oidc_unknown_key")
        let published = try setup.publish(pack: "rotated", channel: "beta", ["--oidc-token-env", "DEPOT_ID_TOKEN"], environment: [
            "DEPOT_ID_TOKEN": try setup.issuer.mint(good, key: kid),
        ])
        #expect(published.status == 0, "\(published.stdout) \(published.stderr)")
        #expect(try setup.served("beta") == ["rotated"])
    }

    @Test("A kid someone asked for before the issuer published it is accepted once the issuer signs with it: 401 then, never a 401 remembered")
    func kidAskedBeforeItExisted() throws {
        let setup = try Setup()
        try setup.trust(["--issuer", setup.issuer.url, "--allow-http", "--audience", "assetdepot", "--claim", "repository=studio/levels"])
        let good: [String: Any] = ["aud": "assetdepot", "repository": "studio/levels"]
        #expect(try setup.exchange(setup.issuer.mint(good)).status == 201)
        // The test issuer names its next key rsa-2: someone asks for it first.
        let early = try setup.exchange(setup.issuer.mint(good, kid: "rsa-2"))
        #expect(early.status == 401 && Self.code(early) == "oidc_unknown_key", "\(early.bodyText)")
        Thread.sleep(forTimeInterval: 1.1)
        let kid = try #require((try JSONSerialization.jsonObject(with: Data(setup.issuer.post("/rotate"))) as? [String: String])?["kid"])
        #expect(kid == "rsa-2")
        let rotated = try setup.exchange(setup.issuer.mint(good, key: kid))
        #expect(rotated.status == 201, "\(rotated.status) \(rotated.bodyText)")
    }
}
