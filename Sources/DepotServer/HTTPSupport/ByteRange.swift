/// What a `Range` header asks of a representation of `size` bytes (RFC 9110 §14).
enum RangeRequest: Equatable {
    /// No usable range: send the whole representation with 200. Covers a missing header,
    /// invalid syntax, another unit, an inverted range, and several ranges (our documented
    /// choice: a multi-range request gets the whole file, never more bytes than the file).
    case whole
    /// One satisfiable range, inclusive.
    case bytes(first: Int64, last: Int64)
    /// A valid range that does not overlap the representation: 416.
    case unsatisfiable

    /// Interprets a `Range` header value.
    static func parse(_ header: String?, size: Int64) -> RangeRequest {
        guard let header else { return .whole }
        let trimmed = header.trimmingWhitespace
        guard trimmed.count > 6, trimmed.prefix(6).lowercased() == "bytes=" else { return .whole }
        let specs = trimmed.dropFirst(6).split(separator: ",", omittingEmptySubsequences: false).map { String($0).trimmingWhitespace }
        guard specs.count == 1, let spec = specs.first, let dash = spec.firstIndex(of: "-") else { return .whole }
        let firstText = spec[..<dash], lastText = spec[spec.index(after: dash)...]
        if firstText.isEmpty {
            // Suffix: the last N bytes.
            guard let suffix = number(lastText) else { return .whole }
            guard suffix > 0, size > 0 else { return .unsatisfiable }
            return .bytes(first: max(0, size - suffix), last: size - 1)
        }
        guard let first = number(firstText) else { return .whole }
        var last = size - 1
        if !lastText.isEmpty {
            guard let parsed = number(lastText), parsed >= first else { return .whole }
            last = min(parsed, size - 1)
        }
        guard first < size else { return .unsatisfiable }
        return .bytes(first: first, last: last)
    }

    private static func number(_ text: Substring) -> Int64? {
        guard !text.isEmpty, text.count <= 18, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        return Int64(text)
    }
}

extension String {
    var trimmingWhitespace: String {
        var s = Substring(self)
        while let c = s.first, c == " " || c == "\t" { s.removeFirst() }
        while let c = s.last, c == " " || c == "\t" { s.removeLast() }
        return String(s)
    }
}
