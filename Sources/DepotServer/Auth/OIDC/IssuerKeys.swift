import DepotCore
import DepotTransport
import Foundation
import Logging
import Synchronization

/// The signing keys of the issuers trust rules name, from each issuer's discovery document
/// (`/.well-known/openid-configuration`) and JWKS. No serving thread ever waits on an issuer:
/// a lookup that needs keys not held starts a fetch on a thread of its own and answers
/// ``Lookup/fetching`` (the exchange says 503, retry in a second). Keys are kept an hour, fetched
/// again on an unknown `kid` (a rotation), and the fetches are bounded: one at a time per issuer,
/// three in a row, then one per 20 seconds — a flood of tokens with made-up `kid`s costs the
/// issuer nothing. Only issuers of rules are ever fetched, by the rule's spelling of the issuer;
/// issuers and `kid`s are told apart byte for byte.
///
/// A `kid` is unknown for certain only once keys were fetched after it was first asked for, and
/// after the token naming it was issued (`iat`: an issuer publishes a key before it signs with
/// it; the second condition keeps a `kid` someone asked for before the issuer published it from
/// being refused once it is). Until then, with the allowance spent, the answer is
/// ``Lookup/busy(retryAfter:)`` (503, ask again then), never a refusal: right after a rotation
/// anyone can spend the allowance with made-up `kid`s, and a job's token naming the new key must
/// wait for the next fetch, not fail.
final class IssuerKeys: Sendable {
    enum Lookup {
        case key(JWSPublicKey)
        /// A fetch is under way: ask again in a moment.
        case fetching
        /// Keys fetched since the `kid` was first asked for have none of it.
        case unknown
        /// The `kid` is not among the keys held, and no fetch is allowed until `retryAfter` seconds.
        case busy(retryAfter: Int)
        /// No usable keys and no fetch allowed for `retryAfter` seconds (why the last fetch failed is in the log).
        case unavailable(retryAfter: Int)
    }

    /// How long fetched keys are used without asking the issuer again.
    static let lifetime: Duration = .seconds(3_600)
    /// Fetches in a row an issuer's bucket allows, and the seconds each takes to come back.
    static let burst = 3.0
    static let refill = 20.0
    /// The `kid`s not held remembered per issuer, with when each was first asked for.
    static let rememberedMissing = 256

    private struct Issuer {
        /// By `kid`'s bytes.
        var keys: [[UInt8]: JWSPublicKey] = [:]
        var unnamed: [JWSPublicKey] = []
        /// When the fetch that got the keys started, and the wall clock's time then.
        var fetchedAt: ContinuousClock.Instant?
        var fetchedDate: Date?
        var fetching = false
        var tokens = IssuerKeys.burst
        var at = ContinuousClock.now
        /// `kid`s asked for and not held (no `kid`: the empty key), with when each was first asked for.
        var missing: [[UInt8]: ContinuousClock.Instant] = [:]
    }

    /// By the issuer's bytes (a dictionary of `String` would take a look-alike spelling for it).
    private let issuers = Mutex<[[UInt8]: Issuer]>([:])
    private let logger: Logger
    private let timeout: TimeInterval

    init(logger: Logger, timeout: TimeInterval = 5) {
        self.logger = logger
        self.timeout = timeout
    }

    /// The key that verifies a token of `issuer` (a rule's, exactly as the rule spells it) with
    /// `keyID` (nil: the issuer's only key of `algorithm`), issued at `issuedAt` (its `iat`), or
    /// what to answer instead.
    func key(
        issuer: String, allowHTTP: Bool, keyID: String?, algorithm: JWSAlgorithm, issuedAt: Date? = nil,
        now: ContinuousClock.Instant = .now, date: Date = Date()
    ) -> Lookup {
        let name = Array(issuer.utf8)
        let kid = keyID.map { Array($0.utf8) } ?? []
        let (lookup, fetch) = issuers.withLock { all -> (Lookup, Bool) in
            var state = all[name] ?? Issuer()
            defer { all[name] = state }
            let fresh = state.fetchedAt.map { now - $0 < Self.lifetime } ?? false
            if fresh {
                if keyID != nil, let key = state.keys[kid] { return (.key(key), false) }
                if keyID == nil {
                    let candidates = state.keys.values.filter { $0.algorithm == algorithm } + state.unnamed.filter { $0.algorithm == algorithm }
                    if candidates.count == 1 { return (.key(candidates[0]), false) }
                }
            }
            let firstAsked: ContinuousClock.Instant
            if let known = state.missing[kid] {
                firstAsked = known
            } else {
                if state.missing.count >= Self.rememberedMissing { state.missing.removeAll() }
                state.missing[kid] = now
                firstAsked = now
            }
            if state.fetching { return (.fetching, false) }
            // Fetched since the kid was first asked for and since the token was issued, and not
            // there: the issuer has no such key.
            if fresh, let fetchedAt = state.fetchedAt, fetchedAt >= firstAsked,
               let fetchedDate = state.fetchedDate, issuedAt.map({ fetchedDate >= $0 }) ?? true {
                return (.unknown, false)
            }
            let elapsed = Double((now - state.at).components.seconds) + Double((now - state.at).components.attoseconds) / 1e18
            state.tokens = min(Self.burst, state.tokens + max(0, elapsed) / Self.refill)
            state.at = now
            guard state.tokens >= 1 else {
                let wait = max(1, Int(((1 - state.tokens) * Self.refill).rounded(.up)))
                return (fresh ? .busy(retryAfter: wait) : .unavailable(retryAfter: wait), false)
            }
            state.tokens -= 1
            state.fetching = true
            return (.fetching, true)
        }
        if fetch {
            Thread.detachNewThread { [self] in self.fetch(issuer, allowHTTP: allowHTTP, started: now, date: date) }
        }
        return lookup
    }

    /// Fetches the issuer's discovery document and JWKS; keeps the keys, or why it failed.
    private func fetch(_ issuer: String, allowHTTP: Bool, started: ContinuousClock.Instant, date: Date) {
        let result = Result { try Self.keys(of: issuer, allowHTTP: allowHTTP, timeout: timeout) }
        let name = Array(issuer.utf8)
        issuers.withLock { all in
            var state = all[name] ?? Issuer()
            state.fetching = false
            switch result {
            case .success(let (named, unnamed)):
                (state.keys, state.unnamed, state.fetchedAt, state.fetchedDate) = (named, unnamed, started, date)
            case .failure: break
            }
            all[name] = state
        }
        switch result {
        case .success(let (named, unnamed)):
            logger.info("oidc keys fetched", metadata: ["issuer": .string(issuer), "keys": .stringConvertible(named.count + unnamed.count)])
        case .failure(let error):
            logger.warning("oidc keys not fetched", metadata: ["issuer": .string(issuer), "error": .string("\(error)")])
        }
    }

    struct FetchError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// The issuer's keys: by `kid` (its bytes), and those without one.
    static func keys(of issuer: String, allowHTTP: Bool, timeout: TimeInterval) throws -> ([[UInt8]: JWSPublicKey], [JWSPublicKey]) {
        let base = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
        guard let discoveryURL = URL(string: base + "/.well-known/openid-configuration") else { throw FetchError("\(issuer) is not a URL") }
        let discovery = try get(discoveryURL, allowHTTP: allowHTTP, limit: 64 << 10, timeout: timeout)
        struct Discovery: Decodable {
            var issuer: String
            var jwks_uri: String
        }
        guard let document = try? JSONDecoder().decode(Discovery.self, from: Data(discovery)) else {
            throw FetchError("the discovery document of \(issuer) has no issuer and jwks_uri")
        }
        // OpenID Connect Discovery §4.3: the document must name the issuer it was asked for.
        guard document.issuer.sameBytes(issuer) else { throw FetchError("the discovery document names issuer \(document.issuer), not \(issuer)") }
        guard let jwksURL = URL(string: document.jwks_uri) else { throw FetchError("jwks_uri is not a URL") }
        let body = try get(jwksURL, allowHTTP: allowHTTP, limit: 256 << 10, timeout: timeout)
        guard case .object(let root)? = try? JSONDecoder().decode(JSONValue.self, from: Data(body)), case .array(let entries)? = root["keys"] else {
            throw FetchError("the JWKS of \(issuer) has no keys array")
        }
        var named: [[UInt8]: JWSPublicKey] = [:]
        var unnamed: [JWSPublicKey] = []
        // At most 16 keys, each modulus checked once: OpenSSL's public-key check of a large prime
        // modulus costs many modular exponentiations, which a hostile issuer must not multiply.
        var moduli: Set<[UInt8]> = []
        for case .object(let jwk) in entries.prefix(16) {
            func text(_ name: String) -> String? { if case .string(let value)? = JSONWebToken.member(name, of: jwk) { value } else { nil } }
            func bytes(_ name: String) -> [UInt8]? { text(name).flatMap(Base64URL.decode) }
            if let use = text("use"), !use.sameBytes("sig") { continue }
            let key: JWSPublicKey?
            switch text("kty") {
            case "RSA":
                guard let n = bytes("n"), let e = bytes("e"), moduli.insert(n).inserted else { continue }
                key = try? JWSPublicKey(rsaModulus: n, exponent: e)
            case "EC":
                guard text("crv")?.sameBytes("P-256") == true, let x = bytes("x"), let y = bytes("y") else { continue }
                key = try? JWSPublicKey(p256X: x, y: y)
            default: continue
            }
            // A key declared for another algorithm is not used for this one.
            guard let key, text("alg").map({ $0.sameBytes(key.algorithm.rawValue) }) ?? true else { continue }
            if let kid = text("kid") { named[Array(kid.utf8)] = key } else { unnamed.append(key) }
        }
        guard !named.isEmpty || !unnamed.isEmpty else { throw FetchError("the JWKS of \(issuer) has no RS256 or ES256 signing key") }
        return (named, unnamed)
    }

    /// One GET of at most `limit` bytes, answered 200; https, or http to a loopback address when allowed.
    static func get(_ url: URL, allowHTTP: Bool, limit: Int64, timeout: TimeInterval) throws -> [UInt8] {
        guard let host = url.host, url.scheme == "https" || (url.scheme == "http" && allowHTTP && isLoopback(host)) else {
            throw FetchError("\(url.absoluteString): keys are fetched over https only")
        }
        do {
            let trust = url.scheme == "https" ? try TLSClientContext(caFile: nil) : nil
            var options = TransportOptions()
            options.responseDeadline = timeout
            let connection = try HTTPConnection(url: url, timeout: timeout, trust: trust, options: options)
            defer { connection.close() }
            try connection.sendHead(method: "GET", headers: [("Accept", "application/json")])
            let head = try connection.readHead()
            guard head.status == 200 else { throw FetchError("\(url.absoluteString) answered \(head.status)") }
            var collected: [UInt8] = []
            try connection.readBody(head, method: "GET", limit: limit) { collected += $0 }
            return collected
        } catch let error as FetchError {
            throw error
        } catch {
            throw FetchError("\(url.absoluteString) cannot be reached: \(error)")
        }
    }
}
