/// The rules the client's own HTTP/1.1 engine reads a server's response by, apart from the
/// socket: the head (status line and fields) and the body's framing, including a chunked body
/// decoded incrementally. Everything a server sends is bounded and checked, so a hostile or
/// broken server (or anything between) gets an error, never a crash, unbounded memory or a
/// body taken for another: lines and heads are capped, sizes parsed with overflow checks, a
/// malformed or conflicting `Content-Length` is refused rather than read to the close, and the
/// CRLF after each chunk's data must be there. Pure Swift over bytes, so it is fuzzed alone
/// (Deploy/fuzz, target `response`).
public enum HTTPResponseParser {
    /// Why a response was refused.
    public struct Failure: Error, Hashable, Sendable, CustomStringConvertible {
        public let description: String
        /// The body is longer than the caller's limit (the rest is not malformed).
        public let tooLarge: Bool

        init(_ description: String, tooLarge: Bool = false) {
            self.description = description
            self.tooLarge = tooLarge
        }
    }

    /// The largest head (status line and fields) accepted.
    public static let headLimit = 64 << 10
    /// The longest chunk-size line (with any extensions) accepted.
    public static let chunkLineLimit = 4 << 10
    /// The most trailer bytes accepted after the last chunk.
    public static let trailerLimit = 64 << 10

    /// A parsed head.
    public struct Head: Sendable {
        public var status: Int
        public var headers: [(name: String, value: String)]
    }

    /// How the body is delimited.
    public enum Framing: Hashable, Sendable {
        /// No body (HEAD, 1xx, 204, 304).
        case none
        /// Exactly this many bytes.
        case length(Int64)
        /// Chunked transfer coding.
        case chunked
        /// Until the server closes the connection (no length given).
        case untilClose
    }

    /// Parses a head (without its final empty line): `HTTP/1.x` and a three-digit status, then
    /// fields as `name: value`, with token names, no folded lines and no CR, LF or NUL inside a line.
    public static func parseHead(_ bytes: ArraySlice<UInt8>) throws(Failure) -> Head {
        guard bytes.count <= headLimit else { throw Failure("the response head is longer than \(headLimit) bytes") }
        var lines: [ArraySlice<UInt8>] = []
        var start = bytes.startIndex
        var index = bytes.startIndex
        while index < bytes.endIndex {
            if bytes[index] == 13, index + 1 < bytes.endIndex, bytes[index + 1] == 10 {
                lines.append(bytes[start..<index])
                index += 2
                start = index
            } else {
                index += 1
            }
        }
        lines.append(bytes[start..<bytes.endIndex])
        let statusLine = lines[0]
        guard statusLine.count >= 12, statusLine.starts(with: Array("HTTP/1.".utf8)), [48, 49].contains(statusLine[statusLine.startIndex + 7]),
              statusLine[statusLine.startIndex + 8] == 32 else {
            throw Failure("not an HTTP/1.x status line")
        }
        let digits = statusLine[(statusLine.startIndex + 9)..<(statusLine.startIndex + 12)]
        guard digits.allSatisfy({ (48...57).contains($0) }), statusLine.count == 12 || statusLine[statusLine.startIndex + 12] == 32 else {
            throw Failure("the status is not three digits")
        }
        let status = digits.reduce(0) { $0 * 10 + Int($1 - 48) }
        guard (100...599).contains(status) else { throw Failure("status \(status) is out of range") }
        guard !statusLine.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) else { throw Failure("a stray CR, LF or NUL in the status line") }
        var headers: [(name: String, value: String)] = []
        for line in lines.dropFirst() {
            guard let first = line.first else { throw Failure("an empty line inside the head") }
            guard first != 32 && first != 9 else { throw Failure("a folded header line") }
            guard let colon = line.firstIndex(of: 58), colon > line.startIndex else { throw Failure("a header line without a name and a colon") }
            let name = line[line.startIndex..<colon]
            guard name.allSatisfy(isTokenCharacter) else { throw Failure("a header name with characters a token cannot have") }
            let value = line[(colon + 1)...]
            guard !value.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) else { throw Failure("a stray CR, LF or NUL in a header value") }
            let trimmed = value.drop { $0 == 32 || $0 == 9 }.reversed().drop { $0 == 32 || $0 == 9 }.reversed()
            headers.append((String(decoding: name, as: UTF8.self), String(decoding: trimmed, as: UTF8.self)))
        }
        return Head(status: status, headers: headers)
    }

    /// The body's framing for a response to `method`. Refuses what could make a body read as
    /// another (RFC 9112 §6.3): two different `Content-Length` values, a value that is not
    /// digits or overflows, `Transfer-Encoding` other than `chunked`, or both fields at once.
    public static func framing(status: Int, headers: [(name: String, value: String)], method: String) throws(Failure) -> Framing {
        if method == "HEAD" || status == 204 || status == 304 || (100..<200).contains(status) { return .none }
        var length: Int64?
        var encodings: [String] = []
        for (name, value) in headers {
            if equalsIgnoringCase(name, "Content-Length") {
                guard let parsed = decimal(value) else { throw Failure("Content-Length is not a number: \(value.prefix(40))") }
                if let length, length != parsed { throw Failure("two Content-Length values: \(length) and \(parsed)") }
                length = parsed
            } else if equalsIgnoringCase(name, "Transfer-Encoding") {
                encodings.append(value)
            }
        }
        if !encodings.isEmpty {
            guard encodings.count == 1, equalsIgnoringCase(encodings[0], "chunked") else {
                throw Failure("Transfer-Encoding \(encodings.joined(separator: ", ").prefix(60)) (only chunked is read)")
            }
            guard length == nil else { throw Failure("both Transfer-Encoding and Content-Length") }
            return .chunked
        }
        return length.map { .length($0) } ?? .untilClose
    }

    /// A non-negative decimal of at most 18 digits (no sign, no spaces inside).
    public static func decimal(_ text: String) -> Int64? {
        let utf8 = text.utf8
        guard !utf8.isEmpty, utf8.count <= 18, utf8.allSatisfy({ (48...57).contains($0) }) else { return nil }
        return utf8.reduce(0) { $0 * 10 + Int64($1 - 48) }
    }

    static func isTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case 48...57, 65...90, 97...122: return true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "*"),
             UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"),
             UInt8(ascii: "~"):
            return true
        default: return false
        }
    }

    static func equalsIgnoringCase(_ a: String, _ b: String) -> Bool {
        a.utf8.count == b.utf8.count && zip(a.utf8, b.utf8).allSatisfy { ($0 | 0x20) == ($1 | 0x20) }
    }

    /// Whether a field is safe to send: a token name and a value without CR, LF or NUL (a value
    /// that carries them would end the field and start another, a request header injection).
    public static func isSendable(name: String, value: String) -> Bool {
        !name.isEmpty && name.utf8.allSatisfy(isTokenCharacter) && !value.utf8.contains { $0 == 13 || $0 == 10 || $0 == 0 }
    }

    /// Whether `text` is a strong entity tag (RFC 9110 §8.8.3): `"`, visible ASCII other than
    /// `"` (or bytes above 0x7F), `"`: what may go back in `If-Range` or `If-None-Match`.
    public static func isStrongETag(_ text: String) -> Bool {
        let utf8 = Array(text.utf8)
        guard utf8.count >= 2, utf8.count <= 256, utf8.first == 34, utf8.last == 34 else { return false }
        return utf8.dropFirst().dropLast().allSatisfy { $0 == 0x21 || (0x23...0x7E).contains($0) || $0 >= 0x80 }
    }

    /// A chunked body decoded as it arrives: ``decode(_:sink:)`` takes whatever bytes came and
    /// hands the data to `sink`, until the last chunk and the trailer section have been read.
    public struct ChunkedDecoder: Sendable {
        enum State: Sendable, Equatable {
            case sizeLine
            case data(remaining: Int64)
            case dataCR
            case dataLF
            case trailer
            case done
        }

        var state = State.sizeLine
        /// The size line or trailer line read so far.
        var line: [UInt8] = []
        var trailerBytes = 0
        /// Data bytes so far.
        public private(set) var received: Int64 = 0
        /// The most data bytes accepted.
        public let limit: Int64

        public init(limit: Int64) { self.limit = limit }

        /// Whether the last chunk and the trailers have been read.
        public var isDone: Bool { state == .done }

        /// Decodes from `input`; returns how many of its bytes were used (fewer than all only once
        /// done: what follows the body is not part of it).
        public mutating func decode(_ input: UnsafeRawBufferPointer, sink: (UnsafeRawBufferPointer) throws -> Void) throws -> Int {
            var index = 0
            while index < input.count {
                switch state {
                case .done:
                    return index
                case .data(let remaining):
                    let take = Int(min(Int64(input.count - index), remaining))
                    try sink(UnsafeRawBufferPointer(rebasing: input[index..<(index + take)]))
                    index += take
                    state = remaining == Int64(take) ? .dataCR : .data(remaining: remaining - Int64(take))
                case .dataCR:
                    guard input[index] == 13 else { throw Failure("no CRLF after a chunk's data") }
                    index += 1
                    state = .dataLF
                case .dataLF:
                    guard input[index] == 10 else { throw Failure("no CRLF after a chunk's data") }
                    index += 1
                    state = .sizeLine
                case .sizeLine:
                    let byte = input[index]
                    index += 1
                    guard byte == 10 else {
                        guard line.count < HTTPResponseParser.chunkLineLimit else { throw Failure("a chunk-size line longer than \(HTTPResponseParser.chunkLineLimit) bytes") }
                        line.append(byte)
                        continue
                    }
                    try endSizeLine()
                case .trailer:
                    let byte = input[index]
                    index += 1
                    trailerBytes += 1
                    guard trailerBytes <= HTTPResponseParser.trailerLimit else { throw Failure("trailers longer than \(HTTPResponseParser.trailerLimit) bytes") }
                    guard byte == 10 else {
                        line.append(byte)
                        continue
                    }
                    guard line.last == 13 else { throw Failure("a trailer line not ended by CRLF") }
                    if line.count == 1 { state = .done }
                    line.removeAll(keepingCapacity: true)
                }
            }
            return index
        }

        private mutating func endSizeLine() throws {
            guard line.last == 13 else { throw Failure("a chunk-size line not ended by CRLF") }
            line.removeLast()
            let sizeEnd = line.firstIndex(of: UInt8(ascii: ";")) ?? line.endIndex
            var digits = line[..<sizeEnd]
            while let last = digits.last, last == 32 || last == 9 { digits.removeLast() }
            guard !digits.isEmpty, digits.count <= 16 else { throw Failure("a chunk size that is empty or too long") }
            var size: UInt64 = 0
            for digit in digits {
                let value: UInt8
                switch digit {
                case 48...57: value = digit - 48
                case 65...70: value = digit - 55
                case 97...102: value = digit - 87
                default: throw Failure("a chunk size that is not hexadecimal")
                }
                size = size << 4 | UInt64(value)
            }
            guard size <= UInt64(Int64.max) else { throw Failure("a chunk size past 2^63") }
            line.removeAll(keepingCapacity: true)
            let chunk = Int64(size)
            if chunk == 0 {
                state = .trailer
                return
            }
            guard chunk <= limit - received else { throw Failure("the body is longer than \(limit) bytes", tooLarge: true) }
            received += chunk
            state = .data(remaining: chunk)
        }
    }
}
