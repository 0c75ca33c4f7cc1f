import DepotCore
import DepotHTTP
import Foundation
import Synchronization

/// The composition root: opens the data folder, builds the stores, the ``Publisher`` and the
/// handlers, and answers every request through the ``Router``.
final class Origin: HTTPHandler {
    let folder: DataFolder
    let releases: ReleaseStore
    let uploads: ResumableUploads
    /// Uploads whose pack was verified and recorded when a crash came (``ResumableUploads/repair()``).
    private let unfinishedUploads: [String]
    private let uploadExpiry: TimeInterval
    let publisher: Publisher
    let operations: OperationsHandlers
    let garbage: GarbageCollector
    let urls: PublicURL
    /// Releases in the bucket (with an object store): pushed by the writer, pulled by a replica.
    let mirror: ReleaseMirror?
    /// Patch downloads, made in the background after each release (the writer only).
    let patchMaker: PatchMaker?
    let readOnly: Bool
    /// Device reports, counted (written every second) and the rollouts they guard.
    let reports: ReportBook
    let rollouts: Rollouts
    /// Hot blobs' answers, made once.
    let answers: BlobResponses
    let reportWriter: ReportWriter
    /// App Attest keys the origin accepted (``AttestedKeys``).
    let attestedKeys: AttestedKeys
    let router: Router
    let metrics: OriginMetrics
    private let accessLog: AccessLog
    /// What start-up found and did, when the folder held a backup's record (``DataRestore``).
    let restored: DataRestore.Outcome?
    /// The data folder's lock, as a raw descriptor (-1 once released).
    private let folderLock: Mutex<Int32>

    init(configuration: OriginConfiguration) throws {
        folder = DataFolder(configuration.dataPath)
        folderLock = Mutex(try folder.lockExclusively().release())
        try DataRestore.unfinished(folder)
        try folder.prepare()
        // A backup copied back by hand (its backup.json is here): numbering continues above
        // every number issued before the restore. A replica publishes nothing.
        restored = configuration.readOnly ? nil : try DataRestore.adoptIfRestored(folder)
        if let restored { configuration.logger.notice("\(restored.description)", metadata: ["data": .string(folder.root)]) }
        // Every small file readable and writable by this user, or named in the log and on /healthz.
        StateHealth.shared.survey(folder)
        let apps = AppStore(folder: folder)
        // App Attest settings written by a 0.2.0 build before format 3 existed: raised now, so
        // that an older depot refuses the folder rather than drop them.
        if !configuration.readOnly, try folder.currentFormat() < 3, apps.list().contains(where: { apps.settings($0)?.attestation != nil }) {
            try folder.raiseFormat(to: 3)
        }
        let blobs: any BlobStore
        // With a bucket, blobs stream from it and no answer is kept.
        var limits = configuration.blobCache
        limits.serverThreads = configuration.http.threads
        let answers = BlobResponses(limits: limits, blobsFolder: configuration.objectStore == nil ? folder.blobs : nil)
        self.answers = answers
        readOnly = configuration.readOnly
        guard !readOnly || configuration.objectStore != nil else {
            throw DepotError.badRequest("a read-only origin serves a bucket: give the object store (--storage s3)")
        }
        let dataFolder = folder
        mirror = try configuration.objectStore.map { ReleaseMirror(client: try S3Client($0), folder: dataFolder, logger: configuration.logger) }
        if let store = configuration.objectStore {
            let s3 = S3BlobStore(client: try S3Client(store), spool: folder.uploads)
            if !readOnly {
                // `depot restore --take-over-bucket` leaves the same wish in the folder, for one start.
                let asked = FileSystem.exists(DataRestore.takeOverPath(folder))
                let notes = try BucketState(client: s3.client, bucket: s3).prepareWriter(folder, takeOver: configuration.takeOverBucket || asked, interval: configuration.refreshInterval)
                for note in notes { configuration.logger.notice("\(note)", metadata: ["data": .string(folder.root)]) }
                if asked || configuration.takeOverBucket {
                    // The pointers go now, before any sweep, so that the next start finds the
                    // bucket at this folder's state.
                    try mirror?.pushAll()
                    if asked {
                        FileSystem.remove(DataRestore.takeOverPath(folder))
                        try FileSystem.syncDirectory(folder.root)
                    }
                }
            }
            // A multipart upload cut short by a crash is aborted (its parts use space, no name).
            // Only the writer, once it holds the bucket: a replica or a refused drill never writes to it.
            if !readOnly { do {
                let aborted = try s3.abortUnfinishedUploads()
                if aborted > 0 { configuration.logger.notice("aborted unfinished uploads to the object store", metadata: ["count": .stringConvertible(aborted)]) }
            } catch {
                configuration.logger.warning("could not list unfinished uploads in the object store", metadata: ["error": .string("\(error)")])
            } }
            blobs = s3
        } else {
            blobs = FileBlobStore(folder: folder, changed: { [answers] sha256 in answers.forget(sha256) })
        }
        let writerMirror = readOnly ? nil : mirror
        // Every change goes to the bucket (with one) and to the patch maker, made just below.
        let afterChange = Mutex<PatchMaker?>(nil)
        let urls = PublicURL()
        releases = ReleaseStore(folder: folder, apps: apps, manifestLifetime: configuration.manifestLifetime, urls: urls, maximumChannels: configuration.maximumChannels, manifestMemory: configuration.manifestMemory,
            lineageDepth: configuration.patchDepth + 1, changed: { app in
            writerMirror?.schedule(app)
            afterChange.withLock { $0 }?.schedule(app)
        })
        uploads = ResumableUploads(folder: folder)
        let unfinished = uploads.repair()
        unfinishedUploads = readOnly ? [] : unfinished
        uploadExpiry = configuration.uploadExpiry
        accessLog = AccessLog(logger: configuration.logger, sink: configuration.accessLogSink)
        let folder = folder, cache = FileStampCache<AppSettings>(relativeTo: folder.apps), metrics = OriginMetrics()
        (self.urls, self.metrics) = (urls, metrics)
        // An app's settings, re-read only when app.json changes.
        let settings: @Sendable (String) -> AppSettings? = { app in
            guard Identifier.isValidApp(app) else { return nil }
            return cache.value(for: app, path: { folder.appSettings(app) }) { try StoredJSON.read(AppSettings.self, from: $0) }
        }
        let storing = BlobsInFlight()
        let publisher = Publisher(
            folder: folder, apps: apps, blobs: blobs, releases: releases, urls: urls, metrics: metrics, logger: configuration.logger,
            maximumPackSize: configuration.maximumPackSize, storing: storing, settings: settings
        )
        self.publisher = publisher
        let patchLimits = configuration.patchLimits ?? PatchLimits(scratchBytes: 4 * max(configuration.maximumPackSize, 1 << 30))
        let maker = readOnly ? nil : PatchMaker(
            releases: releases, blobs: blobs, apps: apps, folder: folder, urls: urls, storing: storing, metrics: metrics, logger: configuration.logger,
            depth: configuration.patchDepth,
            limits: patchLimits, settings: settings
        )
        patchMaker = maker
        afterChange.withLock { $0 = maker }
        // The collector leaves alone what publishes are storing and staging at that moment.
        var garbage = GarbageCollector(releases: releases, blobs: blobs, inFlight: storing, finishing: { [uploads] in uploads.finishingBlobs() })
        if let bucket = blobs as? S3BlobStore {
            // What backups of this folder hold in the bucket stays as long as they say.
            let state = BucketState(client: bucket.client, bucket: bucket)
            garbage.held = { now, removingExpired in try state.held(now: now, removingExpired: removingExpired) }
        }
        self.garbage = garbage
        operations = OperationsHandlers(
            metrics: metrics, staticFiles: configuration.publicDirectory.map(StaticFiles.init(root:)), metricsToken: configuration.metricsToken,
            dataRoot: folder.root, observe: { [releases, apps, folder, maker, manifestLifetime = configuration.manifestLifetime] in
                // Every live channel's manifest (cached in memory; the channel pointers are read).
                var expiries: [(app: String, channel: String, expiresAt: Date)] = []
                var roots: [(app: String, expiresAt: Date)] = []
                let all = apps.list()
                for app in all {
                    for channel in releases.channels(app).keys.sorted() {
                        if let live = try? releases.current(app, channel: channel) { expiries.append((app, channel, live.expiresAt)) }
                    }
                    if let root = try? releases.roots.trust(app)?.newest.document { roots.append((app, root.expiresAt)) }
                }
                let space = ScratchBudget.space(of: folder.root).map { (free: $0.free, total: $0.total) }
                return OriginMetrics.Observations(volume: space, reserve: patchLimits.reserve, manifestLifetime: manifestLifetime, expiries: expiries, apps: all, unreadableFiles: StateHealth.shared.problems(under: folder.root).count, rootExpiries: roots,
                    manifestMemory: releases.live.withLock { $0.bytes }, manifestsOnFile: releases.live.withLock { $0.onFile },
                    releaseMemory: releases.reading.bodies.withLock { $0.bytes },
                    patchAppsWaiting: maker?.waiting ?? 0, releaseFilesRead: ReleaseStore.releaseFilesRead.load(ordering: .relaxed)
                )
            }
        )
        reports = try ReportBook(folder: folder, releases: releases, mirror: mirror, logger: configuration.logger, metrics: metrics)
        let rollouts = Rollouts(publisher: publisher, reports: reports)
        self.rollouts = rollouts
        // The writer's guard looks at the figures each time some were written here, and (with a
        // bucket, where replicas write theirs) every five seconds.
        let readOnly = readOnly
        if !readOnly { reports.onFlushed { apps in rollouts.evaluate(apps) } }
        let (book, shared, appStore) = (reports, mirror != nil, apps)
        let evaluated = Mutex(ContinuousClock.now)
        let swept = Mutex(ContinuousClock.now)
        let writer = ReportWriter(interval: 0.25) {
            book.tick()
            // Kept blob answers whose file was removed by hand let go of its descriptor.
            let sweep = swept.withLock { last -> Bool in
                guard ContinuousClock.now - last >= .seconds(5) else { return false }
                last = .now
                return true
            }
            if sweep { answers.sweepRemoved() }
            guard shared && !readOnly else { return }
            let due = evaluated.withLock { last -> Bool in
                guard ContinuousClock.now - last >= .seconds(5) else { return false }
                last = .now
                return true
            }
            if due { rollouts.evaluate(appStore.list()) }
        }
        reportWriter = writer
        reports.onBacklog { writer.poke() }
        let (tokens, trust) = (TokenStore(folder: folder), TrustStore(folder: folder))
        let attestedKeys = AttestedKeys(folder: folder)
        self.attestedKeys = attestedKeys
        let logger = configuration.logger
        reports.onWriting {
            let held = attestedKeys.writeCounters()
            if !held.isEmpty {
                logger.error("attested keys' counters could not be written; these apps' report counts wait for them", metadata: ["apps": .string(held.sorted().joined(separator: ","))])
            }
            return held
        }
        router = Router(
            routes: Router.originRoutes(
                reads: ReadHandlers(
                    releases: releases, blobs: blobs, urls: urls, manifestMaxAge: configuration.manifestMaxAge, answers: answers, settings: settings
                ),
                publishing: PublishHandlers(publisher: publisher),
                resumable: ResumableHandlers(uploads: uploads, publisher: publisher, expiry: configuration.uploadExpiry),
                operations: operations, dashboard: DashboardHandlers(apps: apps, trust: trust),
                rollouts: RolloutHandlers(
                    rollouts: rollouts, limiter: ReportRateLimiter(perAddress: configuration.reportRatePerAddress, total: configuration.reportRateTotal),
                    keys: attestedKeys
                ),
                trust: TrustHandlers(
                    exchange: TokenExchange(trust: trust, tokens: tokens, keys: IssuerKeys(logger: configuration.logger)),
                    limits: ExchangeLimits(), metrics: metrics, logger: configuration.logger, readOnly: readOnly,
                    settings: { [apps] in apps.settings($0) }
                ),
                attest: AttestHandlers(
                    challenges: AttestChallenges(
                        lifetime: configuration.attestChallengeLifetime, perAddress: configuration.attestChallengesPerAddress, total: configuration.attestChallengesTotal
                    ),
                    keys: attestedKeys, limiter: ReportRateLimiter(perAddress: configuration.attestRatePerAddress, total: configuration.attestRateTotal),
                    metrics: metrics, logger: configuration.logger, anchor: configuration.appAttestAnchor ?? AppAttestVerifier.appleRoot, readOnly: readOnly
                )
            ),
            authenticator: Authenticator(tokens: tokens, trust: trust), settings: settings, readOnly: readOnly
        )
        if readOnly, let mirror {
            // A replica holds no keys: it serves what it pulls, starting with what is there now.
            try mirror.pull(into: releases)
        } else {
            _ = try apps.signingKeys()
            try releases.removeUnpublishedReleases()
            // Patches a stop or a crash left unmade (start-up removed their scratch space).
            maker?.schedule(apps.list().sorted())
        }
    }

    /// Stops the report timer and writes what it holds (at stop).
    func flushReports() {
        reportWriter.stop()
        reports.flush(final: true)
    }

    /// Releases the data folder for another process (at stop).
    func releaseFolderLock() {
        let fd = folderLock.withLock { value -> Int32 in
            defer { value = -1 }
            return value
        }
        if fd >= 0 { close(fd) }
    }

    deinit { releaseFolderLock() }

    func handle(_ request: HTTPRequest) -> HTTPDisposition { router.dispatch(request) }

    func completed(_ record: HTTPExchangeRecord) {
        metrics.record(record)
        accessLog.record(record)
    }
}

extension Origin {
    /// Stores and stages the packs of uploads a crash interrupted after their pack was verified
    /// and recorded; called once the public URL is known (the entries carry it).
    func finishUploadsLeftByACrash() {
        for id in unfinishedUploads { uploads.finishAfterCrash(id, publisher: publisher, expiry: uploadExpiry) }
    }
}
