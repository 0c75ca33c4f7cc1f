import DepotCore
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A pack download for the system to schedule: what a `BAURLDownload` needs. The planner's
/// ``PlannedDownload`` itself, so that a plan of thousands of packs is handed over without a
/// copy (an extension's memory limit is tight; Apple publishes no figure).
public typealias ScheduledDownload = PlannedDownload

extension PlannedDownload {
    /// Essential (the app waits for it before first launch), or not: ``essential``.
    public var isEssential: Bool {
        get { essential }
        set { essential = newValue }
    }
    /// The pack's URL, or its patch's, as the manifest states it (https for Background Assets;
    /// the manifest's URLs are checked when it is decoded).
    public var url: URL { URL(string: patch?.url ?? entry.url)! }
    /// The exact size of what is downloaded: the system fails a download of any other size.
    public var fileSize: Int { Int(size) }
    /// The request to give `BAURLDownload`: ``url``, asking for the bytes as stored
    /// (`Accept-Encoding: identity`), since a CDN that compresses what a client accepts
    /// compressed would send another size than ``fileSize``.
    public var request: URLRequest {
        var request = URLRequest(url: url)
        request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        return request
    }

    public init(entry: PackEntry, isEssential: Bool, patch: PackPatch? = nil) {
        self.init(entry: entry, essential: isEssential, patch: patch)
    }
}

/// What the install step did: ``ExtensionFlow/installArrived(languages:now:)``.
public struct ArrivedReport: Sendable, Equatable {
    /// Packs installed, by id.
    public var installed: [String] = []
    /// Deliveries dropped, by identifier, with why (a revision the manifest no longer lists, a
    /// wrong size or hash, a missing key): the pack is planned again at the next event.
    public var discarded: [String: String] = [:]
    /// Deliveries kept for a later run (a full disk, an I/O error), by identifier, with why.
    public var kept: [String: String] = [:]
    /// Localized packs removed: the device's language changed and their group's pack for the
    /// new one is installed.
    public var removed: [String] = []
    /// What the app may send about this step (``DeviceReporter``, from the app, never the
    /// extension): each delivery installed, patched or failed, with its revision; nil when none
    /// was. It names no device.
    public var deviceReport: DeviceReport?
}

/// What a Background Assets extension and its app do with this module, in three calls:
///
/// - ``schedule(manifestFile:kind:allowance:essentialAllowance:scheduled:languages:now:)`` when the system
///   hands the extension the manifest;
/// - ``receive(identifier:file:)`` when it hands over a finished download: a rename into the
///   App Group folder, constant time and memory whatever the pack's size, because the system
///   deletes the file when the callback returns and bounds what an extension may do;
/// - ``installArrived(languages:now:)``, the heavy step (verify, decrypt, unzip, switch in), which the app
///   runs at launch or in the foreground (never the extension: its memory limit). Killed at any
///   point, the next run cleans up and ends with the old or the new revision, never a mix.
///
/// The system downloads; verifying, planning, decrypting and installing are done here. The
/// integration guide is built on exactly these calls, and a test runs them against the real
/// origin's output.
public struct ExtensionFlow: Sendable {
    public let configuration: ClientConfiguration
    public let store: StateStore
    /// The channel this build follows.
    public let channel: String

    /// `destination` is the folder in the App Group container that the app and the extension
    /// share, for the packs (under `Library/Caches`). `stateFolder`, another folder of that
    /// container outside `Library/Caches` (`Library/Application Support/…`), keeps the state —
    /// the channel's floor, the install id, the accepted manifest — through a purge of the packs;
    /// without it the state lives in `destination/.depot` and a purge resets the floor. A state
    /// kept there by a former build is moved over the first time.
    public init(configuration: ClientConfiguration, destination: String, stateFolder: String? = nil, channel: String = ManifestSource.production) throws {
        self.configuration = configuration
        store = try StateStore(destination: destination, stateFolder: stateFolder)
        self.channel = channel
    }

    private func source() throws -> ManifestSource {
        try ManifestSource(url: URL(fileURLWithPath: store.cachedEnvelope(channel: channel)), channel: channel, configuration: configuration)
    }

    /// The manifest the system fetched from `BAManifestURL` (a local file): verified, accepted
    /// under the exclusive lock (the channel's floor raised, its bytes kept for the install
    /// step), then planned. Pass the allowances the system reports (`BAAppExtensionInfo`), or
    /// none. What the system already has is not asked for again, nor are deliveries waiting for
    /// the install step: by default the downloads this flow handed the system and that have not
    /// arrived or failed since (noted, see ``noteCurrentDownloads(_:fetchedAt:)``; the
    /// extension's callback does not call `fetchCurrentDownloads()`, which may block); a caller that knows what
    /// the system has passes it as `scheduled`. `languages` (most preferred first) pick the
    /// localized packs: one of each group. A refused manifest throws and schedules nothing.
    /// With no `scheduled`, what it returns is noted as scheduled.
    public func schedule(
        manifestFile path: String, kind: RequestKind, allowance: Int? = nil, essentialAllowance: Int? = nil, scheduled: Set<String>? = nil,
        languages: [String] = Locale.preferredLanguages, now: Date = Date()
    ) throws -> [ScheduledDownload] {
        // The deliveries waiting are listed before the state is read: an install step running
        // meanwhile records a pack before it removes its delivery, so each pack is seen either
        // delivered or installed, never neither (found by the model-based test: the app's install
        // step racing the extension's scheduling made the pack be downloaded twice).
        // (Notes are ignored at an install event: nothing the system held before it counts.)
        let held = (scheduled ?? (kind == .install ? [] : notedScheduled(now: now))).union(arrivedIdentifiers())
        // The file is copied beside the kept one first (streamed: an extension's memory is
        // tight), and that copy is what is verified and, under the lock, renamed into place.
        let cached = store.cachedEnvelope(channel: channel)
        let copy = FileSystem.temporaryPath(besides: cached)
        defer { FileSystem.remove(copy) }
        do {
            try FileSystem.copyDurably(path, to: copy, limit: Int64(ManifestSource.sizeLimit))
        } catch {
            if error.errno == EFBIG { throw ClientError.manifest("the envelope is larger than \(ManifestSource.sizeLimit) bytes") }
            throw error.isNoSpace ? ClientError.noSpace(store.metadata) : ClientError.state("cannot read the manifest \(path): \(error)")
        }
        // Planned in a function of its own, so that the manifest is gone before the downloads
        // are listed (memory: about the manifest's size in all).
        let plan = try plan(copy: copy, cached: cached, kind: kind, allowance: allowance, essentialAllowance: essentialAllowance,
                            scheduled: held, languages: languages, now: now)
        // Noted only when the caller did not say what the system has (a caller that does keeps
        // its own account, and no note would ever be read back).
        if scheduled == nil { noteScheduled(plan.downloads.map(\.identifier), now: now) }
        return plan.downloads
    }

    private func plan(
        copy: String, cached: String, kind: RequestKind, allowance: Int?, essentialAllowance: Int?, scheduled: Set<String>, languages: [String], now: Date
    ) throws -> Plan {
        let source = try source()
        let accepted = try source.verify(file: copy, state: store.read(app: configuration.app), now: now)
        // With a rollout, this device's choice (the same in the install step: one install id; made
        // the first time under the lock by itself, so before the lock below).
        let installID = accepted.manifest.rollout == nil ? nil : try store.installID(app: configuration.app)
        let state: InstalledState
        var manifest: Manifest
        (manifest, state) = try store.withExclusiveControl(app: configuration.app) { state in
            // Another process may have accepted a newer one meanwhile: the floors are checked again.
            if let refusal = state.refusal(accepted, channel: channel) { throw refusal }
            state.record(accepted, channel: channel, installID: installID)
            try FileSystem.durableRename(copy, to: cached)
            return (accepted.manifest, state)
        }
        manifest.resolve(installID: { installID ?? "" }, candidateFloor: state.candidateFloor(channel: channel))
        var request = Planner.Request(
            kind: kind, allowance: allowance.map(Int64.init), essentialAllowance: essentialAllowance.map(Int64.init),
            scheduled: scheduled
        )
        request.languages = languages
        let plan = Planner.plan(manifest: manifest, state: state, request: request, installedCopyIsWhole: store.isWhole)
        Self.log(plan, kind: kind, manifest: manifest, channel: channel)
        return plan
    }

    /// The manifest this folder accepted last on its channel (kept by
    /// ``schedule(manifestFile:kind:allowance:essentialAllowance:scheduled:languages:now:)``),
    /// verified again as the extension verified it: signature, app, channel, expiry and a version
    /// not below the channel's floor. What the app plans with in the foreground.
    /// With a rollout, the entries this device takes (`Manifest.resolved(installID:candidateFloor:)`, with the newest candidate it chose before).
    /// The first time a rollout is met, the device's install id is made (a short write under the
    /// state's lock): call it off the main thread.
    public func acceptedManifest(now: Date = Date()) throws -> Manifest {
        let state = try store.read(app: configuration.app)
        var manifest = try source().verify(file: store.cachedEnvelope(channel: channel), state: state, now: now).manifest
        try manifest.resolve(installID: { try store.installID(app: configuration.app) }, candidateFloor: state.candidateFloor(channel: channel))
        return manifest
    }

    /// The install step: every delivery waiting in `.depot/arrived/` is checked against the
    /// accepted manifest (size, SHA-256), decrypted with the injected key ring, unpacked if a
    /// zip (entries written durably), switched in atomically and recorded as one step however the
    /// process is stopped (``InstalledState/Switch``); the lock is held only for the moments of
    /// each record. It starts by repairing what a killed run left: a switch it began settled or
    /// dropped, a record whose copy is gone or is another copy dropped (the pack is planned
    /// again), staged trees and scratch files removed. Memory stays bounded whatever the pack's
    /// size (one segment at a time). Then a localized pack of a language `languages` no longer
    /// pick goes, once its group's pick is installed.
    @discardableResult
    public func installArrived(languages: [String] = Locale.preferredLanguages, now: Date = Date()) throws -> ArrivedReport {
        // First the state and the disk made to agree (under the lock, before any leftover goes:
        // a dead switch is dropped before its staged copy is removed).
        do {
            try store.reconcile(app: configuration.app).forEach(Installer.removeTree)
        } catch let error as ClientError where error.kind == .cancelled {
            // The state's lock is suspended (the app's background time ran out): nothing is done,
            // every delivery waits for the next run.
            var report = ArrivedReport()
            for identifier in arrivedIdentifiers() { report.kept[identifier] = error.description }
            return report
        } catch {
            // The lock not had in time, a full disk: the repair waits for the next run; leftovers
            // still go (what may free the disk), and each delivery is kept or installs.
            DepotLog.notice("the state and the disk not reconciled, left for the next run: \(error)", category: "install")
        }
        Installer.removeLeftovers(in: store.packs)
        Installer.removeLeftovers(in: store.arrived)
        Installer.removeLeftovers(in: store.metadata)
        if store.stateIsApart { Installer.removeLeftovers(in: store.stateFolder) }
        Installer.removeLeftovers(in: failedDownloads)
        var report = ArrivedReport()
        let identifiers = arrivedIdentifiers().sorted()
        guard !identifiers.isEmpty || FileSystem.exists(store.cachedEnvelope(channel: channel)) else { return report }
        let manifest = try acceptedManifest(now: now)
        let installer = Installer(keyRing: try configuration.keyRing())
        // One result per pack (a whole pack and a patch of it may both have arrived), starting
        // with the downloads the system failed (``downloadFailed(identifier:error:)``).
        var results = takeFailedDownloads(manifest)
        // Stopped before the end (cancelled, or the state's lock suspended): what is left, the
        // removal of replaced languages included, waits for the next run.
        var stopped = false
        for identifier in identifiers {
            // Cancelled (the app's background time ran out): stop between packs; what is left
            // waits for the next run.
            // Cancelled: the step's task, or the thread it runs on (the guide's app runs it on one).
            if Task.isCancelled || Thread.current.isCancelled {
                stopped = true
                break
            }
            let path = store.arrived + "/" + identifier
            let (id, revision, base) = Self.parse(identifier)
            guard let entry = manifest[pack: id], entry.revision == revision else {
                report.discarded[identifier] = "the accepted manifest does not list this download (a newer revision replaced it)"
                FileSystem.remove(path)
                continue
            }
            // The patch's base gone (replaced, purged): the device's condition, not the pack's.
            var baseGone = false
            do {
                let installed = try store.read(app: configuration.app).packs[id]
                // Already in place (a step killed after its switch, before the delivery went; or
                // the app's and the extension's steps racing): the delivery has served.
                if let installed, installed.revision == entry.revision, installed.sha256 == entry.sha256, store.isWhole(id, installed) {
                    FileSystem.remove(path)
                    continue
                }
                let staged: StagedCopy
                if let base {
                    // A patch: onto the installed copy, if it is still the patch's base, whole.
                    guard let installed, installed.revision == base, let patch = entry.patch(from: base, plaintextSHA256: installed.plaintextSHA256) else {
                        baseGone = true
                        throw ClientError.integrity(id, "the installed copy is no longer the base of this patch")
                    }
                    do {
                        guard store.isWhole(id, installed) else {
                            baseGone = true
                            throw ClientError.integrity(id, "the installed copy, the patch's base, is no longer whole on disk (purged or changed)")
                        }
                        staged = try installer.stagePatch(entry, patch: patch, from: path, onto: store.packPath(id))
                    } catch let error as ClientError where error.kind == .integrity {
                        // The base changed on disk or the patch is bad: the next plan asks for the whole pack.
                        try store.withExclusiveControl(app: configuration.app) { state in
                            if state.packs[id]?.sha256 == installed.sha256 { state.packs[id]?.patchFailed = true }
                        }
                        throw error
                    }
                } else {
                    staged = try installer.stage(entry, from: path, besides: store.packPath(entry.id))
                }
                try store.switchIn(staged, as: entry, app: configuration.app, now: now)
                let delivered = base.flatMap { base in entry.patches?.first { $0.fromRevision == base } }?.size ?? entry.size
                FileSystem.remove(path)
                report.installed.append(entry.id)
                results[id] = DeviceReport.PackResult(id: id, revision: revision, outcome: base == nil ? .installed : .patched, bytes: delivered)
            } catch let error as ClientError where error.kind == .noSpace || error.kind == .state || error.kind == .cancelled
                        || error.kind == .install && FileSystem.exists(path) {
                // The delivery is fine; the device is not (yet), or the step's time ran out before
                // its record: try again at the next run.
                report.kept[identifier] = error.description
                if error.kind == .cancelled {
                    stopped = true
                    break
                }
            } catch let error as ClientError {
                report.discarded[identifier] = error.description
                FileSystem.remove(path)
                // A patch overtaken by the whole pack, or whose base went, is no failure of the pack.
                if results[id]?.outcome != .installed && !baseGone && !DeviceReport.isDeviceCondition("\(error.kind)") {
                    results[id] = DeviceReport.PackResult(id: id, revision: revision, outcome: .failed, error: DeviceReport.errorKind("\(error.kind)"))
                }
            }
        }
        if !results.isEmpty {
            report.deviceReport = DeviceReport(
                channel: channel, release: manifest.version, packs: Array(results.values.prefix(DeviceReport.maximumPacks)),
                packKeys: configuration.reportedPackKeys, manifestKeys: configuration.reportedManifestKeys
            )
        }
        if !stopped { report.removed = try removeReplacedLanguages(manifest: manifest, languages: languages) }
        Self.log(report)
        return report
    }
}
