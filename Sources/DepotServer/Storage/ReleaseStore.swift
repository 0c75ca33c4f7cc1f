import DepotCore
import DepotHTTP
import Foundation
import Synchronization

/// Signed releases per app: `releases/NNNNNN.json` (immutable), numbered across the app, and
/// channels pointing at them: `current` for `production`, `channels/<name>` for the others.
/// `head` records the highest release number ever made visible.
///
/// Publishing is serialised by one lock; a release becomes live on a channel by one atomic
/// rename of its pointer, after its envelope is durable. A channel only moves to a higher
/// number, so a device that follows one channel never sees its version go down. Live envelopes
/// are cached in memory.
public final class ReleaseStore: Sendable {
    /// The default channel, whose manifest is also served at `/v1/apps/{app}/manifest`.
    public static let production = "production"
    let folder: DataFolder
    let apps: AppStore
    /// The apps' roots of trust and release statements, attached to the manifests they sign.
    let roots: RootStore
    let publishLock = Mutex(())
    let live: Mutex<LiveCache>
    private let drafts: DraftStore
    /// Per app, what its releases hold (the highest revision of each pack id, every blob they
    /// name): loaded once, kept up to date by every publish.
    let indexes = Mutex<(generation: Int, byApp: [String: ReleaseIndex])>((0, [:]))
    /// What the reading routes keep (``releaseFile(_:_:)``; the listings are ``history``'s).
    let reading = ReleaseReadingCaches()
    /// How long a signed manifest stays valid.
    let manifestLifetime: TimeInterval
    /// Told the app after each change of its releases or channels (the bucket mirror, the patch maker).
    let changed: @Sendable (String) -> Void
    /// Told each release as it is made visible (the report book keeps its listing).
    let published = Mutex<(@Sendable (String, Manifest) -> Void)?>(nil)
    /// What the anonymous listings know of each app's releases and channels, kept.
    let history: ReleaseHistory
    /// The most channels an app may have besides production (`depot serve --max-channels`).
    let maximumChannels: Int
    /// How many revisions of each pack the index keeps for patch making (`--patch-depth` and one).
    let lineageDepth: Int

    init(
        folder: DataFolder, apps: AppStore, manifestLifetime: TimeInterval, urls: PublicURL = PublicURL(), maximumChannels: Int = ReleaseStore.defaultMaximumChannels,
        manifestMemory: Int = ReleaseStore.defaultManifestMemory, lineageDepth: Int = ReleaseIndex.lineageDepth, changed: @escaping @Sendable (String) -> Void = { _ in }
    ) {
        self.lineageDepth = min(ReleaseIndex.lineageDepth, max(1, lineageDepth))
        live = Mutex(LiveCache(budget: manifestMemory))
        self.folder = folder
        self.apps = apps
        roots = RootStore(folder: folder)
        drafts = DraftStore(folder: folder)
        self.manifestLifetime = manifestLifetime
        self.maximumChannels = maximumChannels
        history = ReleaseHistory(folder: folder, urls: urls)
        self.changed = changed
    }

    /// The live envelopes' bytes kept in memory, in all, unless the operator says otherwise
    /// (`--manifest-memory`): past it they are sent from their files.
    public static let defaultManifestMemory = 256 << 20

    /// Channels per app besides production, unless the operator says otherwise.
    public static let defaultMaximumChannels = 1_000

    /// Refuses a new channel past ``maximumChannels`` (call under the publish lock, before the
    /// channel's first pointer is written).
    func checkRoom(for channel: String, app: String) throws {
        guard channel != Self.production, !FileSystem.exists(pointerPath(app, channel)) else { return }
        let count = FileSystem.contents(of: folder.channels(app)).count { Identifier.isValidChannel($0) }
        guard count < maximumChannels else {
            throw DepotError.conflict("too_many_channels", "app \(app) has \(count) channels besides production, the most this origin keeps (depot serve --max-channels \(maximumChannels)); remove one (depot channels remove) or raise the limit. Nothing changed")
        }
    }

    /// Drops what is cached of `app` (a replica, after its files changed underneath).
    func forget(_ app: String) {
        history.forget(app)
        live.withLock { cache in
            for key in cache.keys where key.hasPrefix(app + "\u{0}") { cache[key] = nil }
        }
        indexes.withLock {
            $0.byApp[app] = nil
            $0.generation += 1
        }
    }

    /// Where a channel's pointer lives.
    func pointerPath(_ app: String, _ channel: String) -> String {
        channel == Self.production ? folder.currentPointer(app) : folder.channels(app) + "/" + channel
    }

    /// A pointer file's number (`head`, `current`, `channels/*`, `release-floor`): one decimal and a newline.
    static func readNumber(_ path: String) -> Int? {
        guard let text = try? FileSystem.readFile(path, limit: 64) else { return nil }
        return Int(String(decoding: text, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// The release a channel serves, or nil before it has one.
    func current(_ app: String, channel: String = ReleaseStore.production) throws -> LiveManifest? {
        let key = app + "\u{0}" + channel
        if let cached = live.withLock({ $0[key] }) { return cached }
        guard let version = Self.readNumber(pointerPath(app, channel)) else { return nil }
        let copy = signedCopyPath(app, channel: channel, version)
        let loaded = try FileSystem.exists(copy) ? load(path: copy, version) : load(app, version)
        live.withLock { $0[key] = loaded }
        return loaded
    }

    /// Caches what a channel serves.
    func remember(_ release: LiveManifest, app: String, channel: String) {
        live.withLock { $0[app + "\u{0}" + channel] = release }
    }

    /// Where release `version`, signed again for `channel` (it was published on another), lives.
    func signedCopyPath(_ app: String, channel: String, _ version: Int) -> String {
        folder.signedCopies(app, channel: channel) + "/" + DataFolder.releaseName(version)
    }

    /// The channels of an app and their release numbers.
    func channels(_ app: String) -> [String: Int] {
        var out: [String: Int] = [:]
        if let production = Self.readNumber(folder.currentPointer(app)) { out[Self.production] = production }
        for name in FileSystem.contents(of: folder.channels(app)) where Identifier.isValidChannel(name) {
            if let version = Self.readNumber(folder.channels(app) + "/" + name) { out[name] = version }
        }
        return out
    }

    /// The highest release number made visible (on any channel, now or before).
    func head(_ app: String) -> Int {
        max(Self.readNumber(folder.head(app)) ?? 0, channels(app).values.max() ?? 0)
    }

    func load(_ app: String, _ version: Int) throws -> LiveManifest {
        try load(path: folder.release(app, version), version)
    }

    /// The manifest an envelope's bytes carry (its signatures are not checked: the origin signed it).
    static func decodeManifest(_ bytes: [UInt8]) throws -> Manifest {
        let envelope = try Envelope.decode(bytes)
        guard let payload = Data(base64Encoded: envelope.payload) else { throw EnvelopeError.malformed }
        return try Manifest.decode(Array(payload))
    }

    func load(path: String, _ version: Int) throws -> LiveManifest {
        Self.releaseFilesRead.add(1, ordering: .relaxed)
        Self.taskReads?.value.add(1, ordering: .relaxed)
        let bytes = try FileSystem.readFile(path)
        let manifest = try Self.decodeManifest(bytes)
        return LiveManifest(version: version, envelope: bytes, etag: "\"" + Hex.encode(SHA256Hasher.hash(bytes)) + "\"", manifest: manifest, path: path)
    }

    /// A release by number, or nil if there is none. A release exists only once `head` (or a
    /// channel) has named it: a file above is a publish still in progress.
    func release(_ app: String, _ version: Int) throws -> LiveManifest? {
        guard version <= head(app), FileSystem.exists(folder.release(app, version)) else { return nil }
        return try load(app, version)
    }

    /// Every release of the app, oldest first.
    func list(_ app: String) throws -> [Manifest] {
        let head = head(app)
        return try Self.versions(in: folder.releases(app)).filter { $0 <= head }.map { try load(app, $0).manifest }
    }

    static func versions(in folder: String) -> [Int] {
        FileSystem.contents(of: folder).compactMap { name -> Int? in
            name.hasSuffix(".json") && !name.hasPrefix(".") ? Int(name.dropLast(5)) : nil
        }.sorted()
    }

    /// Runs `body` under the publish lock: no publish, promotion or rollback runs meanwhile.
    func exclusively<T>(_ body: () throws -> T) rethrows -> T {
        try publishLock.withLock { _ in try body() }
    }

    /// The staged changes of an app.
    func staging(_ app: String) throws -> Staging { try drafts.draft(app) }

    /// Changes the staged draft, under the publish lock; returns the packs of `channel` it was staged against.
    @discardableResult
    func stage(_ app: String, channel: String = ReleaseStore.production, _ change: (inout Staging, [PackEntry]) throws -> Void) throws -> [PackEntry] {
        try publishLock.withLock { _ in
            var staging = try self.staging(app)
            let live = try current(app, channel: channel)?.manifest.packs ?? []
            try change(&staging, live)
            try saveStaging(app, staging)
            return live
        }
    }

    private func saveStaging(_ app: String, _ staging: Staging) throws { try drafts.save(app, staging) }

    /// Publishes the staged changes as the next release and empties the draft. `base`, when
    /// given, must be the live version, or an earlier one with the same content (the origin
    /// published patches or re-signed since): a publisher that raced another gets ``DepotError`` 409.
    /// Returns the new release and the blobs that ended up unused, or nil if nothing changed.
    /// `adding` changes the draft first, in the same lock hold: an upload with `?release=true`
    /// is staged and published in one step, or (on a conflict) not staged at all. `draft`, when
    /// given, must be the draft's ``Staging/fingerprint`` (409 `draft_changed` otherwise).
    func publishStaged(
        _ app: String, channel: String = ReleaseStore.production, base: Int?, adding: ((inout Staging, [PackEntry]) throws -> Void)? = nil,
        check: ((Manifest, Int64) throws -> Void)? = nil, scope: [String]? = nil, draft: String? = nil
    ) throws -> (release: LiveManifest?, unusedBlobs: [String]) {
        var unused: [String] = []
        let release = try publish(app, channel: channel, base: base, rolloutChange: .content, change: { live in
            var staging = try self.staging(app)
            if let draft, draft != staging.fingerprint {
                throw DepotError.conflict("draft_changed", "the draft of app \(app) changed since you read it (it now changes \(staging.changedPacks.sorted().prefix(10).joined(separator: ", ")), draft \(staging.fingerprint), not \(draft)): someone staged or dropped a change meanwhile. Nothing was published; read the draft again and decide")
            }
            try adding?(&staging, live)
            guard !staging.isEmpty else { throw DepotError.conflict("nothing_staged", "nothing is staged for app \(app)") }
            try staging.checkRelease(on: channel, by: scope)
            let merged = staging.merged(into: live)
            unused = merged.unusedBlobs
            return merged.packs == live ? nil : merged.packs
        }, check: check, then: {
            // The release is live (or nothing changed): the draft is spent. Still under the lock,
            // so a pack staged meanwhile is not lost; a crash before this line leaves a draft
            // whose changes are already live, which publishing again finds unchanged.
            try self.saveStaging(app, Staging())
        })
        return (release, unused)
    }

    /// Publishes the next release on `channel`: `change` edits the channel's pack list (a new
    /// channel starts from production's); returns nil if it changed nothing. With `base`, the
    /// channel's version must equal it, or be a later release with the same content (patches
    /// aside), which the origin made on its own; 409 otherwise, checked under the lock. `check` sees the
    /// signed manifest and its envelope size before anything is written, and may refuse it (the
    /// allowance guard).
    ///
    /// `rolloutChange` says what becomes of a rollout on the channel (``RolloutChange``). `at`:
    /// when it is published (now by default), which decides its expiry and the signing keys in force.
    func publish(
        _ app: String, channel: String = ReleaseStore.production, base expected: Int? = nil, rolloutChange: RolloutChange,
        change: ([PackEntry]) throws -> [PackEntry]?, keepingRevisions: Bool = false, statementOf statementRelease: Int? = nil,
        check: ((Manifest, Int64) throws -> Void)? = nil, then: (() throws -> Void)? = nil, at instant: Date? = nil
    ) throws -> LiveManifest? {
        try publishLock.withLock { _ in
            // Taken under the lock, so that releases' dates rise with their numbers.
            let now = instant ?? WallClock.now()
            let channelRelease = try current(app, channel: channel)
            let base = try channelRelease ?? current(app)
            let liveRollout = channelRelease?.rollout
            let rollout: Rollout?
            switch rolloutChange {
            case .content:
                if let liveRollout, liveRollout.fraction > 0 { throw Self.rolloutRunning(liveRollout, channel: channel) }
                rollout = nil
            case .keep:
                rollout = liveRollout
            case .compute(let compute):
                rollout = try compute(channelRelease)
            }
            if let expected, expected != (channelRelease?.version ?? 0) {
                // A release the origin made on its own since (patches named, a manifest re-signed
                // before expiry) holds the same content: the publisher's base is still current.
                guard let channelRelease, expected < channelRelease.version, let based = try release(app, expected),
                      Self.sameContent(try based.manifest.packs, try channelRelease.manifest.packs) else {
                    throw DepotError.conflict("conflict", "channel \(channel) serves release \(channelRelease?.version ?? 0), not \(expected): another publish came first; nothing was published")
                }
            }
            let basePacks = try base?.manifest.packs ?? []
            guard let edited = try change(basePacks) else {
                try then?()
                return nil
            }
            try checkRoom(for: channel, app: app)
            // A restored folder's floor (``ReleaseFloor``): numbers continue above every one
            // issued before the restore. Read here, under the lock, once per publish.
            let floor = ReleaseFloor.read(folder) ?? 0
            // `keepingRevisions`: a release's packs published anew as they are (a promotion
            // over a re-signed channel), their revisions above the channel's already.
            let packs = keepingRevisions ? edited : try raisingRevisions(edited, over: basePacks, candidates: liveRollout?.packs ?? [], app: app, floor: floor)
            // Start-up removed any release a crash left unpublished, so the next number is free;
            // the files still count, so that a number is never written twice.
            let version = max(head(app) + 1, (Self.versions(in: folder.releases(app)).last ?? 0) + 1, floor)
            var seen: [String: String] = [:]
            for pack in packs {
                guard let group = pack.languageGroup, let language = pack.language else { continue }
                if let other = seen.updateValue(pack.id, forKey: group + "\u{0}" + language) {
                    throw DepotError.conflict("duplicate_language", "\(other) and \(pack.id) are both group \(group)'s \(language) pack: a device takes one per language; remove one. Nothing was published")
                }
            }
            // A rollout's candidate may bring the first localized packs: the manifest names the
            // primary language for the devices that take it.
            let localized = !seen.isEmpty || rollout?.packs.contains { $0.language != nil } == true
            var primary: String?
            if localized {
                // On a protected channel, the language the statements bind (the main packs', else the candidate's).
                let candidate = rollout.map { Manifest(app: app, version: 0, publishedAt: now, expiresAt: now, packs: packs, rollout: $0).choosing(candidate: true).packs }
                primary = try boundLanguage(app, channel: channel, packs: packs)
                    ?? candidate.flatMap { try boundLanguage(app, channel: channel, packs: $0, release: rollout?.release) }
                    ?? apps.settings(app)?.primaryLanguage
            }
            if localized && primary == nil {
                throw DepotError.conflict("primary_language_required", "release has localized packs but app \(app) has no primary language: a device that speaks none of a group's languages takes the primary language's pack. Set it (depot apps language \(app) --primary en); nothing was published")
            }
            let manifest = Manifest(
                app: app, version: version, publishedAt: now, expiresAt: now.addingTimeInterval(manifestLifetime), packs: packs, channel: channel,
                primaryLanguage: primary, rollout: rollout
            )
            let envelope = try seal(manifest, app: app, channel: channel, replacing: channelRelease?.manifest, release: statementRelease, now: now)
            try check?(manifest, Int64(envelope.count))
            try FileSystem.writeAtomically(envelope, to: folder.release(app, version))
            // `head` first: a crash before the pointer leaves a release that no channel serves
            // yet, listed and promotable; a crash before `head` leaves a file start-up removes.
            try FileSystem.writeAtomically(Array("\(version)\n".utf8), to: folder.head(app))
            try noteReleased(manifest, app: app)
            if channel != Self.production { try FileSystem.createDirectory(folder.channels(app)) }
            try FileSystem.writeAtomically(Array("\(version)\n".utf8), to: pointerPath(app, channel))
            history.record(app, release: ReleaseHistory.Release(manifest), channel: channel, version: version)
            published.withLock { $0 }?(app, manifest)
            let published = LiveManifest(
                version: version, envelope: envelope, etag: "\"" + Hex.encode(SHA256Hasher.hash(envelope)) + "\"", manifest: manifest, path: folder.release(app, version)
            )
            live.withLock { $0[app + "\u{0}" + channel] = published }
            changed(app)
            try then?()
            return published
        }
    }
}
