// A small CBOR (RFC 8949) decoder for App Attest's attestation objects and assertions.
//
// Why not a package: no CBOR package is on the list of packages this project may resolve, and
// adding one to the origin's trusted code for the few shapes App Attest uses (a map of text keys,
// byte strings, an array of byte strings, and the COSE key's small map) would bring far more
// surface than it removes. The subset decoded here is what Apple's objects use: definite lengths
// only, major types 0-5 and the simple values of type 7 (false, true, null, undefined and the
// other one-byte simple values); tags, floats and indefinite lengths are refused. Every declared
// length is checked against the bytes that remain before anything is allocated (an array or map
// cannot declare more items than it has bytes, so work and memory stay linear in the input), nesting stops at 16 levels, text must be UTF-8,
// and a map's keys must be distinct (two readers must never see two different objects; text keys that
// differ only by Unicode canonical equivalence count as the same key, and are refused too). Fuzzed
// by Deploy/fuzz/targets/cbor.swift. Self-contained: the fuzz target compiles this file alone.

/// One decoded CBOR data item.
public indirect enum CBORValue: Sendable, Hashable {
    case unsigned(UInt64)
    /// The negative integer −1 − n.
    case negative(UInt64)
    case bytes([UInt8])
    case text(String)
    case array([CBORValue])
    /// A map's entries in their encoded order (keys distinct).
    case map([CBORMapEntry])
    case bool(Bool)
    case null
    /// A simple value other than false, true and null (0-19, 23 undefined, 32-255).
    case simple(UInt8)

    /// The value under a text key, when this is a map that has it. Keys compare by their UTF-8
    /// bytes (Swift's `==` on strings is canonical equivalence: "\u{212A}" == "K").
    public subscript(key: String) -> CBORValue? {
        guard case .map(let entries) = self else { return nil }
        return entries.first { $0.key.text?.utf8.elementsEqual(key.utf8) == true }?.value
    }

    /// The value under an integer key (COSE keys use them: 1, 3, -1, -2, -3).
    public subscript(integer key: Int) -> CBORValue? {
        guard case .map(let entries) = self else { return nil }
        let wanted: CBORValue = key >= 0 ? .unsigned(UInt64(key)) : .negative(UInt64(-1 - key))
        return entries.first { $0.key == wanted }?.value
    }

    /// The text of a text string, else nil.
    public var text: String? {
        if case .text(let text) = self { return text }
        return nil
    }

    /// The bytes of a byte string, else nil.
    public var byteString: [UInt8]? {
        if case .bytes(let bytes) = self { return bytes }
        return nil
    }
}

/// One key and value of a CBOR map.
public struct CBORMapEntry: Sendable, Hashable {
    public var key: CBORValue
    public var value: CBORValue

    public init(key: CBORValue, value: CBORValue) {
        self.key = key
        self.value = value
    }
}

/// Why bytes are not a CBOR item this decoder takes; `offset` is where reading stopped.
public struct CBORError: Error, Sendable, Equatable, CustomStringConvertible {
    public let offset: Int
    public let reason: String
    public var description: String { "CBOR at byte \(offset): \(reason)" }
}

/// Decodes the subset of CBOR described at the top of this file.
public enum CBORDecoder {
    /// The deepest nesting of arrays and maps accepted (App Attest's objects use 3).
    public static let maximumDepth = 16

    /// Decodes the one item at the start of `bytes`; `used` is how many bytes it took (what
    /// follows is the caller's: authenticator data carries extensions after the COSE key).
    public static func decodePrefix(_ bytes: [UInt8]) throws(CBORError) -> (value: CBORValue, used: Int) {
        var reader = Reader(bytes: bytes)
        let value = try reader.item(depth: 0)
        return (value, reader.offset)
    }

    /// Decodes `bytes` as exactly one item: trailing bytes are refused.
    public static func decode(_ bytes: [UInt8]) throws(CBORError) -> CBORValue {
        let (value, used) = try decodePrefix(bytes)
        guard used == bytes.count else { throw CBORError(offset: used, reason: "\(bytes.count - used) bytes after the item") }
        return value
    }

    private struct Reader {
        let bytes: [UInt8]
        var offset = 0

        var remaining: Int { bytes.count - offset }

        func fail(_ reason: String) -> CBORError { CBORError(offset: offset, reason: reason) }

        mutating func byte() throws(CBORError) -> UInt8 {
            guard offset < bytes.count else { throw fail("truncated") }
            defer { offset += 1 }
            return bytes[offset]
        }

        /// The argument of an initial byte's additional information (RFC 8949 §3).
        mutating func argument(_ info: UInt8) throws(CBORError) -> UInt64 {
            switch info {
            case 0..<24: return UInt64(info)
            case 24...27:
                let size = 1 << Int(info - 24)
                guard remaining >= size else { throw fail("truncated: an argument of \(size) bytes, \(remaining) left") }
                var value: UInt64 = 0
                for _ in 0..<size { value = value << 8 | UInt64(try byte()) }
                return value
            case 31: throw fail("indefinite lengths are not accepted")
            default: throw fail("reserved additional information \(info)")
            }
        }

        /// A length that must fit in what remains, at `unit` bytes per counted thing at least.
        mutating func length(_ info: UInt8, unit: Int) throws(CBORError) -> Int {
            let declared = try argument(info)
            guard declared <= UInt64(remaining / unit) else { throw fail("a declared length of \(declared) with \(remaining) bytes left") }
            return Int(declared)
        }

        mutating func item(depth: Int) throws(CBORError) -> CBORValue {
            let initial = try byte()
            let major = initial >> 5, info = initial & 0x1f
            switch major {
            case 0: return .unsigned(try argument(info))
            case 1: return .negative(try argument(info))
            case 2:
                let count = try length(info, unit: 1)
                defer { offset += count }
                return .bytes(Array(bytes[offset..<offset + count]))
            case 3:
                let count = try length(info, unit: 1)
                guard let text = String(validating: bytes[offset..<offset + count], as: UTF8.self) else { throw fail("text that is not UTF-8") }
                offset += count
                return .text(text)
            case 4, 5:
                guard depth < CBORDecoder.maximumDepth else { throw fail("nested deeper than \(CBORDecoder.maximumDepth)") }
                let count = try length(info, unit: major == 4 ? 1 : 2)
                if major == 4 {
                    var items: [CBORValue] = []
                    items.reserveCapacity(count)
                    for _ in 0..<count { items.append(try item(depth: depth + 1)) }
                    return .array(items)
                }
                var entries: [CBORMapEntry] = []
                var keys: Set<CBORValue> = []
                entries.reserveCapacity(count)
                for _ in 0..<count {
                    let start = offset
                    let key = try item(depth: depth + 1)
                    guard keys.insert(key).inserted else { throw CBORError(offset: start, reason: "a map key appears twice") }
                    entries.append(CBORMapEntry(key: key, value: try item(depth: depth + 1)))
                }
                return .map(entries)
            case 6: throw fail("tags are not accepted")
            default:
                switch info {
                case 20: return .bool(false)
                case 21: return .bool(true)
                case 22: return .null
                case 0..<20, 23: return .simple(info)
                case 24:
                    let value = try byte()
                    guard value >= 32 else { throw fail("a two-byte simple value below 32") }
                    return .simple(value)
                case 25, 26, 27: throw fail("floating-point values are not accepted")
                case 31: throw fail("indefinite lengths are not accepted")
                default: throw fail("reserved additional information \(info)")
                }
            }
        }
    }
}

extension CBORValue {
    /// The value's encoding with the shortest arguments (RFC 8949 §4.2.1 preferred
    /// serialisation, keys in the given order). Tests and the fuzz target make objects with it.
    public var encoded: [UInt8] {
        var out: [UInt8] = []
        encode(into: &out)
        return out
    }

    private func encode(into out: inout [UInt8]) {
        func head(_ major: UInt8, _ value: UInt64) {
            switch value {
            case 0..<24: out.append(major << 5 | UInt8(value))
            case 24...0xff: out += [major << 5 | 24, UInt8(value)]
            case 0x100...0xffff: out.append(major << 5 | 25); out += (0..<2).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) }
            case 0x10000...0xffff_ffff: out.append(major << 5 | 26); out += (0..<4).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) }
            default: out.append(major << 5 | 27); out += (0..<8).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) }
            }
        }
        switch self {
        case .unsigned(let n): head(0, n)
        case .negative(let n): head(1, n)
        case .bytes(let b): head(2, UInt64(b.count)); out += b
        case .text(let t): head(3, UInt64(t.utf8.count)); out += Array(t.utf8)
        case .array(let items): head(4, UInt64(items.count)); for item in items { item.encode(into: &out) }
        case .map(let entries): head(5, UInt64(entries.count)); for entry in entries { entry.key.encode(into: &out); entry.value.encode(into: &out) }
        case .bool(let b): out.append(b ? 0xf5 : 0xf4)
        case .null: out.append(0xf6)
        case .simple(let v): if v < 24 { out.append(0xe0 | v) } else { out += [0xf8, v] }
        }
    }
}
