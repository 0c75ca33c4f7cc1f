/// Finds where values lie in JSON text without building them: the byte range of a member of
/// the top-level object, and the ranges of an array's elements. What lets a manifest of 10,000
/// packs be verified and decoded in little more memory than its own bytes (<doc:SignedEnvelope>):
/// the envelope's payload is base64-decoded straight from the file's bytes, and the manifest's
/// packs are decoded one at a time, so no whole-document tree is ever built.
///
/// It checks structure only as far as it walks (strings, nesting); callers decode what it finds
/// with `JSONDecoder`, which checks the rest. Text it cannot walk is `nil`.
struct JSONScanner {
    let bytes: UnsafeRawBufferPointer

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    /// The range of the value of the top-level object's member `key`; for a string, its content
    /// between the quotes. nil when there is none — and also, so that this reading can never
    /// differ from a JSON decoder's, when any top-level key is escaped (`"pay\u006coad"`) or
    /// appears twice: such text is refused, not guessed at.
    func member(_ key: String) -> Range<Int>? {
        let wanted = Array(key.utf8)
        var found: Range<Int>?
        var names: Set<[UInt8]> = []
        var i = skipSpace(0)
        guard i < bytes.count, bytes[i] == UInt8(ascii: "{") else { return nil }
        i = skipSpace(i + 1)
        if i < bytes.count, bytes[i] == UInt8(ascii: "}") { return nil }
        while i < bytes.count, bytes[i] == UInt8(ascii: "\"") {
            guard let keyEnd = stringEnd(i) else { return nil }
            let name = Array(bytes[(i + 1)..<keyEnd])
            guard !name.contains(UInt8(ascii: "\\")), names.insert(name).inserted else { return nil }
            i = skipSpace(keyEnd + 1)
            guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { return nil }
            i = skipSpace(i + 1)
            guard let valueEnd = valueEnd(i) else { return nil }
            if name == wanted {
                found = bytes[i] == UInt8(ascii: "\"") ? i + 1..<valueEnd - 1 : i..<valueEnd
            }
            i = skipSpace(valueEnd)
            guard i < bytes.count else { return nil }
            if bytes[i] == UInt8(ascii: "}") { return found }
            guard bytes[i] == UInt8(ascii: ",") else { return nil }
            i = skipSpace(i + 1)
        }
        return nil
    }

    /// The ranges of the elements of the array at `range` (as ``member(_:)`` returned it).
    func elements(of range: Range<Int>) -> [Range<Int>]? {
        var i = skipSpace(range.lowerBound)
        guard i < range.upperBound, bytes[i] == UInt8(ascii: "[") else { return nil }
        i = skipSpace(i + 1)
        var out: [Range<Int>] = []
        if i < range.upperBound, bytes[i] == UInt8(ascii: "]") { return out }
        while i < range.upperBound {
            guard let end = valueEnd(i) else { return nil }
            out.append(i..<end)
            i = skipSpace(end)
            guard i < range.upperBound else { return nil }
            if bytes[i] == UInt8(ascii: "]") { return out }
            guard bytes[i] == UInt8(ascii: ",") else { return nil }
            i = skipSpace(i + 1)
        }
        return nil
    }

    private func skipSpace(_ start: Int) -> Int {
        var i = start
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
        return i
    }

    /// The index of the closing quote of the string starting at `start`.
    private func stringEnd(_ start: Int) -> Int? {
        var i = start + 1
        while i < bytes.count {
            switch bytes[i] {
            case UInt8(ascii: "\\"): i += 2
            case UInt8(ascii: "\""): return i
            default: i += 1
            }
        }
        return nil
    }

    /// The index just past the value starting at `start`.
    private func valueEnd(_ start: Int) -> Int? {
        guard start < bytes.count else { return nil }
        switch bytes[start] {
        case UInt8(ascii: "\""):
            return stringEnd(start).map { $0 + 1 }
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0
            var i = start
            while i < bytes.count {
                switch bytes[i] {
                case UInt8(ascii: "\""):
                    guard let end = stringEnd(i) else { return nil }
                    i = end
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 { return i + 1 }
                default: break
                }
                i += 1
            }
            return nil
        default:
            var i = start
            while i < bytes.count, ![UInt8(ascii: ","), UInt8(ascii: "}"), UInt8(ascii: "]"), 0x20, 0x0A, 0x0D, 0x09].contains(bytes[i]) { i += 1 }
            return i > start ? i : nil
        }
    }
}
