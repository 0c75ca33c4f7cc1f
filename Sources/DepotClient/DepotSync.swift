import DepotCore
import Foundation

/// One sync of an app's packs into a destination folder: fetch and verify the manifest, plan,
/// download, verify, decrypt, install, record — the whole client pipeline, as `depot sync` and
/// the tests run it.
///
/// For command-line hosts (Linux, macOS), not an iOS app: it downloads itself and holds the
/// folder's sync lock for the whole run, and iOS terminates a suspended app that holds a file
/// lock in a shared container. An iOS app lets the system download and uses ``ExtensionFlow``.
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
    /// The languages whose localized packs are taken, most preferred first (the app's primary
    /// language's when none of them matches).
    public var languages: [String] = Locale.preferredLanguages
    /// Sent with every request: download credentials.
    public var headers: [String: String] = [:]
    /// What https trusts and where names connect.
    public var transport = TransportOptions()
    /// Downloads at once.
    public var concurrency = 4
    /// Retries per download.
    public var retries = 5
    /// Seconds without progress before a request (the manifest, a download) fails; a failed
    /// download is retried.
    public var timeout: TimeInterval = 30
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
        // The state and the disk made to agree first (a switch a killed run began settled or
        // dropped, records of copies that are gone or are others dropped), then what killed syncs
        // and installs left (staged trees, copies moved aside, scratch files), by owners that are gone.
        let app = configuration.app
        // (A lock not had in time, or a copy that cannot be moved aside, leaves it to the next run.)
        (try? store.reconcile(app: app))?.forEach(Installer.removeTree)
        for folder in [store.packs, store.downloads, store.metadata] { Installer.removeLeftovers(in: folder) }
        var source = try ManifestSource(
            url: manifestURL ?? ManifestSource.url(server: server, app: app, channel: channel), channel: channel, configuration: configuration,
            transport: HTTPTransport(timeout: timeout, options: transport)
        )
        source.headers = headers
        if let refusal = rules?.refusal(for: source.url) { throw ClientError.manifest(refusal) }

        // The manifest: new bytes, or (304) the ones accepted before; verified either way, with one "now".
        let before = try store.read(app: app)
        let cached = store.cachedEnvelope(channel: channel)
        let knownETag = FileSystem.exists(cached) ? before.manifestETags[channel].flatMap { HTTPResponseParser.isStrongETag($0) ? $0 : nil } : nil
        var envelope: [UInt8] = []
        var etag: String?
        var notModified = false
        var accepted: ManifestSource.Accepted
        var asked = knownETag
        while true {
            switch try await source.fetch(ifNoneMatch: asked) {
            case .envelope(let bytes, let tag):
                (envelope, etag, notModified) = (bytes, tag, false)
            case .notModified:
                (envelope, etag, notModified) = ((try? FileSystem.readFile(cached, limit: ManifestSource.sizeLimit)) ?? [], asked, true)
            }
            do {
                accepted = try source.verify(envelope, state: before, now: now)
                break
            } catch where notModified && asked != nil {
                // The copy kept is not the one its ETag was recorded with (a crash of an older
                // version between the two, a purge, a hand edit): the manifest is fetched whole.
                asked = nil
            }
        }
        // With a rollout, the device's own choice (below, once the state is recorded: on a
        // protected channel it holds the newest candidate this device chose before).
        let installID = accepted.manifest.rollout == nil ? nil : try store.installID(app: app)
        // A managed app's packs are Apple Archives for the system to fetch: no key to decrypt them with.
        if let archive = accepted.manifest.allEntries.first(where: { $0.keyID.isEmpty }) {
            throw ClientError.manifest("pack \(archive.id) is an Apple Archive of a managed app: the system downloads it from the download manifest (depot sync --managed simulates a device)")
        }
        // The floor is durable before anything else happens, so it survives a crash; the envelope
        // is kept before the state that names its ETag (a state naming an ETag whose envelope is
        // not on disk would get 304 and the older copy for ever), under the lock, so that another
        // process cannot put an older copy between them.
        let state = try store.withExclusiveControl(app: app) { state -> InstalledState in
            guard state.refusal(accepted, channel: channel) == nil else { return state }
            if !notModified { try FileSystem.writeAtomically(envelope, to: cached) }
            state.record(accepted, channel: channel, installID: installID)
            state.manifestETags[channel] = etag
            return state
        }
        // Another process may have accepted a newer one meanwhile.
        if let refusal = state.refusal(accepted, channel: channel) { throw refusal }
        var manifest = accepted.manifest
        manifest.resolve(installID: { installID ?? "" }, candidateFloor: state.candidateFloor(channel: channel))

        // The plan; before first launch the build's initial allowances bound it.
        var request = Planner.Request(kind: kind, packs: requestedPacks, tags: requestedTags)
        request.languages = languages
        if let rules, kind == .install {
            (request.essentialAllowance, request.allowance) = rules.initialBudgets(manifestSize: Int64(envelope.count))
        }
        let plan = Planner.plan(manifest: manifest, state: state, request: request, installedCopyIsWhole: store.isWhole)
        observer?(.planned(plan))

        var report = SyncReport(
            manifestVersion: manifest.version, notModified: notModified, installed: [], removed: [], unchanged: plan.unchanged,
            deferred: (plan.deferred.map(\.entry.id) + plan.notRequested).sorted(), rescheduled: [], failed: [:], bytesDownloaded: 0
        )
        for download in plan.deferred {
            let allowance = download.essential ? "BAEssentialDownloadAllowance" : "BADownloadAllowance"
            report.waiting[download.entry.id] = "over the \(allowance) left before first launch by \(plan.overAllowance[download.entry.id] ?? 0) bytes"
        }
        for id in plan.notRequested { report.waiting[id] = "on demand: not asked for (--pack, --tag)" }
        var queue = plan.downloads
        if let rules {
            queue.removeAll { download in
                guard let url = URL(string: download.entry.url) else {
                    report.failed[download.entry.id] = "pack \(download.entry.id) refused: its URL \(download.entry.url) is not valid"
                    return true
                }
                guard let refusal = rules.refusal(for: url) else { return false }
                report.failed[download.entry.id] = "pack \(download.entry.id) refused: \(refusal)"
                return true
            }
        }
        // What a report of this step says per pack (``SyncReport/deviceReport``).
        var results: [String: DeviceReport.PackResult] = [:]
        for download in plan.deferred {
            results[download.entry.id] = DeviceReport.PackResult(id: download.entry.id, revision: download.entry.revision, outcome: .deferred)
        }
        for id in report.failed.keys where results[id] == nil {
            if let entry = manifest[pack: id] { results[id] = DeviceReport.PackResult(id: id, revision: entry.revision, outcome: .failed, error: "manifest") }
        }
        // Essential downloads that fail go round once more as non-essential ones.
        var round = 0
        while !queue.isEmpty && round < 2 {
            let patching = PatchOutcomes()
            let (outcomes, transferred) = await downloadAndInstall(queue, store: store, now: now, patching: patching)
            report.bytesDownloaded += transferred
            patching.record(into: &report)
            var again: [PlannedDownload] = []
            for (download, outcome) in zip(queue, outcomes) {
                let id = download.entry.id
                switch outcome {
                case .success(let transferred):
                    report.installed.append(id)
                    report.failed[id] = nil
                    results[id] = DeviceReport.PackResult(id: id, revision: download.entry.revision, outcome: .installed, bytes: transferred)
                case .failure(let error):
                    report.failed[id] = error.description
                    // A full disk or a cancelled step is the device's condition, not the pack's.
                    results[id] = DeviceReport.isDeviceCondition("\(error.kind)") ? nil
                        : DeviceReport.PackResult(id: id, revision: download.entry.revision, outcome: .failed, error: DeviceReport.errorKind("\(error.kind)"))
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
        for id in report.patched where results[id]?.outcome == .installed { results[id]?.outcome = .patched }
        if !results.isEmpty {
            report.deviceReport = DeviceReport(
                channel: channel, release: manifest.version, packs: Array(results.values.prefix(DeviceReport.maximumPacks)),
                packKeys: configuration.reportedPackKeys, manifestKeys: configuration.reportedManifestKeys
            )
        }

        try replaceLanguages(plan, manifest: manifest, store: store, report: &report)

        // Packs gone from the manifest go once everything else succeeded.
        if report.failed.isEmpty {
            for id in plan.removals {
                // The record goes first, then the copy is renamed aside, under the lock; deleted
                // after it (a full disk: the save fails and both stay).
                try store.removePacks(app: app) { _ in [id] }.aside.forEach(Installer.removeTree)
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

    /// Downloads (concurrently) and installs each pack as soon as it is complete; returns each
    /// outcome and the bytes transferred (a download refused afterwards was transferred all the same).
    private func downloadAndInstall(
        _ downloads: [PlannedDownload], store: StateStore, now: Date, patching: PatchOutcomes
    ) async -> (outcomes: [Result<Int64, ClientError>], transferred: Int64) {
        let downloader = Downloader(concurrency: concurrency, retries: retries, timeout: timeout, headers: headers, options: transport)
        let installer: Installer
        do {
            installer = Installer(keyRing: try configuration.keyRing())
        } catch {
            return (downloads.map { _ in .failure(ClientError.install("keys", error)) }, 0)
        }
        let observer = observer
        let (events, continuation) = AsyncStream.makeStream(of: DownloadEvent.self)
        // Bytes on disk per download, from its events: each attempt starts at its offset.
        let forwarding = Task { () -> Int64 in
            var position: [String: Int64] = [:]
            var transferred: Int64 = 0
            for await event in events {
                switch event {
                case .started(let id, let offset, _): position[id] = offset
                case .progress(let id, let received, _):
                    transferred += max(0, received - (position[id] ?? 0))
                    position[id] = received
                default: break
                }
                observer?(.download(event))
            }
            return transferred
        }
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
                let patch = downloads[index].patch
                group.addTask {
                    // A patch first; if anything about it fails, the whole pack in the same sync.
                    if let patch {
                        switch await patchAndInstall(entry, patch: patch, downloader: downloader, installer: installer, store: store, now: now, events: continuation) {
                        case .success:
                            patching.patched(entry, patch)
                            observer?(.installed(entry.id))
                            return (index, .success(patch.size))
                        case .failure(let error):
                            if error.kind == .cancelled { return (index, .failure(error)) }
                            patching.fellBack(entry.id, error.description)
                        }
                    }
                    guard let url = URL(string: entry.url), url.scheme == "http" || url.scheme == "https" else {
                        return (index, .failure(ClientError.manifest("pack \(entry.id) has an invalid URL")))
                    }
                    let item = DownloadItem(id: entry.id, url: url, size: entry.size, sha256: entry.sha256, path: store.downloads + "/" + entry.sha256)
                    let outcome = await downloadAndInstall(item, entry: entry, downloader: downloader, installer: installer, store: store, now: now, events: continuation)
                    switch outcome {
                    case .success:
                        FileSystem.remove(item.path)
                        FileSystem.remove(item.path + ".etag")
                        observer?(.installed(entry.id))
                    case .failure(let error):
                        observer?(.failed(entry.id, error.description))
                    }
                    return (index, outcome)
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
        return (results, await forwarding.value)
    }
}
