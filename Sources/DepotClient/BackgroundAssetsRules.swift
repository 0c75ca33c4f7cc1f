import Foundation

/// The Info.plist allowances and domain list a shipped build carries, which the Background
/// Assets simulator enforces (see ``DepotSync/rules``).
public struct BackgroundAssetsRules: Hashable, Sendable {
    /// `BADownloadDomainAllowList`: hosts the manifest and packs may come from.
    public var allowedDomains: [String]
    /// `BADownloadAllowance`: non-essential bytes that may be downloaded before first launch.
    public var downloadAllowance: Int64?
    /// `BAEssentialDownloadAllowance`: essential bytes before first launch, manifest included.
    public var essentialDownloadAllowance: Int64?
    /// Refuse `http://` manifests and packs, as a device does (off only for a development run).
    public var requiresHTTPS = true

    public init(allowedDomains: [String], downloadAllowance: Int64?, essentialDownloadAllowance: Int64?) {
        self.allowedDomains = allowedDomains
        self.downloadAllowance = downloadAllowance
        self.essentialDownloadAllowance = essentialDownloadAllowance
    }

    /// The budgets of the downloads scheduled before first launch, as Apple documents the keys:
    /// essential downloads share `BAEssentialDownloadAllowance` with the manifest, which the
    /// system fetches first; non-essential ones have `BADownloadAllowance` to themselves.
    public func initialBudgets(manifestSize: Int64) -> (essential: Int64?, nonEssential: Int64?) {
        (essentialDownloadAllowance.map { $0 - manifestSize }, downloadAllowance)
    }

    /// Reads the keys from an Info.plist (XML or binary), such as `depot plist` prints.
    public static func parse(plist bytes: [UInt8]) throws -> BackgroundAssetsRules {
        guard let root = try? PropertyListSerialization.propertyList(from: Data(bytes), options: [], format: nil) as? [String: Any] else {
            throw ClientError.manifest("the Info.plist is not a property list dictionary")
        }
        let restrictions = root["BAInitialDownloadRestrictions"] as? [String: Any] ?? [:]
        func number(_ value: Any?) -> Int64? { (value as? NSNumber)?.int64Value ?? (value as? Int).map(Int64.init) }
        return BackgroundAssetsRules(
            allowedDomains: restrictions["BADownloadDomainAllowList"] as? [String] ?? [],
            downloadAllowance: number(restrictions["BADownloadAllowance"]),
            essentialDownloadAllowance: number(restrictions["BAEssentialDownloadAllowance"])
        )
    }

    /// Why a device would refuse to download `url`, or nil if it would not: not https (unless
    /// ``requiresHTTPS`` is off), or a host off the allow list.
    public func refusal(for url: URL) -> String? {
        if requiresHTTPS && url.scheme != "https" {
            return "\(url.absoluteString) is not https: Background Assets downloads only over https (--allow-http for a development run)"
        }
        guard allows(url) else { return "\(url.host ?? "?") is not in the Info.plist's BADownloadDomainAllowList \(allowedDomains)" }
        return nil
    }

    /// Whether a URL's host is on the allow list (an entry `*.example.com` also allows subdomains).
    public func allows(_ url: URL) -> Bool {
        guard let host = url.host?.lowercased() else { return false }
        return allowedDomains.contains { domain in
            let domain = domain.lowercased()
            if domain.hasPrefix("*.") { return host.hasSuffix(domain.dropFirst(1)) || host == domain.dropFirst(2) }
            return host == domain
        }
    }
}
