import DepotCore
import Foundation
import Logging

/// Trusted publishing: a CI job's OIDC token (its platform's proof of which repository, branch
/// and workflow it runs) exchanged for a publish token of the app that lives at most 15 minutes,
/// scoped as the trust rule it matched says. Checks, in order, each refusal naming its check:
/// size and shape, algorithm (RS256/ES256 only), issuer (one of the app's rules), the issuer's
/// key (`kid`), the signature, `exp` (exactly) and `nbf`/`iat` (a minute's leeway), audience, claims.
struct TokenExchange: Sendable {
    static let lifetime: TimeInterval = 15 * 60
    static let leeway: TimeInterval = 60

    let trust: TrustStore
    let tokens: TokenStore
    let keys: IssuerKeys

    /// What an exchange gave: the token (shown once), its record, and the rule.
    struct Minted {
        let token: String
        let record: StoredToken
        let rule: TrustRule
    }

    /// Verifies `jwt` against the app's rules and mints a token; throws ``OIDCRefusal`` (401)
    /// or an ``HTTPFailure`` (503 while the issuer's keys are being fetched or cannot be).
    /// `admit` runs once the token's signature verified with a key the origin holds (a token
    /// anyone could write, naming a public issuer, costs no app anything): the app's share of the
    /// exchange's budget. Key fetches have their own bound (``IssuerKeys``).
    ///
    /// Every comparison of the issuer, the audience and the claims with a rule is byte for byte
    /// (`sameBytes`), and keys are fetched by the rule's spelling of the issuer.
    func exchange(app: String, jwt: Substring, now: Date = Date(), admit: () throws -> Void = {}) throws -> Minted {
        let token = try JSONWebToken(jwt)
        let rules = trust.rules(app)
        guard !rules.isEmpty else { throw OIDCRefusal("no_rule", "app \(app) trusts no OIDC issuer (depot apps trust)") }
        guard let issuer = token.issuer, let first = rules.first(where: { $0.issuer.sameBytes(issuer) }) else {
            throw OIDCRefusal("issuer", "no trust rule of app \(app) names the token's issuer")
        }
        let key: JWSPublicKey
        switch keys.key(issuer: first.issuer, allowHTTP: first.allowHTTP, keyID: token.keyID, algorithm: token.algorithm, issuedAt: token.issuedAt, date: now) {
        case .key(let found): key = found
        case .fetching:
            throw HTTPFailure(status: 503, code: "oidc_keys_fetching", message: "the issuer's signing keys are being fetched; try again in a second", headers: [("Retry-After", "1")])
        case .unknown: throw OIDCRefusal("unknown_key", "the issuer has no signing key with the token's kid")
        case .busy(let wait):
            // Perhaps a key the issuer has just published: asked again after the next fetch, answered for certain.
            throw HTTPFailure(
                status: 503, code: "oidc_keys_busy",
                message: "the origin does not hold the token's key (kid) and fetched the issuer's keys too often of late to fetch them now; try again in \(wait) s",
                headers: [("Retry-After", "\(wait)")]
            )
        case .unavailable(let wait):
            // (Why is logged, not told: it names the issuer's addresses and errors.)
            throw HTTPFailure(status: 503, code: "oidc_keys_unavailable", message: "the issuer's signing keys cannot be fetched now (the origin's log says why)", headers: [("Retry-After", "\(wait)")])
        }
        guard key.algorithm == token.algorithm else { throw OIDCRefusal("algorithm", "the token's algorithm is not its key's") }
        guard key.isValidSignature(token.signature, for: token.signedPart) else { throw OIDCRefusal("signature", "the token's signature does not verify") }
        // Charged only now: a token anyone can write (an issuer's name is public) costs no app anything.
        try admit()
        let expiry = try token.checkTimes(now: now, leeway: Self.leeway)
        let audiences = token.audiences
        let candidates = rules.filter { rule in rule.issuer.sameBytes(issuer) && audiences.contains { $0.sameBytes(rule.audience) } }
        guard !candidates.isEmpty else { throw OIDCRefusal("audience", "the token's audience is not one a rule of app \(app) names") }
        // The first rule (in the order they were made) whose every claim the token carries.
        guard let rule = candidates.first(where: { differing($0, token).isEmpty }) else {
            let closest = candidates.min { differing($0, token).count < differing($1, token).count }!
            throw OIDCRefusal("claims", "the token's claims differ from the rule's: \(differing(closest, token).sorted().joined(separator: ", "))")
        }
        // Never past the JWT's own expiry: a stolen JWT gives no more time than it had.
        let until = min(now.addingTimeInterval(Self.lifetime), expiry)
        guard until > now else { throw OIDCRefusal("expired", "the token has expired") }
        // A JWT without `jti` is known by its signed part's digest (not its signature's: an ECDSA
        // signature has a second valid form).
        let jwtID = token.text("jti") ?? "sha256:" + Hex.encode(SHA256Hasher.hash(token.signedPart))
        do {
            let (text, record) = try tokens.mint(
                app: app, rule: rule, expiresAt: until, jwtExpiresAt: expiry, subject: token.text("sub"), jwtID: jwtID, now: now
            )
            return Minted(token: text, record: record, rule: rule)
        } catch TokenStore.MintRefusal.replayed {
            throw OIDCRefusal("replayed", "this token was already exchanged \(TokenStore.exchangesPerJWT) times; ask the platform for a new one")
        } catch TokenStore.MintRefusal.tooMany {
            throw HTTPFailure(status: 429, code: "oidc_too_many_tokens", message: "rule \(rule.id) has \(TokenStore.liveTokensPerRule) unexpired tokens; try again when some expire, or revoke them", headers: [("Retry-After", "60")])
        }
    }

    /// The names of the rule's claims the token does not carry as the rule says.
    private func differing(_ rule: TrustRule, _ token: JSONWebToken) -> [String] {
        rule.claims.filter { token.text($0.key)?.sameBytes($0.value) != true }.map(\.key)
    }
}
