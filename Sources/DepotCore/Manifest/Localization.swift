import Foundation

/// A pack's language, as Background Assets takes it (iOS 27+): an ISO 639 language code with,
/// optionally, a BCP-47 script and region — nothing else (no variants, no extensions).
/// Normalised: `fr-CA`, `zh-Hant`, `zh-Hans-VN`, `es-419`. See <doc:Languages>.
public struct LanguageTag: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// Lower case, 2 or 3 letters.
    public let language: String
    /// Title case, 4 letters (`Hant`), if given.
    public let script: String?
    /// Upper case, 2 letters (`CA`), or 3 digits (`419`), if given.
    public let region: String?

    /// Parses `fr-CA`, `fr_ca`, `zh-Hant-TW`…; nil for anything else (`fr-CA-x-private`, `en-US-POSIX`, `f`).
    public init?(_ text: String) {
        var parts = text.split(separator: "-", omittingEmptySubsequences: false).flatMap { $0.split(separator: "_", omittingEmptySubsequences: false) }[...]
        func letters(_ part: Substring, _ counts: ClosedRange<Int>) -> Bool {
            counts.contains(part.utf8.count) && part.utf8.allSatisfy { ($0 | 0x20) >= 97 && ($0 | 0x20) <= 122 }
        }
        guard let first = parts.popFirst(), letters(first, 2...3) else { return nil }
        language = first.lowercased()
        if let next = parts.first, letters(next, 4...4) {
            script = next.prefix(1).uppercased() + next.dropFirst().lowercased()
            parts.removeFirst()
        } else {
            script = nil
        }
        if let next = parts.first, letters(next, 2...2) || (next.utf8.count == 3 && next.utf8.allSatisfy { $0 >= 48 && $0 <= 57 }) {
            region = next.uppercased()
            parts.removeFirst()
        } else {
            region = nil
        }
        guard parts.isEmpty else { return nil }
    }

    /// `language[-Script][-REGION]`.
    public var description: String { [language, script, region].compactMap { $0 }.joined(separator: "-") }

    public static func < (a: LanguageTag, b: LanguageTag) -> Bool { a.description < b.description }

    /// The script, given or implied for the languages written in more than one (Chinese: Hans,
    /// Hant in Taiwan, Hong Kong and Macao; Serbian: Cyrl); nil when neither.
    var likelyScript: String? {
        if let script { return script }
        switch language {
        case "zh": return ["TW", "HK", "MO"].contains(region ?? "") ? "Hant" : "Hans"
        case "sr": return "Cyrl"
        default: return nil
        }
    }

    /// Same language, and the same script (or one side's script unknown).
    func sharesScript(with other: LanguageTag) -> Bool {
        language == other.language && (likelyScript == nil || other.likelyScript == nil || likelyScript == other.likelyScript)
    }

    /// Same language, script (given or implied) and region.
    func isExactly(_ other: LanguageTag) -> Bool {
        language == other.language && likelyScript == other.likelyScript && region == other.region
    }

    /// The best of `available` for this language, in three tiers (each preferring the variant
    /// without a region, then without a script, then the first by name): the exact language;
    /// the same language in the same script; the same language. Nil: none speaks it.
    public func bestMatch(in available: [LanguageTag]) -> LanguageTag? {
        func generic(_ a: LanguageTag, _ b: LanguageTag) -> Bool {
            ((a.region == nil ? 0 : 1), (a.script == nil ? 0 : 1), a.description) < ((b.region == nil ? 0 : 1), (b.script == nil ? 0 : 1), b.description)
        }
        if let exact = available.filter(isExactly).sorted(by: generic).first { return exact }
        if let sameScript = available.filter(sharesScript).sorted(by: generic).first { return sameScript }
        return available.filter { $0.language == language }.sorted(by: generic).first
    }

    /// The language a device takes from `available`: the first of its `preferred` languages
    /// that any of them matches (``bestMatch(in:)``), else the app's `primary` language's
    /// match; nil when neither (the device takes none of them).
    public static func choose(preferred: [LanguageTag], primary: LanguageTag?, from available: [LanguageTag]) -> LanguageTag? {
        for language in preferred {
            if let match = language.bestMatch(in: available) { return match }
        }
        return primary?.bestMatch(in: available)
    }

    /// Parses a list (`fr-CA,en` or an array's elements), dropping what is not a language tag.
    public static func list<S: Sequence>(_ texts: S) -> [LanguageTag] where S.Element: StringProtocol {
        texts.flatMap { $0.split(separator: ",") }.compactMap { LanguageTag(String($0).trimmingCharacters(in: .whitespaces)) }
    }
}

extension PackEntry {
    /// The pack's language, parsed; nil for a pack that is not localized (or a malformed value,
    /// which the origin never signs).
    public var languageTag: LanguageTag? { language.flatMap(LanguageTag.init) }

    /// The group a localized pack belongs to: its id without the `-language` suffix
    /// (`voice-fr-CA` → `voice`); a device takes one pack of each group. Nil when not localized.
    public var languageGroup: String? {
        guard let tag = languageTag else { return nil }
        return Self.group(of: id, language: tag)
    }

    /// `id` without `-language` at its end (compared ignoring case), or nil if it does not end so.
    public static func group(of id: String, language: LanguageTag) -> String? {
        let suffix = "-" + language.description.lowercased()
        guard id.count > suffix.count, id.lowercased().hasSuffix(suffix) else { return nil }
        return String(id.dropLast(suffix.count))
    }
}

/// Which localized packs a device takes: for every group (``PackEntry/languageGroup``) the pack
/// of the language ``LanguageTag/choose(preferred:primary:from:)`` picks among the group's.
public enum LanguageSelection {
    /// The ids of the localized packs a device with `preferred` languages takes from `packs`
    /// (the app's primary language as the fallback); packs that are not localized are not listed.
    public static func selected(_ packs: [PackEntry], preferred: [LanguageTag], primary: LanguageTag?) -> Set<String> {
        selected(packs.map { ($0.id, $0.language) }, preferred: preferred, primary: primary)
    }

    /// The same, for packs given by id and language (a download manifest's).
    public static func selected(_ packs: [(id: String, language: String?)], preferred: [LanguageTag], primary: LanguageTag?) -> Set<String> {
        Set(picks(packs, preferred: preferred, primary: primary).values)
    }

    /// For every localized pack, the id of the pack of its group the device takes (itself, or
    /// the one that replaces it); absent when the group has nothing for the device.
    public static func picks(_ packs: [PackEntry], preferred: [LanguageTag], primary: LanguageTag?) -> [String: String] {
        picks(packs.map { ($0.id, $0.language) }, preferred: preferred, primary: primary)
    }

    /// The same, for packs given by id and language (a download manifest's).
    public static func picks(_ packs: [(id: String, language: String?)], preferred: [LanguageTag], primary: LanguageTag?) -> [String: String] {
        var groups: [String: [(tag: LanguageTag, id: String)]] = [:]
        for pack in packs {
            guard let tag = pack.language.flatMap(LanguageTag.init), let group = PackEntry.group(of: pack.id, language: tag) else { continue }
            groups[group, default: []].append((tag, pack.id))
        }
        var picks: [String: String] = [:]
        for members in groups.values {
            guard let language = LanguageTag.choose(preferred: preferred, primary: primary, from: members.map(\.tag)),
                  let pick = members.first(where: { $0.tag == language }) else { continue }
            for member in members { picks[member.id] = pick.id }
        }
        return picks
    }

    /// The packs a device with `preferred` languages has from `packs`: every pack that is not
    /// localized, and the selected localized ones.
    public static func packs(_ packs: [PackEntry], preferred: [LanguageTag], primary: LanguageTag?) -> [PackEntry] {
        let chosen = selected(packs, preferred: preferred, primary: primary)
        return packs.filter { $0.language == nil || chosen.contains($0.id) }
    }

    /// The languages `packs` are localized in, sorted.
    public static func languages(_ packs: [PackEntry]) -> [LanguageTag] {
        Set(packs.compactMap(\.languageTag)).sorted()
    }
}
