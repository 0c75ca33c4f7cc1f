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

    let algorithm: JWSAlgorithm
    let keyID: String?
    /// The decoded claims (JSON object).
    let claims: [String: JSONValue]
    /// `header.payload` as sent: what the signature signs.
    let signedPart: [UInt8]
    let signature: [UInt8]

    /// Splits and decodes `text`; refuses anything but RS256 and ES256 (`none`, every HMAC) and
    /// headers with extensions it does not understand (`crit`).
    init(_ text: Substring) throws(OIDCRefusal) {
        guard text.utf8.count <= Self.maximumSize else { throw OIDCRefusal("size", "the token is larger than 16 KiB") }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(parts[0]), let payloadBytes = Base64URL.decode(parts[1]),
              let signature = Base64URL.decode(parts[2]),
              let header = try? JSONDecoder().decode([String: JSONValue].self, from: Data(headerBytes)),
              let claims = try? JSONDecoder().decode([String: JSONValue].self, from: Data(payloadBytes)) else {
            throw OIDCRefusal("malformed", "the bearer token is not a signed JWT (header.payload.signature, base64url JSON)")
        }
        guard case .string(let name) = header["alg"], let algorithm = JWSAlgorithm(rawValue: name) else {
            throw OIDCRefusal("algorithm", "only RS256 and ES256 tokens are accepted")
        }
        guard header["crit"] == nil else { throw OIDCRefusal("algorithm", "the token's header has critical extensions (crit)") }
        switch header["kid"] {
        case .string(let keyID): self.keyID = keyID
        case nil: self.keyID = nil
        default: throw OIDCRefusal("malformed", "kid must be a string")
        }
        self.algorithm = algorithm
        self.claims = claims
        self.signedPart = Array(text.utf8[..<parts[1].endIndex])
        self.signature = signature
    }

    var issuer: String? { if case .string(let issuer) = claims["iss"] { issuer } else { nil } }

    /// `aud`: one string or an array of them.
    var audiences: [String] {
        switch claims["aud"] {
        case .string(let one): [one]
        case .array(let many): many.compactMap { if case .string(let one) = $0 { one } else { nil } }
        default: []
        }
    }

    /// A NumericDate claim, in seconds since 1970.
    func time(_ name: String) -> Double? {
        switch claims[name] {
        case .integer(let value): Double(value)
        case .number(let value) where value.isFinite: value
        default: nil
        }
    }

    /// A claim as the text a rule compares with: a string as is, a boolean as `true`/`false`,
    /// an integer in decimal; nil for anything else (objects, arrays, fractions).
    func text(_ name: String) -> String? {
        switch claims[name] {
        case .string(let text): return text
        case .bool(let flag): return flag ? "true" : "false"
        case .integer(let value): return String(value)
        default: return nil
        }
    }

    /// The times: `exp` required and not past (exactly: the token minted ends with it); `nbf` and
    /// `iat` not ahead, with `leeway` for the issuer's clock.
    func checkTimes(now: Date, leeway: TimeInterval) throws(OIDCRefusal) -> Date {
        let seconds = now.timeIntervalSince1970
        guard let expiry = time("exp") else { throw OIDCRefusal("expired", "the token has no expiry (exp)") }
        guard expiry > seconds else { throw OIDCRefusal("expired", "the token has expired") }
        if let notBefore = time("nbf"), notBefore - leeway > seconds { throw OIDCRefusal("not_yet_valid", "the token is not valid yet (nbf)") }
        if let issued = time("iat"), issued - leeway > seconds { throw OIDCRefusal("not_yet_valid", "the token was issued in the future (iat)") }
        return Date(timeIntervalSince1970: expiry)
    }
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
