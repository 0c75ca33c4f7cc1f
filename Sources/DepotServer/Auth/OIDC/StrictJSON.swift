import DepotCore

/// The JSON (RFC 8259) of a JWT's header and payload, read more strictly than Foundation reads
/// it, so that this origin never reads a token differently from another verifier: a name twice
/// in one object is refused (Foundation keeps the first value; Python, Go and JavaScript the
/// last), and so is a name only Unicode canonical equivalence makes the same as another (a Swift
/// dictionary would fold the two); strings must be valid UTF-8 without unpaired surrogates;
/// nothing but whitespace may follow the value; at most 32 levels deep. Integers stay integers.
struct StrictJSON {
    struct Failure: Error {}

    static let maximumDepth = 32

    /// The members of the object `bytes` holds; fails on anything else.
    static func object(_ bytes: [UInt8]) throws(Failure) -> [String: JSONValue] {
        var parser = StrictJSON(bytes: bytes)
        guard case .object(let members) = try parser.value(depth: 0) else { throw Failure() }
        parser.skipSpace()
        guard parser.index == bytes.count else { throw Failure() }
        return members
    }

    private let bytes: [UInt8]
    private var index = 0

    private init(bytes: [UInt8]) { self.bytes = bytes }

    private var next: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipSpace() {
        while let byte = next, byte == 0x20 || byte == 0x09 || byte == 0x0a || byte == 0x0d { index += 1 }
    }

    private mutating func expect(_ byte: UInt8) throws(Failure) {
        guard next == byte else { throw Failure() }
        index += 1
    }

    private mutating func value(depth: Int) throws(Failure) -> JSONValue {
        guard depth < Self.maximumDepth else { throw Failure() }
        skipSpace()
        guard let first = next else { throw Failure() }
        switch first {
        case UInt8(ascii: "{"): return .object(try object(depth: depth))
        case UInt8(ascii: "["): return .array(try array(depth: depth))
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw Failure()
        }
    }

    private mutating func object(depth: Int) throws(Failure) -> [String: JSONValue] {
        try expect(UInt8(ascii: "{"))
        var members: [String: JSONValue] = [:]
        skipSpace()
        if next == UInt8(ascii: "}") {
            index += 1
            return members
        }
        while true {
            skipSpace()
            let name = try string()
            skipSpace()
            try expect(UInt8(ascii: ":"))
            let member = try value(depth: depth + 1)
            // The dictionary's lookup is canonical equivalence: exact repeats and look-alikes both land here.
            guard members.updateValue(member, forKey: name) == nil else { throw Failure() }
            skipSpace()
            if next == UInt8(ascii: "}") {
                index += 1
                return members
            }
            try expect(UInt8(ascii: ","))
        }
    }

    private mutating func array(depth: Int) throws(Failure) -> [JSONValue] {
        try expect(UInt8(ascii: "["))
        var elements: [JSONValue] = []
        skipSpace()
        if next == UInt8(ascii: "]") {
            index += 1
            return elements
        }
        while true {
            elements.append(try value(depth: depth + 1))
            skipSpace()
            if next == UInt8(ascii: "]") {
                index += 1
                return elements
            }
            try expect(UInt8(ascii: ","))
        }
    }

    private mutating func literal(_ text: StaticString) throws(Failure) {
        let count = text.utf8CodeUnitCount
        guard bytes.count - index >= count, text.withUTF8Buffer({ bytes[index..<index + count].elementsEqual($0) }) else { throw Failure() }
        index += count
    }

    private mutating func string() throws(Failure) -> String {
        try expect(UInt8(ascii: "\""))
        var decoded: [UInt8] = []
        while true {
            guard let byte = next else { throw Failure() }
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                guard let text = String(validating: decoded, as: UTF8.self) else { throw Failure() }
                return text
            case 0..<0x20: throw Failure()
            case UInt8(ascii: "\\"):
                guard let escape = next else { throw Failure() }
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(escape)
                case UInt8(ascii: "b"): decoded.append(0x08)
                case UInt8(ascii: "f"): decoded.append(0x0c)
                case UInt8(ascii: "n"): decoded.append(0x0a)
                case UInt8(ascii: "r"): decoded.append(0x0d)
                case UInt8(ascii: "t"): decoded.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xd800..<0xdc00).contains(scalar) {
                        // A high surrogate must be followed by an escaped low one.
                        try expect(UInt8(ascii: "\\"))
                        try expect(UInt8(ascii: "u"))
                        let low = try hex4()
                        guard (0xdc00..<0xe000).contains(low) else { throw Failure() }
                        scalar = 0x10000 + (scalar - 0xd800) << 10 + (low - 0xdc00)
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw Failure() }
                    UTF8.encode(unicode) { decoded.append($0) }
                default: throw Failure()
                }
            default: decoded.append(byte)
            }
        }
    }

    private mutating func hex4() throws(Failure) -> UInt32 {
        guard bytes.count - index >= 4 else { throw Failure() }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw Failure()
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`: an integer when it has neither
    /// fraction nor exponent and fits 64 bits, else a finite double.
    private mutating func number() throws(Failure) -> JSONValue {
        let start = index
        func digits(_ parser: inout StrictJSON) throws(Failure) {
            guard let first = parser.next, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else { throw Failure() }
            while let byte = parser.next, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { parser.index += 1 }
        }
        if next == UInt8(ascii: "-") { index += 1 }
        if next == UInt8(ascii: "0") {
            index += 1
        } else {
            try digits(&self)
        }
        var integral = true
        if next == UInt8(ascii: ".") {
            index += 1
            integral = false
            try digits(&self)
        }
        if next == UInt8(ascii: "e") || next == UInt8(ascii: "E") {
            index += 1
            integral = false
            if next == UInt8(ascii: "+") || next == UInt8(ascii: "-") { index += 1 }
            try digits(&self)
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if integral, let value = Int64(text) { return .integer(value) }
        guard let value = Double(text), value.isFinite else { throw Failure() }
        return .number(value)
    }
}
