/// Parses and checks a raw request target before anything routes on it.
///
/// libmicrohttpd hands the application a percent-decoded, unnormalised path in which `%00`
/// cuts the string short, so the server parses the raw target itself and refuses anything
/// ambiguous instead of guessing.
public struct RequestTarget: Sendable, Hashable {
    /// The decoded path segments.
    public var segments: [String]
    /// The decoded query parameters.
    public var query: [Pair]

    /// A query parameter.
    public struct Pair: Sendable, Hashable {
        public var name: String
        public var value: String
    }

    /// Why a target was refused.
    public enum Failure: Error, Hashable, Sendable {
        case tooLong, notOriginForm, badEscape, nulByte, dotSegment, encodedSlash, backslash, emptySegment, controlCharacter, invalidUTF8
    }

    /// The longest target accepted, in bytes.
    public static let maximumLength = 2048

    /// Parses `raw`, the request target exactly as received.
    public static func parse(_ raw: String) throws(Failure) -> RequestTarget {
        var raw = raw
        // Over the contiguous UTF-8 (no copy for a native string): byte loops, no iterator per byte.
        let result = raw.withUTF8 { bytes -> Result<RequestTarget, Failure> in
            do throws(Failure) { return .success(try parse(bytes: bytes)) } catch { return .failure(error) }
        }
        return try result.get()
    }

    private static func parse(bytes: UnsafeBufferPointer<UInt8>) throws(Failure) -> RequestTarget {
        guard bytes.count <= maximumLength else { throw .tooLong }
        guard bytes.first == UInt8(ascii: "/") else { throw .notOriginForm }
        var queryStart = bytes.count
        for index in 0..<bytes.count where bytes[index] == UInt8(ascii: "?") {
            queryStart = index
            break
        }
        // One trailing slash names the same resource ("/a/" is "/a"); "//" anywhere is refused.
        var pathEnd = queryStart
        if pathEnd > 1 && bytes[pathEnd - 1] == UInt8(ascii: "/") { pathEnd -= 1 }
        var segments: [String] = []
        if pathEnd > 1 {
            segments.reserveCapacity(8)
            var start = 1
            while true {
                var end = start
                while end < pathEnd && bytes[end] != UInt8(ascii: "/") { end += 1 }
                segments.append(try segment(UnsafeBufferPointer(rebasing: bytes[start..<end])))
                guard end < pathEnd else { break }
                start = end + 1
            }
        }
        var query: [Pair] = []
        if queryStart < bytes.count {
            let text = UnsafeBufferPointer(rebasing: bytes[(queryStart + 1)...])
            for item in text.split(separator: UInt8(ascii: "&")) {
                let eq = item.firstIndex(of: UInt8(ascii: "=")) ?? item.endIndex
                let name = try decode(item[item.startIndex..<eq], plusIsSpace: true)
                let value = eq < item.endIndex ? try decode(item[(eq + 1)...], plusIsSpace: true) : ""
                query.append(Pair(name: name, value: value))
            }
        }
        return RequestTarget(segments: segments, query: query)
    }

    /// One path segment, decoded and checked.
    private static func segment(_ part: UnsafeBufferPointer<UInt8>) throws(Failure) -> String {
        let plain = isPlain(part[...], plusIsSpace: false)
        let decoded = plain ? String(decoding: part, as: UTF8.self) : try unescape(part[...], plusIsSpace: false)
        guard !decoded.isEmpty else { throw .emptySegment }
        guard decoded != "." && decoded != ".." else { throw .dotSegment }
        if !plain {
            guard !decoded.utf8.contains(UInt8(ascii: "/")) else { throw .encodedSlash }
        }
        return decoded
    }

    private static func decode(_ part: Slice<UnsafeBufferPointer<UInt8>>, plusIsSpace: Bool) throws(Failure) -> String {
        // The common case: printable ASCII with nothing to decode becomes a String as it is.
        isPlain(part, plusIsSpace: plusIsSpace) ? String(decoding: part, as: UTF8.self) : try unescape(part, plusIsSpace: plusIsSpace)
    }

    /// Printable ASCII with nothing to decode or refuse.
    private static func isPlain(_ part: Slice<UnsafeBufferPointer<UInt8>>, plusIsSpace: Bool) -> Bool {
        part.allSatisfy { $0 > 0x20 && $0 < 0x7f && $0 != UInt8(ascii: "%") && $0 != UInt8(ascii: "\\") && !(plusIsSpace && $0 == UInt8(ascii: "+")) }
    }

    /// Decodes escapes (and `+` when `plusIsSpace`), refusing what decodes to NUL, a backslash,
    /// a control character or invalid UTF-8.
    private static func unescape(_ part: Slice<UnsafeBufferPointer<UInt8>>, plusIsSpace: Bool) throws(Failure) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(part.count)
        var i = part.startIndex
        while i < part.endIndex {
            let c = part[i]
            if c == UInt8(ascii: "%") {
                guard i + 2 < part.endIndex, let high = hexValue(part[i + 1]), let low = hexValue(part[i + 2]) else { throw .badEscape }
                out.append(high << 4 | low)
                i += 3
            } else {
                out.append(plusIsSpace && c == UInt8(ascii: "+") ? 0x20 : c)
                i += 1
            }
        }
        for c in out {
            if c == 0 { throw .nulByte }
            if c == UInt8(ascii: "\\") { throw .backslash }
            if c < 0x20 || c == 0x7f { throw .controlCharacter }
        }
        guard let text = String(validating: out, as: UTF8.self) else { throw .invalidUTF8 }
        return text
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: return c - 48
        case 97...102: return c - 87
        case 65...70: return c - 55
        default: return nil
        }
    }
}
