@testable import DepotServer
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// Trust rules as `depot apps trust` makes them, and a JWT's parsing before any key is looked at.
@Suite("Trusted publishing: rules and token parsing")
struct TrustRuleTests {
    func refusal(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch let error as DepotError {
            return error.message
        } catch {
            return "\(error)"
        }
    }

    @Test("A rule must bind an identity: a claim, the repository or project on the shared platforms, https or loopback http with --allow-http")
    func validation() {
        func check(_ issuer: String, claims: [String: String], channels: [String]? = nil, http: Bool = false) -> String? {
            refusal { try TrustRule.validate(issuer: issuer, audience: "aud", claims: claims, channels: channels, allowHTTP: http) }
        }
        let github = "https://token.actions.githubusercontent.com"
        #expect(check(github, claims: ["repository": "studio/levels", "ref": "refs/heads/main"]) == nil)
        #expect(check(github, claims: ["sub": "repo:studio/levels:environment:production"]) == nil)
        #expect(check(github, claims: ["repository": "studio/levels"])?.contains("pull request") == true, "a repository alone admits its pull requests' runs")
        #expect(check("https://github.example.com/_services/token", claims: ["repository": "studio/levels"]) != nil, "GitHub Enterprise Server's issuer")
        #expect(check("https://github.example.com/_services/token", claims: ["repository": "studio/levels", "environment": "production"]) == nil)
        #expect(check("https://token.actions.githubusercontent.com/acme", claims: ["ref": "refs/heads/main"]) != nil, "GitHub Enterprise Cloud's issuer")
        #expect(check("https://token.actions.acme.ghe.com", claims: ["repository": "studio/levels"]) != nil, "a GHE.com tenant's issuer")
        #expect(check(github, claims: ["repository_owner_id": "42", "ref": "refs/heads/main"]) != nil, "an owner names every repository of an organisation")
        #expect(check("https://gitlab.com", claims: ["project_path": "studio/levels", "ref_protected": "true"]) == nil)
        #expect(check("https://issuer.example.com/tenant", claims: ["team": "levels"]) == nil)
        #expect(check(github, claims: [:])?.contains("at least one claim") == true)
        #expect(check(github, claims: ["ref": "refs/heads/main"])?.contains("name the repository") == true)
        #expect(check("https://gitlab.com", claims: ["ref": "main"])?.contains("project_path") == true)
        // As on GitHub: naming the project alone admits every branch's pipeline (a merge request's
        // too), so a gitlab.com rule must also pin which pipelines qualify; a channel does not.
        #expect(check("https://gitlab.com", claims: ["project_path": "studio/levels"])?.contains("ref_protected") == true)
        #expect(check("https://gitlab.com", claims: ["project_path": "studio/levels"], channels: ["beta"])?.contains("ref_protected") == true)
        #expect(check("https://gitlab.com", claims: ["project_path": "studio/levels", "ref": "main"]) == nil)
        #expect(check("https://gitlab.com", claims: ["project_id": "42", "environment": "production"]) == nil)
        #expect(check("https://gitlab.com", claims: ["sub": "project_path:studio/levels:ref_type:branch:ref:main"]) == nil)
        #expect(check("http://issuer.example.com", claims: ["a": "b"], http: true)?.contains("loopback") == true)
        #expect(check("http://127.0.0.1:8080", claims: ["a": "b"])?.contains("https") == true)
        #expect(check("http://127.0.0.1:8080", claims: ["a": "b"], http: true) == nil)
        #expect(check("http://[::1]:8080", claims: ["a": "b"], http: true) == nil)
        #expect(check("http://127.0.0.1.evil.example:8080", claims: ["a": "b"], http: true) != nil)
        #expect(check("ftp://issuer.example.com", claims: ["a": "b"]) != nil)
        #expect(check("https://issuer.example.com/?tenant=1", claims: ["a": "b"]) != nil)
        #expect(check("https://user:pw@issuer.example.com", claims: ["a": "b"]) != nil)
        #expect(check(github, claims: ["sub": "x", "aud": "y"]) != nil, "a rule claim may not be a registered time or audience claim")
        #expect(check(github, claims: ["sub": ""]) != nil)
        #expect(check(github, claims: ["sub": "x"], channels: ["../prod"]) != nil)
        #expect(check(github, claims: ["sub": "x"], channels: []) != nil)
    }

    @Test("Bidirectional controls (U+202A–U+202E, U+2066–U+2069, U+200E/F, U+061C) in a rule's claims, audience or issuer are refused with a clear error (issue 50): they reorder what an admin reads", arguments: [
        "\u{202A}", "\u{202B}", "\u{202C}", "\u{202D}", "\u{202E}", "\u{2066}", "\u{2067}", "\u{2068}", "\u{2069}", "\u{200E}", "\u{200F}", "\u{061C}",
    ])
    func bidiControls(control: String) {
        let github = "https://token.actions.githubusercontent.com"
        let hex = String(control.unicodeScalars.first!.value, radix: 16, uppercase: true)
        for claims in [["repository": "studio/lev\(control)els", "ref": "refs/heads/main"], ["repository": "studio/levels", "r\(control)ef": "refs/heads/main"]] {
            let message = refusal { try TrustRule.validate(issuer: github, audience: "aud", claims: claims, channels: nil, allowHTTP: false) }
            #expect(message?.contains("bidirectional control U+\(hex)") == true, "\(message ?? "accepted")")
        }
        #expect(refusal { try TrustRule.validate(issuer: github, audience: "a\(control)ud", claims: ["repository": "s/l", "ref": "main"], channels: nil, allowHTTP: false) } != nil)
        // Right-to-left text itself is fine: only the controls are refused.
        #expect(refusal { try TrustRule.validate(issuer: github, audience: "aud", claims: ["repository": "studio/مستوى", "ref": "main"], channels: nil, allowHTTP: false) } == nil)
    }

    @Test("A tag with a bidirectional control is refused with 400 and nothing is staged, by the one-piece upload and by the resumable one (issue 50)")
    func bidiTags() async throws {
        try await withServer { origin in
            let tag = "ma\u{202E}in".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let refused = try upload(origin, pack: "level", Array(repeating: 7, count: 100), query: "?tag=intro&tag=\(tag)")
            #expect(refused.status == 400 && refused.bodyText.contains("bidirectional control U+202E"), "\(refused.status) \(refused.bodyText)")
            let metadata = "pack " + Data("level".utf8).base64EncodedString() + ",tags " + Data("intro,\u{2067}x".utf8).base64EncodedString()
            let resumable = try request(origin, "POST", "/v1/apps/\(origin.app)/uploads", headers: [
                "Authorization: Bearer \(origin.token)", "Tus-Resumable: 1.0.0", "Upload-Length: 100", "Upload-Metadata: \(metadata)",
            ])
            #expect(resumable.status == 400 && resumable.bodyText.contains("U+2067"), "\(resumable.status) \(resumable.bodyText)")
            let staging = try request(origin, "GET", "/v1/apps/\(origin.app)/staging", headers: ["Authorization: Bearer \(origin.token)"])
            let changed = (try JSONSerialization.jsonObject(with: Data(staging.body)) as? [String: Any])?["changed"] as? [String]
            #expect(staging.status == 200 && changed == [], "\(staging.bodyText)")
            // Right-to-left letters are a tag like any other.
            #expect(try upload(origin, pack: "level", Array(repeating: 7, count: 100), query: "?tag=" + "مقدمة".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!).status == 201)
        }
    }

    @Test("Rules are kept per app, listed in order and removed by id; an app that does not exist has none")
    func store() throws {
        let data = TemporaryDirectory("depot-trust")
        defer { data.remove() }
        _ = try prepareDataFolder(data.path, app: "com.example.game")
        let store = TrustStore(folder: DataFolder(data.path))
        let first = try store.add("com.example.game", issuer: "https://gitlab.com", audience: "a", claims: ["project_path": "p", "ref_protected": "true"], channels: ["qa", "beta", "qa"], allowHTTP: false)
        let second = try store.add("com.example.game", issuer: "https://gitlab.com", audience: "b", claims: ["project_path": "q", "ref": "main"], channels: nil, allowHTTP: false)
        #expect(first.channels == ["beta", "qa"] && first.role == .publisher && first.id.hasPrefix("rule-") && first.id != second.id)
        #expect(store.rules("com.example.game").map(\.id) == [first.id, second.id])
        #expect(try store.remove("com.example.game", id: first.id))
        #expect(try !store.remove("com.example.game", id: first.id))
        #expect(store.rules("com.example.game").map(\.id) == [second.id])
        #expect(store.rules("com.example.other").isEmpty)
        #expect(throws: DepotError.self) { try store.add("com.example.other", issuer: "https://gitlab.com", audience: "a", claims: ["project_path": "p", "ref": "main"], channels: nil, allowHTTP: false) }
    }

    @Test("Minted tokens: ten per JWT for as long as the JWT lives, a hundred unexpired per rule, the expired forgotten")
    func mintingCaps() throws {
        let data = TemporaryDirectory("depot-mint")
        defer { data.remove() }
        _ = try prepareDataFolder(data.path, app: "com.example.game")
        let folder = DataFolder(data.path)
        let rule = try TrustStore(folder: folder).add("com.example.game", issuer: "https://gitlab.com", audience: "a", claims: ["project_path": "p", "ref": "main"], channels: ["beta"], allowHTTP: false)
        let tokens = TokenStore(folder: folder)
        let now = Date()
        func mint(_ jwt: String, at time: Date, lasting: TimeInterval = 900, jwtLife: TimeInterval = 3_600) throws -> StoredToken {
            try tokens.mint(app: "com.example.game", rule: rule, expiresAt: time.addingTimeInterval(lasting), jwtExpiresAt: time.addingTimeInterval(jwtLife), subject: "s", jwtID: jwt, now: time).record
        }
        for _ in 0..<10 { _ = try mint("jwt-1", at: now) }
        #expect(throws: TokenStore.MintRefusal.self) { try mint("jwt-1", at: now) }
        // Later in the JWT's life, its minted tokens expired: still counted, still refused.
        #expect(throws: TokenStore.MintRefusal.self) { try mint("jwt-1", at: now.addingTimeInterval(1_800)) }
        // Once the JWT itself expired, its records are forgotten.
        _ = try mint("jwt-2", at: now.addingTimeInterval(3_700))
        #expect(try tokens.list().filter { $0.jwtID == "jwt-1" }.isEmpty)
        let later = now.addingTimeInterval(4_000)
        for index in 0..<99 { _ = try mint("many-\(index)", at: later) }
        #expect(throws: TokenStore.MintRefusal.self) { try mint("one-more", at: later) }
        #expect(try mint("one-more", at: later.addingTimeInterval(901)).channels == ["beta"], "unexpired tokens are what the cap counts")
    }

    @Test("A JWT is refused before any key lookup when it is too large, not three base64url JSON parts, or of an algorithm other than RS256 and ES256")
    func parsing() {
        func part(_ json: String) -> String {
            Data(json.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        func check(_ text: String) -> String? {
            do {
                _ = try JSONWebToken(text[...])
                return nil
            } catch {
                return error.check
            }
        }
        let claims = part(#"{"iss":"https://i","aud":["x","y"],"exp":2000000000,"n":7,"b":true,"f":1.5}"#)
        #expect(check(part(#"{"alg":"RS256","kid":"k"}"#) + "." + claims + ".c2ln") == nil)
        #expect(check(part(#"{"alg":"ES256"}"#) + "." + claims + ".c2ln") == nil)
        #expect(check(part(#"{"alg":"none"}"#) + "." + claims + ".") == "algorithm")
        #expect(check(part(#"{"alg":"HS256"}"#) + "." + claims + ".c2ln") == "algorithm")
        #expect(check(part(#"{"alg":"RS256","crit":["exp"]}"#) + "." + claims + ".c2ln") == "algorithm")
        #expect(check(part(#"{"alg":"RS256","kid":7}"#) + "." + claims + ".c2ln") == "malformed")
        #expect(check(part(#"{"alg":"RS256"}"#) + "." + claims) == "malformed")
        #expect(check(part(#"{"alg":"RS256"}"#) + "." + part("[1]") + ".c2ln") == "malformed")
        #expect(check(part(#"{"alg":"RS256"}"#) + ".@@@." + "c2ln") == "malformed")
        #expect(check(String(repeating: "a", count: 16 << 10 + 1)) == "size")
        let token = try! JSONWebToken((part(#"{"alg":"RS256"}"#) + "." + claims + ".c2ln")[...])
        #expect(token.issuer == "https://i" && token.audiences == ["x", "y"] && token.text("n") == "7" && token.text("b") == "true" && token.text("f") == nil)
        #expect(token.claim("exp") == .integer(2_000_000_000))
        let now = Date(timeIntervalSince1970: 2_000_000_000 + 59)
        // `exp` exactly (the token minted ends with it); `nbf` and `iat` with the leeway.
        #expect((try? token.checkTimes(now: now.addingTimeInterval(-60), leeway: 60)) != nil)
        #expect(throws: OIDCRefusal.self) { try token.checkTimes(now: now, leeway: 60) }
        let early = try! JSONWebToken((part(#"{"alg":"RS256"}"#) + "." + part(#"{"nbf":1000,"iat":1000,"exp":2000}"#) + ".c2ln")[...])
        #expect((try? early.checkTimes(now: Date(timeIntervalSince1970: 950), leeway: 60)) != nil)
        #expect(throws: OIDCRefusal.self) { try early.checkTimes(now: Date(timeIntervalSince1970: 930), leeway: 60) }
    }

    static func part(_ json: String) -> String {
        Data(json.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    static func token(_ payload: String, header: String = #"{"alg":"RS256","kid":"k"}"#) throws(OIDCRefusal) -> JSONWebToken {
        try JSONWebToken((part(header) + "." + part(payload) + ".c2ln")[...])
    }

    @Test("A name twice in a JWT's header or payload is refused (Python, Go and JavaScript would read the last, this origin the first); so is a name that only Unicode equivalence makes the same")
    func duplicateNames() throws {
        func check(_ payload: String, header: String = #"{"alg":"RS256","kid":"k"}"#) -> String? {
            do {
                _ = try Self.token(payload, header: header)
                return nil
            } catch {
                return error.check
            }
        }
        #expect(check(#"{"sub":"a","ref":"b"}"#) == nil)
        #expect(check(#"{"ref":"refs/heads/main","ref":"refs/heads/evil"}"#) == "malformed")
        #expect(check(#"{"ref":"refs/heads/main","r\u0065f":"refs/heads/evil"}"#) == "malformed", "an escaped spelling of the same name")
        #expect(check(#"{"Kiosk":"a","\u212Aiosk":"b"}"#) == "malformed", "two names Swift's String equality takes as one")
        #expect(check(#"{"sub":"a"}"#, header: #"{"alg":"RS256","kid":"k","kid":"other"}"#) == "malformed")
        #expect(check(#"{"sub":"a"}"#, header: #"{"alg":"HS256","alg":"RS256"}"#) != nil)
        #expect(check(#"{"nested":{"a":1,"a":2}}"#) == "malformed")
        #expect(check(#"{"list":[{"a":1},{"a":2}]}"#) == nil, "the same name in two objects is no duplicate")
        // Not JSON at all, or JSON with something after it.
        #expect(check(#"{"sub":"a"} {"sub":"b"}"#) == "malformed")
        #expect(check(#"{"sub":"a",}"#) == "malformed")
        #expect(check(String(repeating: "[", count: 5_000) + String(repeating: "]", count: 5_000)) == "malformed")
        let exact = try Self.token(#"{"\u212Aey":"v","plain":"a\u00e9"}"#)
        #expect(exact.text("Key") == nil, "a claim is found by its exact name")
        #expect(exact.text("\u{212A}ey") == "v" && exact.text("plain") == "a\u{e9}")
    }

    @Test("exp, nbf and iat are integers; exp is refused when missing, past, or more than a day ahead (1e300 was kept forever)")
    func numericDates() throws {
        let now = Date(timeIntervalSince1970: 1_900_000_000)
        func check(_ payload: String) -> String? {
            do {
                _ = try Self.token(payload).checkTimes(now: now, leeway: 60)
                return nil
            } catch {
                return error.check
            }
        }
        #expect(check(#"{"exp":1900000300,"nbf":1900000000,"iat":1900000000}"#) == nil)
        #expect(check(#"{"exp":1900086400}"#) == nil, "a day ahead")
        #expect(check(#"{"exp":1900086461}"#) == "expired", "more than a day (and the leeway) ahead")
        #expect(check(#"{"exp":1e300}"#) == "expired")
        #expect(check(#"{"exp":9223372036854775807}"#) == "expired")
        #expect(check(#"{"exp":1900000300.5}"#) == "expired", "a fraction")
        #expect(check(#"{"exp":"1900000300"}"#) == "expired")
        #expect(check(#"{"exp":1900000300,"nbf":"9999999999"}"#) == "not_yet_valid", "a string nbf is not ignored")
        #expect(check(#"{"exp":1900000300,"iat":"9999999999"}"#) == "not_yet_valid")
        #expect(check(#"{"exp":1900000300,"nbf":null}"#) == "not_yet_valid")
        #expect(check(#"{"exp":1900000300,"iat":1900000000.25}"#) == "not_yet_valid")
        #expect(check(#"{"exp":1900000300,"nbf":1900000100}"#) == "not_yet_valid")
    }
}
