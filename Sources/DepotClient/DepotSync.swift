import DepotCore
import Foundation

/// What a sync did.
public struct SyncReport: Hashable, Sendable {
    /// The manifest version the destination now follows.
    public var manifestVersion: Int
    /// The server answered `304 Not Modified`: the manifest accepted before still holds.
    public var notModified: Bool
    /// Packs downloaded and installed.
    public var installed: [String]
    /// Packs removed because the manifest no longer lists them.
    public var removed: [String]
    /// Packs already current.
    public var unchanged: [String]
    /// Packs left for a later sync: over the allowance, or on-demand packs nobody asked for.
    public var deferred: [String]
    /// Essential downloads that failed and were tried again as non-essential.
    public var rescheduled: [String]
    /// Packs that could not be installed, with the reason; their previous revision (if any) stays.
    public var failed: [String: String]
    /// Container bytes downloaded in this sync.
    public var bytesDownloaded: Int64

    /// A one-line summary.
    public var summary: String {
        var parts = ["\(installed.count) installed", "\(removed.count) removed", "\(unchanged.count) unchanged"]
        if !deferred.isEmpty { parts.append("\(deferred.count) deferred") }
        if !failed.isEmpty { parts.append("\(failed.count) failed") }
        return "release \(manifestVersion)\(notModified ? " (not modified)" : ""): " + parts.joined(separator: ", ") + ", \(bytesDownloaded) bytes downloaded"
    }
}

/// What a sync reports while it runs.
public enum SyncEvent: Sendable {
    /// The plan, once the manifest is accepted.
    case planned(Plan)
    /// A download's progress.
    case download(DownloadEvent)
    /// A pack is installed (or failed to).
    case installed(String)
    case failed(String, String)
    case removed(String)
}

/// The Info.plist allowances and domain list a shipped build carries, which the Background
/// Assets simulator enforces (see ``DepotSync/rules``).
public struct BackgroundAssetsRules: Hashable, Sendable {
    /// `BADownloadDomainAllowList`: hosts the manifest and packs may come from.
    public var allowedDomains: [String]
    /// `BADownloadAllowance`: bytes that may be downloaded before first launch (manifest included).
    public var downloadAllowance: Int64?
    /// `BAEssentialDownloadAllowance`: essential bytes before first launch (manifest included).
    public var essentialDownloadAllowance: Int64?

    public init(allowedDomains: [String], downloadAllowance: Int64?, essentialDownloadAllowance: Int64?) {
        self.allowedDomains = allowedDomains
        self.downloadAllowance = downloadAllowance
        self.essentialDownloadAllowance = essentialDownloadAllowance
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

/// One sync of an app's packs into a destination folder: fetch and verify the manifest, plan,
/// download, verify, decrypt, install, record — the whole client pipeline, as `depot sync` and
/// the tests run it.
public struct DepotSync: Sendable {
    /// The origin (or edge) base URL.
    public var server: URL
    /// What the app was given: trusted manifest keys and the pack key ring.
    public var configuration: ClientConfiguration
    /// The destination folder.
    public var destination: String
    /// Why the sync runs; essential downloads only on install and update.
    public var kind: RequestKind = .foreground
    /// The channel followed.
    public var channel: String = ManifestSource.production
    /// Another manifest URL than the channel's on `server` (a CDN path, for instance).
    public var manifestURL: URL?
    /// On-demand packs asked for, by id and by tag.
    public var requestedPacks: Set<String> = []
    public var requestedTags: Set<String> = []
    /// Sent with every request: download credentials.
    public var headers: [String: String] = [:]
    /// Downloads at once.
    public var concurrency = 4
    /// Retries per download.
    public var retries = 5
    /// How long to wait for another sync of the same folder to finish.
    public var lockTimeout: TimeInterval = 600
    /// The Background Assets simulator: when set, the build's Info.plist rules apply (allowed
    /// domains always; the initial allowances on `install`, that is before first launch).
    public var rules: BackgroundAssetsRules?
    /// Progress, as it happens.
    public var observer: (@Sendable (SyncEvent) -> Void)?

    public init(server: URL, configuration: ClientConfiguration, destination: String) {
        self.server = server
        self.configuration = configuration
        self.destination = destination
    }

    /// Syncs, and throws the first pack failure after installing what it could.
    public func run(now: Date = Date()) async throws -> SyncReport {
        let report = try await sync(now: now)
        if let (id, reason) = report.failed.sorted(by: { $0.key < $1.key }).first {
            throw ClientError(.integrity, reason.hasPrefix("pack \(id)") ? reason : "pack \(id): \(reason)")
        }
        return report
    }

    /// Syncs; pack failures are in the report (each leaves that pack's previous revision),
    /// while a refused manifest or an unusable folder throws.
    public func sync(now: Date = Date()) async throws -> SyncReport {
        let store = try StateStore(destination: destination)
        let syncLock = try await BlockingCall.run { [lockTimeout] in try store.syncLock(timeout: lockTimeout) }
        defer { try? syncLock.close() }
        let app = configuration.app
        let source = {
            var source = ManifestSource(
                url: manifestURL ?? ManifestSource.url(server: server, app: app, channel: channel), app: app, channel: channel,
                trustedKeys: (try? configuration.trustedKeys()) ?? []
            )
            source.headers = headers
            return source
        }()
        if let rules, !rules.allows(source.url) {
            throw ClientError.manifest("\(source.url.host ?? "?") is not in the Info.plist's BADownloadDomainAllowList \(rules.allowedDomains)")
        }

        // The manifest: new bytes, or (304) the ones accepted before; verified either way, with one "now".
        let before = try store.read(app: app)
        let cached = store.cachedEnvelope(channel: channel)
        let knownETag = FileSystem.exists(cached) ? before.manifestETags[channel] : nil
        let fetched = try await source.fetch(ifNoneMatch: knownETag)
        let envelope: [UInt8]
        let etag: String?
        var notModified = false
        switch fetched {
        case .envelope(let bytes, let tag):
            (envelope, etag) = (bytes, tag)
        case .notModified:
            (envelope, etag) = (try FileSystem.readFile(cached, limit: ManifestSource.sizeLimit), knownETag)
            notModified = true
        }
        let manifest = try source.verify(envelope, floor: before.floor(channel: channel), now: now)
        // The floor is durable before anything else happens, so it survives a crash.
        let state = try store.withExclusiveControl(app: app) { state -> InstalledState in
            guard manifest.version >= state.floor(channel: channel) else { return state }
            state.raiseFloor(channel: channel, to: manifest.version)
            state.manifestETags[channel] = etag
            return state
        }
        guard manifest.version >= state.floor(channel: channel) else {
            throw ClientError.rollback(offered: manifest.version, floor: state.floor(channel: channel))
        }
        if !notModified { try FileSystem.writeAtomically(envelope, to: cached) }

        // The plan; before first launch the build's initial allowances bound it.
        var request = Planner.Request(kind: kind, packs: requestedPacks, tags: requestedTags)
        if let rules, kind == .install {
            request.allowance = rules.downloadAllowance.map { $0 - Int64(envelope.count) }
            request.essentialAllowance = rules.essentialDownloadAllowance.map { $0 - Int64(envelope.count) }
        }
        let plan = Planner.plan(manifest: manifest, state: state, request: request) { FileSystem.exists(store.packPath($0)) }
        observer?(.planned(plan))

        var report = SyncReport(
            manifestVersion: manifest.version, notModified: notModified, installed: [], removed: [], unchanged: plan.unchanged,
            deferred: (plan.deferred.map(\.entry.id) + plan.notRequested).sorted(), rescheduled: [], failed: [:], bytesDownloaded: 0
        )
        var queue = plan.downloads
        if let rules {
            queue.removeAll { download in
                guard let url = URL(string: download.entry.url), rules.allows(url) else {
                    report.failed[download.entry.id] = "pack \(download.entry.id) refused: \(download.entry.url) is not on an allowed domain"
                    return true
                }
                return false
            }
        }
        // Essential downloads that fail go round once more as non-essential ones.
        var round = 0
        while !queue.isEmpty && round < 2 {
            let outcomes = await downloadAndInstall(queue, store: store, now: now)
            var again: [PlannedDownload] = []
            for (download, outcome) in zip(queue, outcomes) {
                let id = download.entry.id
                switch outcome {
                case .success(let bytes):
                    report.installed.append(id)
                    report.bytesDownloaded += bytes
                    report.failed[id] = nil
                case .failure(let error):
                    report.failed[id] = error.description
                    if download.essential && round == 0 && error.kind != .cancelled {
                        again.append(download.removingEssential())
                        report.rescheduled.append(id)
                    }
                }
            }
            queue = again
            round += 1
        }
        report.installed.sort()

        // Packs gone from the manifest go once everything else succeeded.
        if report.failed.isEmpty {
            for id in plan.removals {
                try store.withExclusiveControl(app: app) { state in
                    Installer.removeTree(store.packPath(id))
                    state.packs[id] = nil
                }
                report.removed.append(id)
                observer?(.removed(id))
            }
            // Partial downloads no plan needs any more.
            let needed = Set(plan.deferred.map(\.entry.sha256))
            for name in FileSystem.contents(of: store.downloads) where !needed.contains(String(name.prefix(64))) {
                FileSystem.remove(store.downloads + "/" + name)
            }
        }
        return report
    }

    /// Downloads (concurrently) and installs each pack as soon as it is complete.
    private func downloadAndInstall(_ downloads: [PlannedDownload], store: StateStore, now: Date) async -> [Result<Int64, ClientError>] {
        let downloader = Downloader(concurrency: concurrency, retries: retries, headers: headers)
        let installer: Installer
        do {
            installer = Installer(keyRing: try configuration.keyRing())
        } catch {
            return downloads.map { _ in .failure(ClientError.install("keys", error)) }
        }
        let observer = observer
        let app = configuration.app
        let (events, continuation) = AsyncStream.makeStream(of: DownloadEvent.self)
        let forwarding = Task { for await event in events { observer?(.download(event)) } }
        defer {
            continuation.finish()
        }
        let results = await withTaskGroup(of: (Int, Result<Int64, ClientError>).self) { group in
            var results = [Result<Int64, ClientError>](repeating: .failure(.cancelled), count: downloads.count)
            var next = 0
            func startNext() {
                guard next < downloads.count else { return }
                let index = next
                next += 1
                let entry = downloads[index].entry
                group.addTask {
                    guard let url = URL(string: entry.url), url.scheme == "http" || url.scheme == "https" else {
                        return (index, .failure(ClientError.manifest("pack \(entry.id) has an invalid URL")))
                    }
                    let item = DownloadItem(id: entry.id, url: url, size: entry.size, sha256: entry.sha256, path: store.downloads + "/" + entry.sha256)
                    switch await downloader.download(item, events: continuation) {
                    case .failure(let error):
                        observer?(.failed(entry.id, error.description))
                        return (index, .failure(error))
                    case .success:
                        do {
                            try await BlockingCall.run {
                                let unpacked = try installer.install(entry, from: item.path, to: store.packPath(entry.id))
                                try store.withExclusiveControl(app: app) { state in
                                    state.packs[entry.id] = InstalledState.Pack(
                                        revision: entry.revision, sha256: entry.sha256, plaintextSHA256: entry.plaintextSHA256,
                                        installSize: entry.installSize, installedAt: now, unpacked: unpacked
                                    )
                                }
                            }
                            FileSystem.remove(item.path)
                            FileSystem.remove(item.path + ".etag")
                            observer?(.installed(entry.id))
                            return (index, .success(entry.size))
                        } catch {
                            // A container that fails its checks is not worth resuming.
                            FileSystem.remove(item.path)
                            FileSystem.remove(item.path + ".etag")
                            let failure = error as? ClientError ?? ClientError.install(entry.id, error)
                            observer?(.failed(entry.id, failure.description))
                            return (index, .failure(failure))
                        }
                    }
                }
            }
            for _ in 0..<max(1, concurrency) { startNext() }
            while let (index, result) = await group.next() {
                results[index] = result
                startNext()
            }
            return results
        }
        continuation.finish()
        await forwarding.value
        return results
    }
}
