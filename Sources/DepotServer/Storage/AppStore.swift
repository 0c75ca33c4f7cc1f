import DepotCore
import Foundation

/// An app's settings, `apps/<app>/app.json`.
public struct AppSettings: Codable, Sendable, Hashable {
    /// The app id.
    public var id: String
    /// When it was created.
    public var createdAt: Date
    /// HTTP Basic credentials required to read the app's manifest, releases and blobs; nil: open.
    public var downloadCredentials: DownloadCredentials?
    /// The Info.plist allowances baked into the app's shipped builds; releases must fit them.
    public var allowances: BuildAllowances?
    /// How the app's devices get their packs; nil: ``AppMode/unmanaged`` (apps made before modes).
    public var mode: AppMode?
    /// Managed apps: the app group the app and its downloader extension share (`BAAppGroupID`).
    public var appGroup: String?
    /// The app's primary language (a normalised language tag): the localized packs a device
    /// takes when none of its languages is offered. Required once a release has localized packs.
    public var primaryLanguage: String?
    /// App Attest: the App ID and environment the app's keys are attested for (`depot attest
    /// configure`); nil: the attestation routes answer 404 `attestation_not_configured`.
    public var attestation: AttestationSettings?

    /// Whether the system manages the app's packs (Apple Archives and a download manifest).
    public var isManaged: Bool { mode == .managed }
}

/// How an app's devices get their packs.
public enum AppMode: String, Codable, Sendable, CaseIterable {
    /// The app's Background Assets extension (or DepotClient) fetches the signed manifest and
    /// downloads, verifies and decrypts the packs: encrypted at rest, any content.
    case unmanaged
    /// iOS 26+: the system's `AssetPackManager` reads the download manifest and downloads and
    /// unpacks the Apple Archives `ba-package` built; stored as uploaded.
    case managed
}

/// The Background Assets allowances of shipped builds (the smallest across builds still in use).
/// A release whose keys exceed any recorded one is refused unless forced. Nil fields are not checked.
public struct BuildAllowances: Codable, Sendable, Hashable {
    public var essentialDownloadAllowance: Int64?
    public var downloadAllowance: Int64?
    public var essentialMaxInstallSize: Int64?
    public var maxInstallSize: Int64?

    public init(essentialDownloadAllowance: Int64? = nil, downloadAllowance: Int64? = nil, essentialMaxInstallSize: Int64? = nil, maxInstallSize: Int64? = nil) {
        self.essentialDownloadAllowance = essentialDownloadAllowance
        self.downloadAllowance = downloadAllowance
        self.essentialMaxInstallSize = essentialMaxInstallSize
        self.maxInstallSize = maxInstallSize
    }

    /// What `keys` exceeds, one sentence per key with the numbers; empty when it fits.
    public func excesses(_ keys: BackgroundAssetsKeys) -> [String] {
        let checks: [(String, Int64?, Int64, String)] = [
            ("BAEssentialDownloadAllowance", essentialDownloadAllowance, keys.essentialDownloadAllowance, "downloaded"),
            ("BADownloadAllowance", downloadAllowance, keys.downloadAllowance, "downloaded"),
            ("BAEssentialMaxInstallSize", essentialMaxInstallSize, keys.essentialMaxInstallSize, "installed"),
            ("BAMaxInstallSize", maxInstallSize, keys.maxInstallSize, "installed"),
        ]
        return checks.compactMap { name, limit, value, kind in
            guard let limit, value > limit else { return nil }
            return "\(name): the release needs \(value) \(kind) bytes, the shipped builds allow \(limit), \(value - limit) over"
        }
    }
}

/// A username and the SHA-256 of a random password (high-entropy, so a fast hash suffices).
public struct DownloadCredentials: Codable, Sendable, Hashable {
    public var username: String
    public var passwordSHA256: String

    /// Whether an `Authorization: Basic …` value carries these credentials (constant-time on the password).
    func accepts(_ header: String?) -> Bool {
        guard let header else { return false }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "basic", let data = Data(base64Encoded: String(parts[1]).trimmingCharacters(in: .whitespaces)),
              let text = String(data: data, encoding: .utf8), let colon = text.firstIndex(of: ":") else { return false }
        let presented = SHA256Hasher.hash(Array(text[text.index(after: colon)...].utf8))
        guard let stored = Hex.decode(passwordSHA256), stored.count == 32 else { return false }
        var difference: UInt8 = text[..<colon] == username ? 0 : 1
        for i in 0..<32 { difference |= stored[i] ^ presented[i] }
        return difference == 0
    }
}

/// Creates and lists apps, and owns their pack master keys and the manifest signing key.
public struct AppStore: Sendable {
    let folder: DataFolder

    public init(folder: DataFolder) { self.folder = folder }

    /// Creates an app with a fresh pack master key; fails if it exists. A managed app names the
    /// app group its app and downloader extension share.
    @discardableResult
    public func create(_ id: String, mode: AppMode = .unmanaged, appGroup: String? = nil, primaryLanguage: String? = nil) throws -> AppSettings {
        guard Identifier.isValidApp(id) else { throw DepotError.invalidID("app id") }
        let primaryLanguage = try primaryLanguage.map(Self.normalisedLanguage)
        if mode == .managed {
            guard let appGroup, Self.isValidAppGroup(appGroup) else {
                throw DepotError.badRequest("a managed app needs its app group: --app-group group.<reverse-DNS name>")
            }
        } else if appGroup != nil {
            throw DepotError.badRequest("an app group is for managed apps (--mode managed)")
        }
        try folder.makeFolders()
        try FileSystem.createDirectory(folder.releases(id))
        _ = try signingKeys()
        // Under the settings' lock: two creates of one app cannot both pass the check, and the
        // pack key is written once, before the settings that make the app exist.
        return try LockedFile.update(AppSettings.self, at: folder.appSettings(id)) { settings in
            guard settings == nil else { throw DepotError.conflict("exists", "app \(id) already exists") }
            try LockedFile.update(PackKeys.self, at: folder.packKeys(id), mode: 0o600) { keys in
                guard keys == nil else { return }
                let keyID = KeyRing.newKeyID()
                keys = PackKeys(format: PackKeys.format, current: keyID, keys: [keyID: Data(SecureRandom.bytes(32)).base64EncodedString()])
            }
            let created = AppSettings(
                id: id, createdAt: WallClock.now(), downloadCredentials: nil, allowances: nil, mode: mode == .managed ? .managed : nil, appGroup: appGroup,
                primaryLanguage: primaryLanguage
            )
            settings = created
            return created
        }
    }

    /// An app group identifier: `group.` and 1–200 of `A-Z a-z 0-9 . -`.
    static func isValidAppGroup(_ group: String) -> Bool {
        group.hasPrefix("group.") && group.utf8.count > 6 && group.utf8.count <= 206
            && group.utf8.allSatisfy { $0 == 0x2E || $0 == 0x2D || ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) }
    }

    /// The app's settings, or nil if there is no such app.
    public func settings(_ id: String) -> AppSettings? {
        guard Identifier.isValidApp(id) else { return nil }
        return try? StoredJSON.read(AppSettings.self, from: folder.appSettings(id))
    }

    /// Turns HTTP Basic download credentials on (returning the new password, shown once) or off.
    @discardableResult
    public func setDownloadCredentials(_ id: String, enabled: Bool) throws -> (username: String, password: String)? {
        try changeSettings(id) { settings in
            guard enabled else {
                settings.downloadCredentials = nil
                return nil
            }
            let password = Hex.encode(SecureRandom.bytes(16))
            settings.downloadCredentials = DownloadCredentials(username: id, passwordSHA256: Hex.encode(SHA256Hasher.hash(Array(password.utf8))))
            return (id, password)
        }
    }

    /// Sets the app's primary language (normalised); nil forgets it.
    public func setPrimaryLanguage(_ id: String, _ language: String?) throws {
        let tag = try language.map(Self.normalisedLanguage)
        try changeSettings(id) { $0.primaryLanguage = tag }
    }

    static func normalisedLanguage(_ language: String) throws -> String {
        guard let tag = LanguageTag(language) else {
            throw DepotError.badRequest("the primary language must be an ISO 639 code with, optionally, a script and a region (en, pt-BR)")
        }
        return tag.description
    }

    /// Sets (or, with nil, turns off) the app's App Attest settings.
    /// Settings an older `depot` would drop raise the folder to format 3 first.
    public func setAttestation(_ id: String, _ attestation: AttestationSettings?) throws {
        guard FileSystem.exists(folder.appSettings(id)) else { throw DepotError.notFound("app \(id)") }
        if attestation != nil { try folder.raiseFormat(to: 3) }
        try changeSettings(id) { $0.attestation = attestation }
    }

    /// Records (or, with nil, clears) the allowances of the app's shipped builds.
    public func setAllowances(_ id: String, _ allowances: BuildAllowances?) throws {
        try changeSettings(id) { $0.allowances = allowances }
    }

    /// Changes the app's settings under their lock (another command's change made meanwhile is kept).
    private func changeSettings<Result>(_ id: String, _ change: (inout AppSettings) throws -> Result) throws -> Result {
        guard Identifier.isValidApp(id), FileSystem.isDirectory(folder.app(id)) else { throw DepotError.notFound("app \(id)") }
        return try LockedFile.update(AppSettings.self, at: folder.appSettings(id)) { stored in
            guard var settings = stored else { throw DepotError.notFound("app \(id)") }
            let result = try change(&settings)
            stored = settings
            return result
        }
    }

    /// Every app id.
    public func list() -> [String] {
        FileSystem.contents(of: folder.apps).filter { FileSystem.exists(folder.appSettings($0)) }
    }
}

