/// The Info.plist keys Background Assets needs, computed from a release. See <doc:InfoPlistKeys>.
public struct BackgroundAssetsKeys: Hashable, Sendable {
    /// `BAManifestURL`: where the extension fetches the signed manifest.
    public var manifestURL: String
    /// `BAInitialDownloadRestrictions.BADownloadDomainAllowList`: hosts of the manifest and pack URLs.
    public var domainAllowList: [String]
    /// `BAInitialDownloadRestrictions.BAEssentialDownloadAllowance`: manifest bytes + essential pack container bytes.
    public var essentialDownloadAllowance: Int64
    /// `BAInitialDownloadRestrictions.BADownloadAllowance`: prefetch pack container bytes (the
    /// initial non-essential downloads; the manifest counts in the essential allowance).
    public var downloadAllowance: Int64
    /// `BAEssentialMaxInstallSize`: installed bytes of the essential packs.
    public var essentialMaxInstallSize: Int64
    /// `BAMaxInstallSize`: installed bytes of the prefetch packs, "the non-essential assets that
    /// download immediately after app installation"; on-demand packs do not, so they do not count.
    public var maxInstallSize: Int64
    /// Managed apps (iOS 26+): `BAAppGroupID`, with `BAHasManagedAssetPacks` YES and
    /// `BAUsesAppleHosting` NO; `manifestURL` is then the download manifest's. Nil: unmanaged.
    public var appGroupID: String?
    /// With localized packs: for each of the four sized keys, the language whose device needs
    /// the most (`"none of them"`: a device that speaks none, which takes the primary language's
    /// packs). Empty when no pack is localized.
    public var sizedBy: [String: String] = [:]

    /// The four keys that are sizes, in the order ``sizedBy`` names them.
    public static let sizedKeys = ["BAEssentialDownloadAllowance", "BADownloadAllowance", "BAEssentialMaxInstallSize", "BAMaxInstallSize"]

    /// Computes the keys for `manifest`, whose signed envelope (or, for a managed app, download
    /// manifest) is `manifestSize` bytes at `manifestURL`.
    public init(manifest: Manifest, manifestSize: Int64, manifestURL: String, appGroupID: String? = nil) {
        self.manifestURL = manifestURL
        self.appGroupID = appGroupID
        // Localized packs: a device takes one language of each group, so each key counts the
        // packs that are not localized plus what the device of the language that needs the most
        // takes (Apple's rule for the App Store's figure). Tried: a device of each language the
        // release has, and one of none of them (the primary language's packs).
        // With a rollout, a device takes the candidate or not: both are tried, each key the larger.
        let choices = manifest.rollout == nil ? [manifest] : [manifest.choosing(candidate: false), manifest.choosing(candidate: true)]
        let languages = LanguageSelection.languages(choices.flatMap(\.packs))
        let devices: [(choice: Manifest, languages: [LanguageTag])] = choices.flatMap { choice in (languages.map { [$0] } + [[]]).map { (choice, $0) } }
        var sums: [Int64] = [0, 0, 0, 0]
        var sizedBy: [String: String] = [:]
        for (index, (choice, device)) in devices.enumerated() {
            let packs = LanguageSelection.packs(choice.packs, preferred: device, primary: manifest.primaryLanguageTag)
            let essential = packs.filter { $0.policy == .essential }
            let prefetch = packs.filter { $0.policy == .prefetch }
            let values = [
                essential.reduce(0) { $0 + $1.size }, prefetch.reduce(0) { $0 + $1.size },
                essential.reduce(0) { $0 + $1.installSize }, prefetch.reduce(0) { $0 + $1.installSize },
            ]
            for (key, (slot, value)) in zip(Self.sizedKeys, values.enumerated()) where value > sums[slot] || index == 0 {
                sums[slot] = value
                if !languages.isEmpty { sizedBy[key] = device.first?.description ?? "none of them" }
            }
        }
        essentialDownloadAllowance = manifestSize + sums[0]
        downloadAllowance = sums[1]
        essentialMaxInstallSize = sums[2]
        maxInstallSize = sums[3]
        self.sizedBy = sizedBy
        var hosts: [String] = []
        for url in [manifestURL] + manifest.allEntries.map(\.url) {
            if let host = Self.host(of: url), !hosts.contains(host) { hosts.append(host) }
        }
        domainAllowList = hosts
    }

    /// The host of an absolute URL, without port or user info.
    static func host(of url: String) -> String? {
        guard let schemeEnd = url.range(of: "://") else { return nil }
        var authority = url[schemeEnd.upperBound...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        if authority.hasPrefix("[") { return authority.firstIndex(of: "]").map { String(authority[...$0]) } }
        let host = authority.prefix { $0 != ":" }
        return host.isEmpty ? nil : host.lowercased()
    }

    /// A complete XML property list whose top-level dictionary holds the keys: merge its
    /// entries into the app's Info.plist (or the extension's, per Apple's documentation).
    public var xml: String {
        func escaped(_ text: String) -> String {
            text.replacingAll("&", "&amp;").replacingAll("<", "&lt;").replacingAll(">", "&gt;")
        }
        // Keys in sorted order, as Xcode writes them.
        let managedKeys = appGroupID.map { "\t<key>BAAppGroupID</key>\n\t<string>\(escaped($0))</string>\n" } ?? ""
        let appleHostingKey = appGroupID == nil ? "" : "\t<key>BAUsesAppleHosting</key>\n\t<false/>\n"
        let hasManaged = appGroupID == nil ? "" : "\t<key>BAHasManagedAssetPacks</key>\n\t<true/>\n"
        // With localized packs, which language sized each key (a comment: plist readers skip it).
        let languageNote = sizedBy.isEmpty ? "" : "\t<!-- Localized packs: each size counts the packs that are not localized plus what a device of the language that needs the most takes. "
            + Self.sizedKeys.map { "\($0): \(sizedBy[$0] ?? "")" }.joined(separator: "; ") + ". -->\n"
        return """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0">
            <dict>
            \(languageNote)\(managedKeys)\(hasManaged)\t<key>BAInitialDownloadRestrictions</key>
            \t<dict>
            \t\t<key>BADownloadAllowance</key>
            \t\t<integer>\(downloadAllowance)</integer>
            \t\t<key>BADownloadDomainAllowList</key>
            \t\t<array>
            \(domainAllowList.map { "\t\t\t<string>\(escaped($0))</string>" }.joined(separator: "\n"))
            \t\t</array>
            \t\t<key>BAEssentialDownloadAllowance</key>
            \t\t<integer>\(essentialDownloadAllowance)</integer>
            \t</dict>
            \t<key>BAEssentialMaxInstallSize</key>
            \t<integer>\(essentialMaxInstallSize)</integer>
            \t<key>BAManifestURL</key>
            \t<string>\(escaped(manifestURL))</string>
            \t<key>BAMaxInstallSize</key>
            \t<integer>\(maxInstallSize)</integer>
            \(appleHostingKey)</dict>
            </plist>

            """
    }
}

extension String {
    func replacingAll(_ target: String, _ replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}
