import Foundation

/// The download manifest of a managed app (iOS 26+): what Apple's `AssetPackManager` reads from
/// `BAManifestURL` when the app lets the system manage its asset packs and hosts them itself, in
/// the shape `ba-package download-manifest` writes. The origin derives it from a signed release;
/// it is not signed (the system fetches it over https from an allowed domain). See <doc:ManagedPacks>.
public struct DownloadManifest: Codable, Hashable, Sendable {
    /// The `userInfo` key under which the origin puts the archive's SHA-256 (lower-case hex).
    public static let sha256Key = "AssetDepotSHA256"
    /// The `userInfo` key under which the origin puts the app's primary language, on each
    /// localized pack (the fallback a device applies; Apple's own comes from App Store Connect).
    public static let primaryLanguageKey = "AssetDepotPrimaryLanguage"

    public var assetPacks: [AssetPack]

    /// One asset pack: an Apple Archive at an immutable URL.
    public struct AssetPack: Codable, Hashable, Sendable {
        public var id: String
        /// The archive's absolute https URL.
        public var url: String
        /// Rises exactly when the archive's bytes change; the system downloads a pack again only then.
        public var version: Int
        /// The archive's size in bytes, exact: the system fails a download of any other size.
        public var downloadSize: Int64
        public var downloadPolicy: DownloadPolicy
        public var host: Host
        /// The publisher's, plus ``DownloadManifest/sha256Key`` (and, on a localized pack,
        /// ``DownloadManifest/primaryLanguageKey``).
        public var userInfo: [String: JSONValue]
        /// iOS 27+: the language the pack is localized for, a BCP-47 identifier of language,
        /// script and region only (`fr-CA`) — the `language` key of `ba-package template`'s
        /// entries, which the system reads as `AssetPack.language`; absent: not localized.
        public var language: String?

        /// The archive's SHA-256, from `userInfo`.
        public var sha256: String? {
            if case .string(let value) = userInfo[DownloadManifest.sha256Key] { return value }
            return nil
        }

        /// The app's primary language, from `userInfo`.
        public var primaryLanguage: String? {
            if case .string(let value) = userInfo[DownloadManifest.primaryLanguageKey] { return value }
            return nil
        }
    }

    /// `{"thirdParty":{}}`: the developer hosts the pack (not Apple).
    public struct Host: Codable, Hashable, Sendable {
        public struct ThirdParty: Codable, Hashable, Sendable { public init() {} }
        public var thirdParty: ThirdParty?
        public init() { thirdParty = ThirdParty() }
    }

    /// When the system downloads a pack: `{"essential":{"installationEventTypes":[…]}}`,
    /// the same with `prefetch`, or `{"onDemand":{}}` — as in `ba-package`'s pack manifest.
    public struct DownloadPolicy: Codable, Hashable, Sendable {
        public var policy: PackEntry.Policy
        /// `firstInstallation`, `subsequentUpdate`; empty for on-demand packs.
        public var installationEventTypes: [String]

        public init(policy: PackEntry.Policy, installationEventTypes: [String]) {
            self.policy = policy
            self.installationEventTypes = policy == .onDemand ? [] : installationEventTypes
        }

        struct Events: Codable, Hashable { var installationEventTypes: [String]? }
        struct Key: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: Key.self)
            guard container.allKeys.count == 1, let key = container.allKeys.first, let policy = PackEntry.Policy(rawValue: key.stringValue) else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "downloadPolicy has one key: essential, prefetch or onDemand"))
            }
            let events = try container.decode(Events.self, forKey: key).installationEventTypes ?? []
            self.init(policy: policy, installationEventTypes: events)
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Key.self)
            try container.encode(Events(installationEventTypes: policy == .onDemand ? nil : installationEventTypes), forKey: Key(stringValue: policy.rawValue))
        }

        /// The events a pack manifest gives when it names none: both.
        public static let allEvents = ["firstInstallation", "subsequentUpdate"]
    }

    public init(assetPacks: [AssetPack]) { self.assetPacks = assetPacks }

    /// The download manifest of a managed app's release: every pack, by id.
    public init(release manifest: Manifest) {
        assetPacks = manifest.packs.map { pack in
            var info = pack.userInfo ?? [:]
            info[Self.sha256Key] = .string(pack.sha256)
            if pack.language != nil, let primary = manifest.primaryLanguage { info[Self.primaryLanguageKey] = .string(primary) }
            return AssetPack(
                id: pack.id, url: pack.url, version: pack.revision, downloadSize: pack.size,
                downloadPolicy: DownloadPolicy(policy: pack.policy, installationEventTypes: pack.installationEventTypes ?? DownloadPolicy.allEvents),
                host: Host(), userInfo: info, language: pack.language
            )
        }
    }

    /// Canonical JSON: sorted keys, no escaped slashes.
    public func encoded() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array(try! encoder.encode(self))
    }

    public static func decode(_ bytes: [UInt8]) throws -> DownloadManifest {
        try JSONDecoder().decode(DownloadManifest.self, from: Data(bytes))
    }
}
