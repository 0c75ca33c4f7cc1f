import DepotCore
import Foundation

/// Why an OIDC token was refused: the name of the check that failed, which the exchange answers
/// (`401 {"error": "oidc_<check>"}`) and counts. Never a claim's value.
struct OIDCRefusal: Error, Equatable {
    /// The check: `size`, `malformed`, `algorithm`, `issuer`, `unknown_key`, `signature`,
    /// `expired`, `not_yet_valid`, `audience`, `claims`, `no_rule`.
    let check: String
    let message: String

    init(_ check: String, _ message: String) { (self.check, self.message) = (check, message) }
}

/// A compact JWS (RFC 7515) as a CI platform issues it: decoded, not yet verified.
struct JSONWebToken {
    /// The largest token looked at; larger ones are refused before any decoding.
    static let maximumSize = 16 << 10
    /// The furthest ahead an `exp` may be: a CI job's token lives minutes (GitHub) or as long as
    /// the job may run (GitLab: its timeout, an hour by default). The exchange's records of a JWT
    /// are kept until it expires, so an `exp` years away would be kept for years.
    static let longestLife: TimeInterval = 86_400

    let algorithm: JWSAlgorithm
    let keyID: String?
    /// The decoded claims (JSON object).
    let claims: [String: JSONValue]
    /// `header.payload` as sent: what the signature signs.
    let signedPart: [UInt8]
    let signature: [UInt8]

    /// Splits and decodes `text`; refuses anything but RS256 and ES256 (`none`, every HMAC),
    /// headers with extensions it does not understand (`crit`), and JSON another verifier could
    /// read differently (a name twice: ``StrictJSON``).
    init(_ text: Substring) throws(OIDCRefusal) {
        guard text.utf8.count <= Self.maximumSize else { throw OIDCRefusal("size", "the token is larger than 16 KiB") }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(parts[0]), let payloadBytes = Base64URL.decode(parts[1]),
              let signature = Base64URL.decode(parts[2]),
              let header = try? StrictJSON.object(headerBytes), let claims = try? StrictJSON.object(payloadBytes) else {
            throw OIDCRefusal("malformed", "the bearer token is not a signed JWT (header.payload.signature, base64url JSON, each name once)")
        }
        guard case .string(let name)? = Self.member("alg", of: header), let algorithm = JWSAlgorithm(rawValue: name),
              name.utf8.elementsEqual(algorithm.rawValue.utf8) else {
            throw OIDCRefusal("algorithm", "only RS256 and ES256 tokens are accepted")
        }
        guard Self.member("crit", of: header) == nil else { throw OIDCRefusal("algorithm", "the token's header has critical extensions (crit)") }
        switch Self.member("kid", of: header) {
        case .string(let keyID): self.keyID = keyID
        case nil: self.keyID = nil
        default: throw OIDCRefusal("malformed", "kid must be a string")
        }
        self.algorithm = algorithm
        self.claims = claims
        self.signedPart = Array(text.utf8[..<parts[1].endIndex])
        self.signature = signature
    }

    /// The member named exactly `name` (byte for byte: a dictionary's lookup is Unicode
    /// canonical equivalence, under which `\u{212A}` KELVIN SIGN is `K`).
    static func member(_ name: String, of object: [String: JSONValue]) -> JSONValue? {
        guard let index = object.index(forKey: name), object[index].key.utf8.elementsEqual(name.utf8) else { return nil }
        return object[index].value
    }

    /// The claim named exactly `name`.
    func claim(_ name: String) -> JSONValue? { Self.member(name, of: claims) }

    var issuer: String? { if case .string(let issuer)? = claim("iss") { issuer } else { nil } }

    /// `aud`: one string or an array of them.
    var audiences: [String] {
        switch claim("aud") {
        case .string(let one): [one]
        case .array(let many): many.compactMap { if case .string(let one) = $0 { one } else { nil } }
        default: []
        }
    }

    /// `iat` when it is whole seconds (``checkTimes(now:leeway:)`` refuses it otherwise).
    var issuedAt: Date? { if case .integer(let seconds)? = claim("iat") { Date(timeIntervalSince1970: Double(seconds)) } else { nil } }

    /// A claim as the text a rule compares with: a string as is, a boolean as `true`/`false`,
    /// an integer in decimal; nil for anything else (objects, arrays, fractions).
    func text(_ name: String) -> String? {
        switch claim(name) {
        case .string(let text): return text
        case .bool(let flag): return flag ? "true" : "false"
        case .integer(let value): return String(value)
        default: return nil
        }
    }

    /// The times, whole seconds since 1970 (what GitHub and GitLab send; a fraction, a string or
    /// a null is refused, never ignored): `exp` required, not past (exactly: the token minted
    /// ends with it) and at most ``longestLife`` ahead; `nbf` and `iat` not ahead. Ahead and
    /// past allow `leeway` for the issuer's clock.
    func checkTimes(now: Date, leeway: TimeInterval) throws(OIDCRefusal) -> Date {
        let seconds = now.timeIntervalSince1970
        guard case .integer(let exp)? = claim("exp") else { throw OIDCRefusal("expired", "the token has no expiry (exp, in whole seconds)") }
        let expiry = Double(exp)
        guard expiry > seconds else { throw OIDCRefusal("expired", "the token has expired") }
        guard expiry <= seconds + Self.longestLife + leeway else {
            throw OIDCRefusal("expired", "the token's expiry (exp) is more than a day away: ask the platform for a shorter-lived token")
        }
        for (name, what) in [("nbf", "is not valid yet (nbf)"), ("iat", "was issued in the future (iat)")] {
            switch claim(name) {
            case nil: continue
            case .integer(let time)?: if Double(time) - leeway > seconds { throw OIDCRefusal("not_yet_valid", "the token \(what)") }
            default: throw OIDCRefusal("not_yet_valid", "\(name) must be whole seconds since 1970")
            }
        }
        return Date(timeIntervalSince1970: expiry)
    }
}

extension String {
    /// Equal byte for byte (UTF-8): what a claim, an issuer or an audience must be. Swift's `==`
    /// is Unicode canonical equivalence, under which `refs/heads/\u{212A}iosk` (a KELVIN SIGN)
    /// equals `refs/heads/Kiosk`.
    func sameBytes(_ other: String) -> Bool { utf8.elementsEqual(other.utf8) }
}

/// Base64url without padding (RFC 4648 §5), as JWS uses it; padding is tolerated.
enum Base64URL {
    static func decode(_ text: Substring) -> [UInt8]? {
        var plain = String(text).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        guard !plain.contains("=") || plain.count % 4 == 0 else { return nil }
        if !plain.hasSuffix("=") { plain += String(repeating: "=", count: (4 - plain.count % 4) % 4) }
        return Data(base64Encoded: plain).map(Array.init)
    }

    static func decode(_ text: String) -> [UInt8]? { decode(text[...]) }
}
