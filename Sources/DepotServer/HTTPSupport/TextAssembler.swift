/// Builds a string from pieces in one allocation, for text made on every request (paths,
/// entity tags, access-log lines): `String` appends cost several hundred instructions each.
struct TextAssembler {
    private let buffer: UnsafeMutableBufferPointer<UInt8>
    private(set) var count = 0

    private init(_ buffer: UnsafeMutableBufferPointer<UInt8>) { self.buffer = buffer }

    /// The text `build` writes; past `capacity` bytes, further pieces are dropped (never an overrun).
    static func text(capacity: Int, _ build: (inout TextAssembler) -> Void) -> String {
        String(unsafeUninitializedCapacity: capacity) { buffer in
            var assembler = TextAssembler(buffer)
            build(&assembler)
            return assembler.count
        }
    }

    /// `"text"`, as an entity tag is written.
    static func quoted(_ text: String) -> String {
        self.text(capacity: text.utf8.count + 2) { tag in
            tag.append(byte: UInt8(ascii: "\""))
            tag.append(text)
            tag.append(byte: UInt8(ascii: "\""))
        }
    }

    mutating func append(_ text: String) {
        var text = text
        text.withUTF8 { append($0) }
    }

    mutating func append(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard bytes.count <= buffer.count - count, let base = bytes.baseAddress else { return }
        (buffer.baseAddress! + count).update(from: base, count: bytes.count)
        count += bytes.count
    }

    mutating func append(byte: UInt8) {
        guard count < buffer.count else { return }
        buffer[count] = byte
        count += 1
    }

    /// A decimal integer, whole or not at all.
    mutating func append(_ value: Int64) {
        var magnitude = value.magnitude, divisor: UInt64 = 1, digits = 1
        while magnitude / divisor >= 10 { divisor *= 10; digits += 1 }
        guard digits + (value < 0 ? 1 : 0) <= buffer.count - count else { return }
        if value < 0 { append(byte: UInt8(ascii: "-")) }
        while divisor > 0 {
            append(byte: UInt8(48 + magnitude / divisor))
            magnitude %= divisor
            divisor /= 10
        }
    }
}
