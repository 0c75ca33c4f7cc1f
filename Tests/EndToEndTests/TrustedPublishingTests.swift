import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// Trusted publishing against a real OIDC issuer on loopback (`Fixtures/oidc_issuer.py`: its own
/// keys, discovery and JWKS) and the real `depot serve`: CI-shaped jobs publish with no stored
/// secret, every refusal names its check, and a token's scope holds on every route.
@Suite("Trusted publishing: CI jobs' OIDC tokens for short-lived, scoped publish tokens")
struct TrustedPublishingTests {
    static let app = "com.example.dev"

    @Test("A GitHub-Actions-shaped job publishes to its rule's channel with no stored secret, never to another; a replay gets the same scope; removing the rule ends its tokens")
    func githubActions() throws {
        let setup = try Setup()
        let rule = try setup.trust([
            "--issuer", setup.issuer.url, "--allow-http", "--audience", "assetdepot", "--claim", "repository=studio/levels",
            "--claim", "ref=refs/heads/main", "--channel", "beta",
        ])
        #expect(rule.hasPrefix("rule-"))
        try setup.issuer.post("/gha/claims", [
            "sub": "repo:studio/levels:ref:refs/heads/main", "repository": "studio/levels", "repository_owner": "studio",
            "ref": "refs/heads/main", "ref_type": "branch", "workflow": "publish", "event_name": "push", "repository_id": "123456",
        ])
        let github = [
            "ACTIONS_ID_TOKEN_REQUEST_URL": setup.issuer.url + "/gha/token?api-version=2.0",
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "gha-request-token", "GITHUB_ACTIONS": "true",
        ]
        let published = try setup.publish(pack: "level1", channel: "beta", ["--audience", "assetdepot"], environment: github)
        #expect(published.status == 0, "\(published.stdout) \(published.stderr)")
        #expect(published.stderr.contains("exchanged the job's OIDC token") && published.stderr.contains("channels beta"))
        #expect(try setup.served("beta") == ["level1"])

        // The same job cannot reach production: refused, and production serves nothing of it.
        let elsewhere = try setup.publish(pack: "level2", channel: "production", ["--audience", "assetdepot"], environment: github)
        #expect(elsewhere.status != 0)
        #expect(elsewhere.stderr.contains("channel_not_allowed") || elsewhere.stderr.contains("may act on channel beta only"), "\(elsewhere.stderr)")
        #expect(try !setup.served("production").contains("staged"), "a beta job's pack in production")
        // Another branch's job: refused at the exchange, naming the claim, not its value.
        try setup.issuer.post("/gha/claims", ["repository": "studio/levels", "ref": "refs/heads/feature", "sub": "repo:studio/levels:ref:refs/heads/feature"])
        let branch = try setup.publish(pack: "level3", channel: "beta", ["--audience", "assetdepot"], environment: github)
        #expect(branch.status != 0 && branch.stderr.contains("oidc_claims") && branch.stderr.contains("ref") && !branch.stderr.contains("feature"), "\(branch.stderr)")
        // A wrong request token (not the job's) gets no JWT at all.
        let stolen = try setup.publish(pack: "level3", channel: "beta", ["--audience", "assetdepot"], environment: github.merging(["ACTIONS_ID_TOKEN_REQUEST_TOKEN": "guess"]) { $1 })
        #expect(stolen.status != 0)

        // A replay of one JWT: a second token, with the same scope and no longer life.
        let jwt = try setup.issuer.mint(["aud": "assetdepot", "repository": "studio/levels", "ref": "refs/heads/main", "sub": "repo:studio/levels:ref:refs/heads/main"])
        let first = try Self.issued(setup.exchange(jwt)), second = try Self.issued(setup.exchange(jwt))
        #expect(first.tokenID != second.tokenID && first.channels == ["beta"] && second.channels == ["beta"] && first.rule == rule && second.rule == rule)
        #expect(second.expiresAt.timeIntervalSinceNow <= 15 * 60 + 5 && second.expiresAt.timeIntervalSinceNow <= 300 + 5)
        // At most ten tokens per JWT: a stolen one adds little to the file, and nothing to the scope.
        for _ in 2..<10 { #expect(try setup.exchange(jwt).status == 201) }
        let eleventh = try setup.exchange(jwt)
        #expect(eleventh.status == 401 && Self.code(eleventh) == "oidc_replayed", "\(eleventh.bodyText)")

        // `depot tokens list` shows it with its rule and job; the rule removed, its tokens are refused.
        let listed = try Processes.run(Processes.depotBinary, ["tokens", "list", "--data", setup.data])
        #expect(listed.stdout.contains(first.tokenID) && listed.stdout.contains(rule) && listed.stdout.contains("channels=beta"))
        #expect(try setup.call("GET", "/staging?channel=beta", token: first.token).status == 200)
        let removed = try Processes.run(Processes.depotBinary, ["apps", "trust", Self.app, "--data", setup.data, "--remove", rule])
        #expect(removed.status == 0 && removed.stdout.contains("removed \(rule)"))
        let after = try setup.call("GET", "/staging?channel=beta", token: first.token)
        #expect(after.status == 401 && Self.code(after) == "token_revoked", "\(after.bodyText)")
        let again = try setup.exchange(jwt)
        #expect(again.status == 401 && Self.code(again) == "oidc_no_rule", "\(again.bodyText)")
    }

    @Test("A GitLab-shaped job (its id_tokens variable, an ES256 key) publishes to its channel; a protected-ref claim is matched")
    func gitlab() throws {
        let setup = try Setup()
        try setup.trust([
            "--issuer", setup.issuer.url, "--allow-http", "--audience", "https://assets.example.com", "--claim", "project_path=studio/levels",
            "--claim", "ref_protected=true", "--channel", "beta", "--channel", "qa",
        ])
        let jwt = try setup.issuer.mint([
            "aud": "https://assets.example.com", "project_path": "studio/levels", "ref": "main", "ref_type": "branch", "ref_protected": "true",
            "namespace_path": "studio", "pipeline_source": "push", "sub": "project_path:studio/levels:ref_type:branch:ref:main",
        ], alg: "ES256", key: "ec-1")
        let job = try setup.publish(pack: "intro", channel: "qa", ["--oidc-token-env", "DEPOT_ID_TOKEN"], environment: ["DEPOT_ID_TOKEN": jwt, "GITLAB_CI": "true"])
        #expect(job.status == 0, "\(job.stdout) \(job.stderr)")
        #expect(try setup.served("qa") == ["intro"])
        // An unprotected ref's job (a boolean claim, as another issuer sends it) is refused.
        let unprotected = try setup.issuer.mint(["aud": "https://assets.example.com", "project_path": "studio/levels", "ref_protected": false], alg: "ES256", key: "ec-1")
        let refused = try setup.exchange(unprotected)
        #expect(refused.status == 401 && Self.code(refused) == "oidc_claims")
        let missing = try setup.publish(pack: "intro", channel: "qa", ["--oidc-token-env", "DEPOT_ID_TOKEN"], environment: ["GITLAB_CI": "true"])
        #expect(missing.status != 0 && missing.stderr.contains("DEPOT_ID_TOKEN"))
        // An issuer that is neither GitHub's nor gitlab.com's: the rule is made, with a warning.
        let other = try Processes.run(Processes.depotBinary, [
            "apps", "trust", Self.app, "--data", setup.data, "--issuer", setup.issuer.url, "--allow-http", "--audience", "x", "--claim", "team=levels",
        ])
        #expect(other.status == 0 && other.stderr.contains("not GitHub's or gitlab.com's issuer"), "\(other.stderr)")
    }

    @Test("Each forged or mismatched token is refused with the name of its check (401), logged and counted")
    func refusals() throws {
        let setup = try Setup()
        try setup.trust(["--issuer", setup.issuer.url, "--allow-http", "--audience", "assetdepot", "--claim", "repository=studio/levels"])
        let good: [String: Any] = ["aud": "assetdepot", "repository": "studio/levels"]
        let now = Int(Date().timeIntervalSince1970)
        #expect(try setup.exchange(setup.issuer.mint(good)).status == 201)
        #expect(try setup.exchange(setup.issuer.mint(good, alg: "ES256", key: "ec-1")).status == 201)
        #expect(try setup.exchange(setup.issuer.mint(good.merging(["aud": ["another", "assetdepot"]]) { $1 })).status == 201)

        let valid = try setup.issuer.mint(good)
        let parts = valid.split(separator: ".").map(String.init)
        var flipped = Array(parts[2].utf8)
        flipped[10] = flipped[10] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        let cases: [(String, String, String)] = [
            ("another issuer", try setup.issuer.mint(good.merging(["iss": "https://token.actions.githubusercontent.com"]) { $1 }), "oidc_issuer"),
            ("another audience", try setup.issuer.mint(good.merging(["aud": "pypi"]) { $1 }), "oidc_audience"),
            ("an audience list without ours", try setup.issuer.mint(good.merging(["aud": ["a", "b"]]) { $1 }), "oidc_audience"),
            ("expired", try setup.issuer.mint(good.merging(["exp": now - 120, "iat": now - 600, "nbf": now - 600]) { $1 }), "oidc_expired"),
            ("no expiry", try setup.issuer.mint(good.merging(["exp": "soon"]) { $1 }), "oidc_expired"),
            ("not yet valid", try setup.issuer.mint(good.merging(["nbf": now + 600, "exp": now + 900]) { $1 }), "oidc_not_yet_valid"),
            ("issued in the future", try setup.issuer.mint(good.merging(["iat": now + 600, "exp": now + 900]) { $1 }), "oidc_not_yet_valid"),
            ("alg none", try setup.issuer.mint(good, alg: "none"), "oidc_algorithm"),
            ("HS256 keyed with the public key", try setup.issuer.mint(good, alg: "HS256-public"), "oidc_algorithm"),
            ("an RSA kid on an ES256 token", try setup.issuer.mint(good, alg: "ES256", key: "ec-1", kid: "rsa-1"), "oidc_algorithm"),
            ("a claim that differs", try setup.issuer.mint(good.merging(["repository": "fork/levels"]) { $1 }), "oidc_claims"),
            ("a claim missing", try setup.issuer.mint(["aud": "assetdepot"]), "oidc_claims"),
            ("a changed signature", parts[0] + "." + parts[1] + "." + String(decoding: flipped, as: UTF8.self), "oidc_signature"),
            ("changed claims", parts[0] + "." + Base64URLText.encode(Array(#"{"iss":"\#(setup.issuer.url)","aud":"assetdepot","repository":"studio/levels","exp":\#(now + 9999)}"#.utf8)) + "." + parts[2], "oidc_signature"),
            ("not a JWT", "hello", "oidc_malformed"),
            ("an unknown kid", try setup.issuer.mint(good, kid: "made-up"), "oidc_unknown_key"),
        ]
        for (name, jwt, expected) in cases {
            let answer = try setup.exchange(jwt)
            #expect(answer.status == 401 && Self.code(answer) == expected, "\(name): \(answer.status) \(answer.bodyText)")
            #expect(!answer.bodyText.contains("fork/levels") && !answer.bodyText.contains("pypi"), "\(name): a claim's value in \(answer.bodyText)")
        }
        let bare = try setup.exchange(nil)
        #expect(bare.status == 401 && Self.code(bare) == "oidc_missing")
        let unknownApp = try setup.exchange(valid, app: "com.example.other")
        #expect(unknownApp.status == 404)
        // A token larger than the origin's header room is refused before anything reads it.
        let huge = try setup.exchange(parts[0] + "." + String(repeating: "A", count: 20_000) + "." + parts[2])
        #expect(huge.status == 431 || Self.code(huge) == "oidc_size", "\(huge.status)")

        let metrics = try #require(try RawHTTP.send(port: setup.port, "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(Setup.metricsToken)\r\nConnection: close\r\n\r\n").first).bodyText
        #expect(metrics.contains(#"depot_oidc_exchanges_total{result="issued"} 3"#), "\(metrics.split(separator: "\n").filter { $0.contains("oidc") })")
        #expect(metrics.contains(#"depot_oidc_exchanges_total{result="algorithm"} 3"#))
    }

    @Test("A rotated key is picked up at the first token that names it; made-up kids cost the issuer at most a few fetches; the issuer down means refused")
    func rotationAndOutage() throws {
        let setup = try Setup()
        try setup.trust(["--issuer", setup.issuer.url, "--allow-http", "--audience", "assetdepot", "--claim", "repository=studio/levels"])
        let good: [String: Any] = ["aud": "assetdepot", "repository": "studio/levels"]
        #expect(try setup.exchange(setup.issuer.mint(good)).status == 201)
        let kid = try #require((try JSONSerialization.jsonObject(with: Data(setup.issuer.post("/rotate"))) as? [String: String])?["kid"])
        let rotated = try setup.exchange(setup.issuer.mint(good, key: kid))
        #expect(rotated.status == 201, "\(rotated.bodyText)")
        // The old key is gone from the JWKS: its tokens are refused once the keys were fetched again.
        let old = try setup.exchange(setup.issuer.mint(good))
        #expect(old.status == 401 && Self.code(old) == "oidc_unknown_key", "\(old.bodyText)")

        let before = try setup.issuer.fetches()
        let start = Date()
        for index in 0..<30 {
            let answer = try setup.exchange(setup.issuer.mint(good, kid: "made-up-\(index)"))
            #expect(answer.status == 401 || answer.status == 503, "\(answer.bodyText)")
        }
        let after = try setup.issuer.fetches()
        let allowed = 3 + Int(Date().timeIntervalSince(start) / 20) + 1
        #expect(after.jwks - before.jwks <= allowed, "30 made-up kids made \(after.jwks - before.jwks) JWKS fetches")

        // Down: a new issuer the origin never reached, and the running one once its keys are due.
        let down = try OIDCIssuer()
        try setup.trust(["--issuer", down.url, "--allow-http", "--audience", "assetdepot", "--claim", "repository=studio/levels"])
        let token = try down.mint(good)
        try down.post("/down")
        var answers: [String] = []
        try Eventually.wait(every: .milliseconds(50)) {
            let answer = try setup.exchange(token)
            #expect(answer.status != 201, "accepted while the issuer is down")
            answers.append(Self.code(answer))
            return Self.code(answer) == "oidc_keys_unavailable"
        }
        #expect(answers.last == "oidc_keys_unavailable" && answers.allSatisfy { $0 == "oidc_keys_unavailable" || $0 == "oidc_keys_fetching" }, "\(answers)")
        down.stop()
        let gone = try setup.exchange(token)
        #expect(gone.status == 503 && Self.code(gone) == "oidc_keys_unavailable")
    }

    @Test("A token for beta never moves production: release, promote, rollouts and a draft it staged are refused there; the token expires with the JWT")
    func scope() throws {
        let setup = try Setup()
        try setup.trust(["--issuer", setup.issuer.url, "--allow-http", "--audience", "assetdepot", "--claim", "repository=studio/levels", "--channel", "beta"])
        let good: [String: Any] = ["aud": "assetdepot", "repository": "studio/levels"]
        var beta = try Self.issued(setup.exchange(setup.issuer.mint(good))).token
        let body = Array("level bytes".utf8)
        let staged = try setup.call("PUT", "/packs/staged", token: beta, body: body)
        #expect(staged.status == 202, "\(staged.bodyText)")
        // The change it staged goes to beta only, whoever releases it — after a restart too.
        try setup.restart()
        let human = try setup.call("POST", "/releases", token: setup.human)
        #expect(human.status == 409 && Self.code(human) == "draft_scoped", "\(human.bodyText)")
        // A job of another rule (qa) stages beside it: neither job may drop or release the other's.
        try setup.trust(["--issuer", setup.issuer.url, "--allow-http", "--audience", "qa", "--claim", "repository=studio/levels", "--channel", "qa"])
        let qa = try Self.issued(setup.exchange(setup.issuer.mint(good.merging(["aud": "qa"]) { $1 }))).token
        #expect(try setup.call("PUT", "/packs/qa-only", token: qa, body: body).status == 202)
        let dropOther = try setup.call("DELETE", "/packs/qa-only", token: beta)
        #expect(dropOther.status == 403 && Self.code(dropOther) == "channel_not_allowed", "\(dropOther.bodyText)")
        let mixed = try setup.call("POST", "/releases?channel=beta", token: beta)
        #expect(mixed.status == 409 && Self.code(mixed) == "draft_scoped", "\(mixed.bodyText)")
        // A person drops the qa change; then beta's job releases its own on beta.
        #expect(try setup.call("DELETE", "/packs/qa-only", token: setup.human).status == 200)
        beta = try Self.issued(setup.exchange(setup.issuer.mint(good))).token
        #expect(try setup.call("POST", "/releases?channel=beta", token: beta).status == 201)
        #expect(try setup.served("beta") == ["staged"])
        // What a person staged, a job does not release (nor replace), on any channel.
        #expect(try setup.call("PUT", "/packs/by-hand", token: setup.human, body: body).status == 202)
        let notYours = try setup.call("POST", "/releases?channel=beta", token: beta)
        #expect(notYours.status == 409 && Self.code(notYours) == "draft_not_yours", "\(notYours.bodyText)")
        let replace = try setup.call("PUT", "/packs/by-hand", token: beta, body: body + [1])
        #expect(replace.status == 403 && Self.code(replace) == "channel_not_allowed", "\(replace.bodyText)")
        #expect(try setup.call("DELETE", "/packs/by-hand", token: setup.human).status == 200)
        // Nor writes into, or ends, a person's resumable upload.
        let created = try #require(try RawHTTP.send(port: setup.port, "POST /v1/apps/\(Self.app)/uploads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(setup.human)\r\nTus-Resumable: 1.0.0\r\nUpload-Length: 11\r\nUpload-Metadata: pack \(Data("tus".utf8).base64EncodedString())\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").first)
        let location = try #require(created.header("Location").flatMap { URL(string: $0)?.path })
        let patched = try #require(try RawHTTP.send(port: setup.port, "PATCH \(location) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(beta)\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\nContent-Type: application/offset+octet-stream\r\nContent-Length: 11\r\nConnection: close\r\n\r\n", body: body).first)
        #expect(patched.status == 403, "\(patched.bodyText)")
        let ended = try #require(try RawHTTP.send(port: setup.port, "DELETE \(location) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(beta)\r\nTus-Resumable: 1.0.0\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").first)
        #expect(ended.status == 403, "\(ended.bodyText)")
        let looked = try #require(try RawHTTP.send(port: setup.port, "HEAD \(location) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(beta)\r\nTus-Resumable: 1.0.0\r\nConnection: close\r\n\r\n").first)
        #expect(looked.status == 403)

        // A job's change to a pack production serves: a person drops just that change
        // (`?staged=true`), and production keeps its pack — never a removal.
        #expect(try setup.call("PUT", "/packs/base?release=true", token: setup.human, body: Array("base v1".utf8)).status == 201)
        #expect(try setup.call("PUT", "/packs/base", token: beta, body: Array("base v2".utf8)).status == 202)
        let view = try setup.call("GET", "/staging", token: setup.human)
        #expect(view.bodyText.contains("\"scopes\"") && view.bodyText.contains("beta"), "\(view.bodyText)")
        let blocked = try setup.call("POST", "/releases", token: setup.human)
        #expect(blocked.status == 409 && Self.code(blocked) == "draft_scoped" && blocked.bodyText.contains("staged=true"))
        #expect(try setup.call("DELETE", "/packs/base?staged=true", token: setup.human).status == 200)
        #expect(try setup.call("POST", "/releases", token: setup.human).status == 409, "nothing staged")
        #expect(try setup.served("production") == ["base"])
        for (method, path) in [
            ("POST", "/releases"), ("POST", "/releases?channel=production"), ("PUT", "/packs/x?release=true"), ("POST", "/channels/production?release=1"),
            ("POST", "/rollouts/production/start?release=1&fraction=0.1"), ("POST", "/rollouts/production/halt"),
            ("POST", "/rollouts/production/advance?fraction=0.5"), ("POST", "/rollouts/production/complete"),
            ("DELETE", "/packs/staged?release=true&removeLive=true"),
        ] {
            let answer = try setup.call(method, path, token: beta, body: method == "PUT" ? body : [])
            #expect(answer.status == 403 && Self.code(answer) == "channel_not_allowed", "\(method) \(path): \(answer.status) \(answer.bodyText)")
        }
        #expect(try setup.call("POST", "/rollback?to=1", token: beta).status == 403)
        #expect(try !setup.served("production").contains("staged"), "a beta job's pack in production")

        // A JWT about to expire gives a token that ends with it.
        let now = Int(Date().timeIntervalSince1970)
        let short = try Self.issued(setup.exchange(setup.issuer.mint(good.merging(["exp": now + 15]) { $1 })))
        #expect(short.expiresAt.timeIntervalSince1970 <= Double(now + 15))
        var last: RawHTTP.Response?
        try Eventually.wait(every: .milliseconds(200)) {
            last = try setup.call("GET", "/staging?channel=beta", token: short.token)
            return last?.status == 401
        }
        #expect(last?.status == 401 && last.map(Self.code) == "token_expired")
        #expect(Date() >= short.expiresAt)
    }
}
