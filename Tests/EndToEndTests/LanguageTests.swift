import BackgroundAssets
import DepotClient
import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Localized packs (iOS 27): a pack per language, one language of each group per device.
@Suite("End to end: localized packs")
struct LanguageTests {
    /// `voice-en`, `voice-fr`, `voice-fr-CA`, `voice-ja` (prefetch, localized) and `core`
    /// (essential, not localized), released one by one on an app whose primary language is en.
    static let voices: [(id: String, language: String, bytes: [UInt8])] = [
        ("voice-en", "en", bytes(200_000, seed: 11)), ("voice-fr", "fr", bytes(260_000, seed: 12)),
        ("voice-fr-CA", "fr-CA", bytes(240_000, seed: 13)), ("voice-ja", "ja", bytes(310_000, seed: 14)),
    ]
    static let core = bytes(150_000, seed: 10)

    static func publishRelease(_ origin: TestOrigin) throws {
        // No primary language yet: a localized pack cannot be released (devices that speak
        // none of the group's languages would get nothing), and nothing is published.
        let refused = try RawHTTP.send(port: origin.port, "PUT /v1/apps/\(origin.app)/packs/voice-en?release=true&language=en HTTP/1.1\r\nHost: x\r\n"
            + "Authorization: Bearer \(origin.token)\r\nContent-Length: 3\r\nConnection: close\r\n\r\n", body: [1, 2, 3]).first
        #expect(refused?.status == 409 && refused?.bodyText.contains("primary_language_required") == true, "\(refused?.bodyText ?? "")")
        // A language Apple does not take, and an id that does not end with its language.
        for (pack, language, expected) in [("voice-en", "en-US-POSIX", "ISO 639"), ("voice", "en", "ends with -en"), ("voice-e", "e", "ISO 639")] {
            let bad = try RawHTTP.send(port: origin.port, "PUT /v1/apps/\(origin.app)/packs/\(pack)?language=\(language) HTTP/1.1\r\nHost: x\r\n"
                + "Authorization: Bearer \(origin.token)\r\nContent-Length: 3\r\nConnection: close\r\n\r\n", body: [1, 2, 3]).first
            #expect(bad?.status == 400 && bad?.bodyText.contains(expected) == true, "\(pack) \(language): \(bad?.bodyText ?? "")")
        }
        try AppStore(folder: DataFolder(origin.data.path)).setPrimaryLanguage(origin.app, "en")
        try put(origin, "core", core, policy: "essential")
        for voice in voices {
            // Given in another case and separator: stored normalised.
            let given = voice.language == "fr-CA" ? "fr_ca" : voice.language
            try put(origin, voice.id, voice.bytes, query: "&language=\(given)")
        }
        // A second French pack of the group (ids differ in case): a device could take only one.
        let twice = try RawHTTP.send(port: origin.port, "PUT /v1/apps/\(origin.app)/packs/voice-FR?release=true&language=fr HTTP/1.1\r\nHost: x\r\n"
            + "Authorization: Bearer \(origin.token)\r\nContent-Length: 3\r\nConnection: close\r\n\r\n", body: [1, 2, 3]).first
        #expect(twice?.status == 409 && twice?.bodyText.contains("duplicate_language") == true, "\(twice?.bodyText ?? "")")
    }

    /// The blobs devices fetched from the origin, by SHA-256, counted from its access log.
    static func blobGets(_ log: CapturedLog, app: String) -> [String: Int] {
        var counts: [String: Int] = [:]
        for line in log.all where line.hasPrefix("access") && line.contains("method=GET") && line.contains("status=20") {
            guard let path = line.split(separator: " ").first(where: { $0.hasPrefix("path=/v1/apps/\(app)/blobs/") }) else { continue }
            counts[String(path.split(separator: "/").last ?? ""), default: 0] += 1
        }
        return counts
    }

    @Test("A device takes core and its language's voice (fr-CA, en → fr-CA; fr-BE → fr; de → the primary en); a change to ja installs voice-ja, then removes voice-fr-CA; the origin serves no other pack")
    func devicesByLanguage() async throws {
        let log = CapturedLog()
        try await withServer(configure: { $0.logger = log.logger() }) { origin in
            let work = TemporaryDirectory("depot-languages")
            defer { work.remove() }
            try Self.publishRelease(origin)
            let configuration = try origin.clientConfiguration()
            let live = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
            let manifest = try Envelope.decode(live.body).verifiedManifest(trusting: configuration.trustedKeys())
            #expect(manifest.primaryLanguage == "en")
            #expect(manifest.packs.map { "\($0.id):\($0.language ?? "-")" } == ["core:-", "voice-en:en", "voice-fr:fr", "voice-fr-CA:fr-CA", "voice-ja:ja"])
            let sha = Dictionary(uniqueKeysWithValues: manifest.packs.map { ($0.id, $0.sha256) })

            // Each device installs under the release's own Info.plist keys (before first launch,
            // the system holds downloads to them): every language's must fit.
            let plist = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/info-plist HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
            var rules = try BackgroundAssetsRules.parse(plist: plist.body)
            rules.requiresHTTPS = false
            func device(_ name: String, _ languages: [String], kind: RequestKind = .install) async throws -> SyncReport {
                var sync = DepotSync(server: origin.baseURL, configuration: configuration, destination: work.path + "/" + name)
                sync.kind = kind
                sync.languages = languages
                sync.rules = rules
                return try await sync.run()
            }
            func installed(_ name: String) -> [String] { FileSystem.contents(of: work.path + "/\(name)/packs").filter { !$0.hasPrefix(".") }.sorted() }
            var expected: [String: Int] = [:]
            func expectServed(_ packs: [String]) {
                for pack in packs { expected[sha[pack]!, default: 0] += 1 }
                Eventually.wait { Self.blobGets(log, app: origin.app).values.reduce(0, +) >= expected.values.reduce(0, +) }
                #expect(Self.blobGets(log, app: origin.app) == expected, "the origin served other packs than \(packs)")
            }

            let canadian = try await device("canadian", ["fr-CA", "en"])
            #expect(canadian.installed == ["core", "voice-fr-CA"] && canadian.otherLanguages == ["voice-en", "voice-fr", "voice-ja"])
            #expect(installed("canadian") == ["core", "voice-fr-CA"])
            #expect(try FileSystem.readFile(work.path + "/canadian/packs/voice-fr-CA") == Self.voices[2].bytes)
            expectServed(["core", "voice-fr-CA"])

            #expect(try await device("belgian", ["fr-BE"]).installed == ["core", "voice-fr"])
            expectServed(["core", "voice-fr"])
            #expect(try await device("german", ["de-DE"]).installed == ["core", "voice-en"])
            expectServed(["core", "voice-en"])

            // The person switches the app to Japanese: voice-ja comes in, then voice-fr-CA goes.
            try FileSystem.writeAtomically(configuration.encoded(), to: work.path + "/client.json")
            let change = try Processes.run(Processes.depotBinary, [
                "sync", "--server", origin.baseURL.absoluteString, "--app", origin.app, "--config", work.path + "/client.json",
                "--dest", work.path + "/canadian", "--event", "language-change", "--languages", "ja", "--allow-http", "--quiet",
            ])
            #expect(change.status == 0, "\(change.stdout)\(change.stderr)")
            #expect(change.stdout.contains("1 installed, 1 removed, 1 unchanged"), "\(change.stdout)")
            #expect(installed("canadian") == ["core", "voice-ja"])
            #expect(try FileSystem.readFile(work.path + "/canadian/packs/voice-ja") == Self.voices[3].bytes)
            expectServed(["voice-ja"])

            let releases = try Processes.run(Processes.depotBinary, ["releases", "--server", origin.baseURL.absoluteString, "--app", origin.app])
            #expect(releases.stdout.contains("voice: localized in en, fr, fr-CA, ja (primary language en)"), "\(releases.stdout)")

            // A periodic check later: nothing moves.
            let again = try await device("canadian", ["ja"], kind: .periodic)
            #expect(again.installed.isEmpty && again.removed.isEmpty && again.unchanged == ["core", "voice-ja"])
            expectServed([])
        }
    }

    @Test("The guide's extension on a language change: schedules only the new language's pack; the install step removes the old one once the new one is in")
    func extensionLanguageChange() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-language-extension")
            defer { work.remove() }
            try Self.publishRelease(origin)
            let guide = GuideExtension(Assets: GuideAssets(configuration: try origin.clientConfiguration(), root: work.path + "/group"))
            let live = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
            let manifestFile = work.path + "/manifest.json"
            try FileSystem.writeAtomically(live.body, to: manifestFile)
            let manifestURL = URL(fileURLWithPath: manifestFile)
            func deliver(_ downloads: Set<BAURLDownload>) throws {
                for download in downloads {
                    let pack = String(download.identifier.split(separator: "@")[0])
                    let file = work.path + "/delivered-" + pack
                    try FileSystem.writeAtomically(try #require(try RawHTTP.send(port: origin.port, "GET \(download.request.url!.path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first).body, to: file)
                    try guide.backgroundDownload(download, finishedWithFileURL: URL(fileURLWithPath: file))
                }
            }
            // Installed in Canadian French.
            let first = try guide.downloads(manifestURL: manifestURL, kind: guide.kind(for: .install), extensionInfo: BAAppExtensionInfo(), languages: ["fr-CA", "en"])
            #expect(Set(first.map(\.identifier)) == ["core@1", "voice-fr-CA@1"])
            try deliver(first)
            let flow = try guide.Assets.flow()
            #expect(try flow.installArrived(languages: ["fr-CA", "en"]).installed == ["core", "voice-fr-CA"])

            // Any request the iOS 26 SDK does not name (the iOS 27 SDK's .languageChange) is one.
            #expect(guide.kind(for: BAContentRequest(rawValue: 4)) == .languageChange)
            let change = try guide.downloads(manifestURL: manifestURL, kind: .languageChange, extensionInfo: BAAppExtensionInfo(), languages: ["ja"])
            #expect(change.map(\.identifier) == ["voice-ja@1"] && change.allSatisfy { !$0.isEssential })
            // Until voice-ja is in, voice-fr-CA stays (the app keeps a voice).
            #expect(try flow.installArrived(languages: ["ja"]).removed.isEmpty)
            #expect(FileSystem.exists(work.path + "/group/packs/voice-fr-CA"))
            try deliver(change)
            let report = try flow.installArrived(languages: ["ja"])
            #expect(report.installed == ["voice-ja"] && report.removed == ["voice-fr-CA"])
            #expect(!FileSystem.exists(work.path + "/group/packs/voice-fr-CA"))
            #expect(try FileSystem.readFile(work.path + "/group/packs/voice-ja") == Self.voices[3].bytes)
            #expect(try flow.store.read(app: origin.app).packs.keys.sorted() == ["core", "voice-ja"])
        }
    }

    @Test("The Info.plist keys count core plus the neediest language's voice and say which; the allowance guard refuses a language that outgrows them and takes one that does not")
    func allowancesPerLanguage() async throws {
        try await withServer { origin in
            try Self.publishRelease(origin)
            let configuration = try origin.clientConfiguration()
            let live = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
            let manifest = try Envelope.decode(live.body).verifiedManifest(trusting: configuration.trustedKeys())
            func plist() throws -> (xml: String, rules: BackgroundAssetsRules, root: [String: Any]) {
                let response = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/info-plist HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
                let root = try #require(try PropertyListSerialization.propertyList(from: Data(response.body), format: nil) as? [String: Any])
                return (response.bodyText, try BackgroundAssetsRules.parse(plist: response.body), root)
            }
            let keys = try plist()
            let initial = try #require(keys.root["BAInitialDownloadRestrictions"] as? [String: Any])
            // Prefetch: the largest voice (ja), not the four together.
            let ja = try #require(manifest[pack: "voice-ja"])
            #expect(initial["BADownloadAllowance"] as? Int == Int(ja.size))
            #expect(keys.root["BAMaxInstallSize"] as? Int == Int(ja.installSize))
            #expect(initial["BAEssentialDownloadAllowance"] as? Int == Int(live.body.count) + Int(try #require(manifest[pack: "core"]).size))
            #expect(keys.xml.contains("BADownloadAllowance: ja") && keys.xml.contains("BAMaxInstallSize: ja"), "\(keys.xml)")

            // Shipped builds carry these keys. A Korean voice larger than the Japanese one no
            // longer fits a Korean device: refused, nothing published.
            let store = AppStore(folder: DataFolder(origin.data.path))
            // (The essential allowance with room for the manifest, which grows with every pack.)
            try store.setAllowances(origin.app, BuildAllowances(
                essentialDownloadAllowance: (initial["BAEssentialDownloadAllowance"] as? Int).map { Int64($0) + 4096 },
                downloadAllowance: Int64(ja.size), essentialMaxInstallSize: nil, maxInstallSize: ja.installSize
            ))
            let korean = try RawHTTP.send(port: origin.port, "PUT /v1/apps/\(origin.app)/packs/voice-ko?release=true&language=ko HTTP/1.1\r\nHost: x\r\n"
                + "Authorization: Bearer \(origin.token)\r\nContent-Length: 400000\r\nConnection: close\r\n\r\n", body: bytes(400_000, seed: 15), timeout: RawHTTP.changeWait).first
            #expect(korean?.status == 409 && korean?.bodyText.contains("allowance_exceeded") == true, "\(korean?.bodyText ?? "")")
            // A German voice smaller than the Japanese one: the keys do not change, so it goes out.
            try put(origin, "voice-de", bytes(100_000, seed: 16), query: "&language=de")
            let after = try plist()
            #expect((after.root["BAInitialDownloadRestrictions"] as? [String: Any])?["BADownloadAllowance"] as? Int == Int(ja.size))
            #expect(after.rules.initialBudgets(manifestSize: 0).nonEssential == ja.size)
        }
    }

    @Test("Managed (iOS 26+): the download manifest carries each pack's language and the primary one; the simulated device takes only its language's, and on a change the new one, then drops the old")
    func managedLanguages() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-managed-languages")
            defer { work.remove() }
            let app = "com.example.managed"
            let folder = DataFolder(origin.data.path)
            try AppStore(folder: folder).create(app, mode: .managed, appGroup: "group.com.example.managed")
            try AppStore(folder: folder).setPrimaryLanguage(app, "en")
            let token = try TokenStore(folder: folder).create(app: app, role: .publisher).token
            var archives: [String: [UInt8]] = [:]
            for (id, language, seed) in [("core", nil, 1), ("voice-en", "en", 2), ("voice-fr", "fr", 3), ("voice-fr-CA", "fr-CA", 4), ("voice-ja", "ja", 5)] as [(String, String?, UInt8)] {
                let archive = ArchiveFixture.uncompressed([(path: "\(id).bin", bytes: bytes(20_000 + Int(seed) * 1000, seed: seed))])
                archives[id] = archive
                let file = work.path + "/\(id).aar"
                try FileSystem.writeAtomically(archive, to: file)
                // Through the command line, as a content team publishes.
                let run = try Processes.run(Processes.depotBinary, [
                    "publish", file, "--pack", id, "--policy", language == nil ? "essential" : "prefetch", "--release", "--quiet",
                    "--server", origin.baseURL.absoluteString, "--app", app,
                ] + (language.map { ["--language", $0] } ?? []), environment: ["DEPOT_TOKEN": token, "XDG_CACHE_HOME": work.path + "/cache"])
                #expect(run.status == 0, "\(run.stderr)")
            }
            let response = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(app)/download-manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
            let download = try DownloadManifest.decode(response.body)
            #expect(download.assetPacks.map { "\($0.id):\($0.language ?? "-"):\($0.primaryLanguage ?? "-")" }
                    == ["core:-:-", "voice-en:en:en", "voice-fr:fr:en", "voice-fr-CA:fr-CA:en", "voice-ja:ja:en"])
            #expect(response.bodyText.contains(#""language":"fr-CA""#))

            let device = work.path + "/device"
            func sync(_ event: String, _ languages: String) throws -> String {
                let run = try Processes.run(Processes.depotBinary, [
                    "sync", "--managed", "--event", event, "--languages", languages, "--dest", device, "--allow-http", "--quiet",
                    "--server", origin.baseURL.absoluteString, "--app", app,
                ])
                #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
                return run.stdout
            }
            let install = try sync("install", "fr-CA,en")
            #expect(install.contains("downloaded core version 1") && install.contains("downloaded voice-fr-CA version 1") && install.contains("2 packs held"), "\(install)")
            #expect(!install.contains("voice-en") && !install.contains("voice-fr ") && !install.contains("voice-ja"), "\(install)")
            #expect(try FileSystem.readFile(device + "/packs/voice-fr-CA.aar") == archives["voice-fr-CA"])
            let change = try sync("language-change", "ja")
            #expect(change.contains("downloaded voice-ja version 1") && change.contains("deleted voice-fr-CA: the device's language takes voice-ja"), "\(change)")
            #expect(FileSystem.contents(of: device + "/packs").sorted() == ["core.aar", "voice-ja.aar"])
        }
    }

    @Test("A localized pack gets patches like any pack: a new revision of voice-fr-CA reaches a Canadian device as a patch, and its language stays")
    func patchesForALanguage() async throws {
        try await withServer(configure: { $0.patchDepth = 3 }) { origin in
            let work = TemporaryDirectory("depot-language-patch")
            defer { work.remove() }
            try Self.publishRelease(origin)
            var sync = DepotSync(server: origin.baseURL, configuration: try origin.clientConfiguration(), destination: work.path + "/device")
            sync.languages = ["fr-CA"]
            #expect(try await sync.run().installed == ["core", "voice-fr-CA"])
            var changed = Self.voices[2].bytes
            for index in stride(from: 1000, to: 5000, by: 7) { changed[index] ^= 0x5A }
            try put(origin, "voice-fr-CA", changed, query: "&language=fr-CA")
            origin.server.waitForPatches()
            let report = try await sync.run()
            #expect(report.patched == ["voice-fr-CA"] && report.installed == ["voice-fr-CA"] && report.bytesDownloaded < Int64(changed.count / 5), "\(report)")
            #expect(try FileSystem.readFile(work.path + "/device/packs/voice-fr-CA") == changed)
            let live = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
            let entry = try #require(try Envelope.decode(live.body).verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())[pack: "voice-fr-CA"])
            #expect(entry.language == "fr-CA" && entry.patches?.isEmpty == false)
        }
    }
}
