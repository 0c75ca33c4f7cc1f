import DepotCore
import Foundation

/// AWS Signature Version 4 for S3 requests (header-based, signed payloads): the canonical
/// request, the string to sign, the derived key and the `Authorization` header.
struct SigV4: Sendable {
    let region: String
    let service = "s3"

    /// The headers to add to a request (`x-amz-date`, `x-amz-content-sha256`, with temporary
    /// keys `x-amz-security-token`, and `Authorization`), given its method, path (already
    /// URI-encoded, as sent), query items, the other headers it sends (names signed with their
    /// values; `host` must be among them), its payload's SHA-256 and the keys to sign with.
    func sign(
        method: String, path: String, query: [(String, String)], headers: [String: String], payloadSHA256: String, credentials: AWSCredentials,
        date: Date = Date()
    ) -> [String: String] {
        let (stamp, day) = Self.timestamps(date)
        var signed = Dictionary(uniqueKeysWithValues: headers.map { ($0.key.lowercased(), Self.trimmed($0.value)) })
        signed["x-amz-date"] = stamp
        signed["x-amz-content-sha256"] = payloadSHA256
        if let token = credentials.sessionToken { signed["x-amz-security-token"] = token }
        let names = signed.keys.sorted()
        let canonicalQuery = query.map { (Self.encode($0.0), Self.encode($0.1)) }.sorted { $0 < $1 }.map { "\($0.0)=\($0.1)" }.joined(separator: "&")
        let canonical = [
            method, path, canonicalQuery, names.map { "\($0):\(signed[$0]!)\n" }.joined(), names.joined(separator: ";"), payloadSHA256,
        ].joined(separator: "\n")
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let toSign = "AWS4-HMAC-SHA256\n\(stamp)\n\(scope)\n\(Hex.encode(SHA256Hasher.hash(Array(canonical.utf8))))"
        var key = Array("AWS4\(credentials.secretKey)".utf8)
        for part in [day, region, service, "aws4_request"] { key = HMACSHA256.authenticationCode(Array(part.utf8), key: key) }
        let signature = Hex.encode(HMACSHA256.authenticationCode(Array(toSign.utf8), key: key))
        var added = [
            "x-amz-date": stamp, "x-amz-content-sha256": payloadSHA256,
            "Authorization": "AWS4-HMAC-SHA256 Credential=\(credentials.accessKey)/\(scope), SignedHeaders=\(names.joined(separator: ";")), Signature=\(signature)",
        ]
        if let token = credentials.sessionToken { added["x-amz-security-token"] = token }
        return added
    }

    /// `20130524T000000Z` and `20130524`, UTC.
    static func timestamps(_ date: Date) -> (String, String) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        func two(_ n: Int?) -> String { n.map { $0 < 10 ? "0\($0)" : "\($0)" } ?? "00" }
        let day = "\(c.year ?? 1970)\(two(c.month))\(two(c.day))"
        return ("\(day)T\(two(c.hour))\(two(c.minute))\(two(c.second))Z", day)
    }

    /// URI-encodes every byte except the unreserved `A-Z a-z 0-9 - . _ ~` (and `/` when `slash` is false).
    static func encode(_ text: String, keepSlash: Bool = false) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "/") where keepSlash:
                out.append("/")
            default:
                out += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return out
    }

    static func trimmed(_ value: String) -> String {
        value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String { count >= width ? self : String(repeating: "0", count: width - count) + self }
}
