import DepotCore
import Testing

@Suite("Language tags and the best match")
struct LanguageTagTests {
    @Test("Apple's form only: an ISO 639 code, optionally a script and a region; normalised", arguments: [
        ("en", "en"), ("FR_ca", "fr-CA"), ("zh-hant", "zh-Hant"), ("zh-Hans-VN", "zh-Hans-VN"), ("es-419", "es-419"), ("yue", "yue"),
        ("sr-latn-rs", "sr-Latn-RS"),
    ])
    func normalises(_ given: String, _ expected: String) {
        #expect(LanguageTag(given)?.description == expected)
    }

    @Test("Refused: variants, extensions, private use, empty parts, too short or long, digits", arguments: [
        "", "e", "engl", "en-US-POSIX", "de-DE-1996", "en-x-pirate", "en--US", "en-", "-en", "12", "en-1", "en-Latn-US-u-ca-gregory", "fr CA",
    ])
    func refuses(_ given: String) {
        #expect(LanguageTag(given) == nil)
    }

    struct Row: Sendable, CustomStringConvertible {
        var preferred: [String]
        var available: [String]
        var primary: String?
        var expected: String?
        var description: String { "\(preferred) of \(available) (primary \(primary ?? "none")) → \(expected ?? "none")" }
    }

    @Test("The best match: exact, then the same language and script (the variant without a region first), then the same language; then the next preferred language; then the primary language", arguments: [
        Row(preferred: ["fr-CA", "en"], available: ["en", "fr", "fr-CA", "ja"], primary: "en", expected: "fr-CA"),
        Row(preferred: ["fr-BE"], available: ["en", "fr", "fr-CA", "ja"], primary: "en", expected: "fr"),
        Row(preferred: ["fr-BE"], available: ["en", "fr-CA"], primary: "en", expected: "fr-CA"),
        Row(preferred: ["de"], available: ["en", "fr", "fr-CA", "ja"], primary: "en", expected: "en"),
        Row(preferred: ["de", "ja"], available: ["en", "fr", "ja"], primary: "en", expected: "ja"),
        Row(preferred: ["de"], available: ["fr", "ja"], primary: "en", expected: nil),
        Row(preferred: ["de"], available: ["en-GB", "fr"], primary: "en", expected: "en-GB"),
        Row(preferred: [], available: ["en", "fr"], primary: "fr", expected: "fr"),
        // Chinese: the region implies the script.
        Row(preferred: ["zh-TW"], available: ["zh-Hans", "zh-Hant"], primary: "en", expected: "zh-Hant"),
        Row(preferred: ["zh-HK"], available: ["zh-Hans", "zh-Hant-TW"], primary: "en", expected: "zh-Hant-TW"),
        Row(preferred: ["zh-CN"], available: ["zh-Hant", "zh-Hans"], primary: "en", expected: "zh-Hans"),
        Row(preferred: ["zh-Hant-TW"], available: ["zh-TW", "zh-Hant"], primary: "en", expected: "zh-TW"),
        // Another script only when nothing in the same one is there.
        Row(preferred: ["sr-Latn"], available: ["sr", "en"], primary: "en", expected: "sr"),
        Row(preferred: ["pt-PT"], available: ["pt-BR", "es"], primary: "es", expected: "pt-BR"),
    ])
    func bestMatch(_ row: Row) {
        let chosen = LanguageTag.choose(
            preferred: LanguageTag.list(row.preferred), primary: row.primary.flatMap(LanguageTag.init), from: row.available.compactMap(LanguageTag.init)
        )
        #expect(chosen?.description == row.expected, "\(row)")
    }

    @Test("Groups: the id without its language; a device takes one pack of each group, packs that are not localized always")
    func groups() {
        func pack(_ id: String, _ language: String?) -> PackEntry {
            PackEntry(id: id, revision: 1, url: "https://x/\(id)", size: 1, sha256: String(repeating: "0", count: 64), installSize: 1,
                      plaintextSHA256: String(repeating: "0", count: 64), policy: .prefetch, tags: [], keyID: "k", contentType: "x", language: language)
        }
        let packs = [
            pack("core", nil), pack("voice-en", "en"), pack("voice-fr-ca", "fr-CA"), pack("subtitles-de", "de"), pack("subtitles-en", "en"),
            pack("intro-movie-ja", "ja"),
        ]
        #expect(packs.map(\.languageGroup) == [nil, "voice", "voice", "subtitles", "subtitles", "intro-movie"])
        let german = LanguageSelection.packs(packs, preferred: LanguageTag.list(["de-AT"]), primary: LanguageTag("en"))
        #expect(german.map(\.id) == ["core", "voice-en", "subtitles-de"])
        let quebec = LanguageSelection.packs(packs, preferred: LanguageTag.list(["fr-CA"]), primary: LanguageTag("en"))
        #expect(quebec.map(\.id) == ["core", "voice-fr-ca", "subtitles-en"])
        // A group with neither the device's language nor the primary one: nothing of it.
        #expect(!LanguageSelection.selected(packs, preferred: LanguageTag.list(["fr"]), primary: LanguageTag("en")).contains("intro-movie-ja"))
        #expect(PackEntry.group(of: "voice", language: LanguageTag("en")!) == nil)
        #expect(PackEntry.group(of: "-en", language: LanguageTag("en")!) == nil)
    }
}
