import DepotClient
import DepotCore
import DepotTestSupport
import Testing

/// The Info.plist keys of a release with localized packs against the planner: for random
/// releases, a device of every language the release has (and of one it has not) installs all
/// it takes within exactly those keys, and the language that needs the most fills each one.
@Suite("Localized packs: allowances and plans")
struct LanguagePlanTests {

    static let pool = ["en", "en-GB", "fr", "fr-CA", "ja", "de", "zh-Hans", "zh-Hant", "pt-BR", "es-419"]

    static func entry(_ id: String, _ policy: PackEntry.Policy, _ size: Int64, _ language: String?, revision: Int = 1) -> PackEntry {
        PackEntry(id: id, revision: revision, url: "https://cdn.example.com/\(id)", size: size, sha256: String(repeating: "a", count: 63) + "\(revision % 10)",
                  installSize: size * 2, plaintextSHA256: String(repeating: "b", count: 64), policy: policy, tags: [], keyID: "k",
                  contentType: "application/octet-stream", language: language)
    }

    static func release(_ random: inout SeededRandom) -> Manifest {
        var packs: [PackEntry] = []
        for index in 0..<Int.random(in: 0...3, using: &random) {
            packs.append(entry("base\(index)", [.essential, .prefetch, .onDemand].randomElement(using: &random)!, Int64.random(in: 1...5_000_000, using: &random), nil))
        }
        for group in 0..<Int.random(in: 1...3, using: &random) {
            let policy = [PackEntry.Policy.essential, .prefetch, .onDemand].randomElement(using: &random)!
            for language in pool.shuffled(using: &random).prefix(Int.random(in: 1...5, using: &random)) {
                packs.append(entry("group\(group)-\(language)", policy, Int64.random(in: 1...9_000_000, using: &random), language))
            }
        }
        let languages = LanguageSelection.languages(packs)
        // Usually one the release has; sometimes one it has not (its groups then give nothing to a stranger).
        let primary = Bool.random(using: &random) ? languages.randomElement(using: &random)!.description : pool.randomElement(using: &random)!
        return Manifest(app: "com.example.game", version: 1, publishedAt: .init(timeIntervalSince1970: 0), expiresAt: .init(timeIntervalSince1970: 1e10),
                        packs: packs, primaryLanguage: primary)
    }

    @Test("200 random releases: every language's device installs all it takes within the keys, and the keys are no larger than the neediest device's")
    func keysFitEveryLanguage() {
        var random = SeededRandom(seed: 27)
        for round in 0..<200 {
            let manifest = Self.release(&random)
            let manifestSize: Int64 = 4_321
            let keys = BackgroundAssetsKeys(manifest: manifest, manifestSize: manifestSize, manifestURL: "https://cdn.example.com/m")
            var most: [Int64] = [0, 0, 0, 0]
            for languages in LanguageSelection.languages(manifest.packs).map({ [$0.description] }) + [["xx"]] {
                var request = Planner.Request(kind: .install)
                (request.essentialAllowance, request.allowance) = (keys.essentialDownloadAllowance - manifestSize, keys.downloadAllowance)
                request.languages = languages
                let plan: Plan = Planner.plan(manifest: manifest, state: InstalledState(app: "a"), request: request)
                #expect(plan.deferred.isEmpty, "round \(round), \(languages): \(plan.deferred.map(\.entry.id)) deferred over \(plan.overAllowance)")
                // What the device installs from the release: every pack not localized, one of each group.
                let taken = plan.downloads.map(\.entry)
                let groups = taken.compactMap(\.languageGroup)
                #expect(Set(groups).count == groups.count, "round \(round): two languages of one group for \(languages)")
                let localized = manifest.packs.filter { $0.language != nil }.count
                let waiting = plan.notRequested.filter { manifest[pack: $0]?.language != nil }.count
                #expect(plan.otherLanguages.count + taken.filter { $0.language != nil }.count + waiting == localized)
                let essential: [PackEntry] = taken.filter { $0.policy == .essential }
                let prefetch: [PackEntry] = taken.filter { $0.policy == .prefetch }
                let sizes: [Int64] = [essential.map(\.size).reduce(0, +), prefetch.map(\.size).reduce(0, +)]
                let installs: [Int64] = [essential.map(\.installSize).reduce(0, +), prefetch.map(\.installSize).reduce(0, +)]
                let sums: [Int64] = sizes + installs
                #expect(sums[2] <= keys.essentialMaxInstallSize && sums[3] <= keys.maxInstallSize)
                most = zip(most, sums).map { max($0, $1) }
            }
            // Exactly the neediest device's figures: not a byte of allowance more than a device takes.
            let figures: [Int64] = [keys.essentialDownloadAllowance - manifestSize, keys.downloadAllowance, keys.essentialMaxInstallSize, keys.maxInstallSize]
            #expect(figures == most, "round \(round): \(manifest.packs.map { "\($0.id) \($0.policy) \($0.size)" })")
            if manifest.packs.contains(where: { $0.language != nil }) { #expect(keys.sizedBy.count == 4) }
        }
    }

    @Test("A language change: the new language's pack is planned, the old one replaced once it is in; nothing else")
    func languageChange() {
        let manifest = Manifest(app: "a", version: 2, publishedAt: .init(timeIntervalSince1970: 0), expiresAt: .init(timeIntervalSince1970: 1e10), packs: [
            Self.entry("core", .essential, 10, nil), Self.entry("voice-en", .prefetch, 20, "en"), Self.entry("voice-fr", .prefetch, 30, "fr"),
            Self.entry("voice-ja", .essential, 40, "ja"),
        ], primaryLanguage: "en")
        var state = InstalledState(app: "a")
        for id in ["core", "voice-fr"] { state.packs[id] = InstalledState.Pack(manifest[pack: id]!, installedAt: .init(timeIntervalSince1970: 0), unpacked: false) }
        var request = Planner.Request(kind: .languageChange)
        request.languages = ["ja-JP"]
        let plan = Planner.plan(manifest: manifest, state: state, request: request)
        // Essential only on install and update: a language change schedules it as non-essential.
        #expect(plan.downloads.map(\.entry.id) == ["voice-ja"] && plan.downloads.allSatisfy { !$0.essential })
        #expect(plan.languageReplacements == ["voice-fr": "voice-ja"] && plan.removals.isEmpty)
        #expect(plan.unchanged == ["core"] && plan.otherLanguages == ["voice-en"])
        // A group left with nothing for the device (a stranger, no primary language's pack): removed.
        let bare = Manifest(app: "a", version: 3, publishedAt: .init(timeIntervalSince1970: 0), expiresAt: .init(timeIntervalSince1970: 1e10),
                            packs: [Self.entry("core", .essential, 10, nil), Self.entry("voice-fr", .prefetch, 30, "fr")], primaryLanguage: "en")
        request.languages = ["de"]
        #expect(Planner.plan(manifest: bare, state: state, request: request).removals == ["voice-fr"])
    }
}
