/// The ids that appear in URLs and file names, and their rules.
public enum Identifier {
    /// An app id: 1–128 of `A-Z a-z 0-9 . -`, starting with a letter or digit, no `..`
    /// (reverse-DNS names such as `com.example.game`).
    public static func isValidApp(_ id: String) -> Bool { isValid(id, maxLength: 128) }

    /// A pack id: 1–64 of `A-Z a-z 0-9 . -`, starting with a letter or digit, no `..`.
    /// `_` is refused because Background Assets refuses it in asset pack ids.
    public static func isValidPack(_ id: String) -> Bool { isValid(id, maxLength: 64) }

    /// A channel name: the rules of a pack id (`production`, `beta`, `build-2.4`, …).
    public static func isValidChannel(_ name: String) -> Bool { isValid(name, maxLength: 64) }

    private static func isValid(_ id: String, maxLength: Int) -> Bool {
        // Over the contiguous UTF-8 (no copy for a native string): routing checks ids on every request.
        var id = id
        return id.withUTF8 { utf8 in
            guard (1...maxLength).contains(utf8.count), isAlphanumeric(utf8[0]) else { return false }
            var previous: UInt8 = 0
            for c in utf8 {
                guard isAlphanumeric(c) || c == 45 || c == 46 else { return false }
                if c == 46 && previous == 46 { return false }
                previous = c
            }
            return true
        }
    }

    private static func isAlphanumeric(_ c: UInt8) -> Bool {
        (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122)
    }
}
