import DepotCore
import Foundation
import Logging
import Synchronization

/// Publishing, in domain terms: stores verified packs and stages them, publishes the draft as
/// the next signed release, removes packs, rolls back, promotes channels. It takes and returns
/// domain values and throws ``DepotError``; it knows nothing of HTTP.
final class Publisher: Sendable {
    let folder: DataFolder
    let apps: AppStore
    let blobs: any BlobStore
    let releases: ReleaseStore
    let urls: PublicURL
    let metrics: OriginMetrics
    let logger: Logger
    /// The largest pack accepted, in plaintext bytes.
    let maximumPackSize: Int64
    /// An app's settings (cached by the caller).
    private let settings: @Sendable (String) -> AppSettings?
    /// Blobs between being stored and being staged, which no removal takes.
    let storing: BlobsInFlight

    init(
        folder: DataFolder, apps: AppStore, blobs: any BlobStore, releases: ReleaseStore, urls: PublicURL, metrics: OriginMetrics,
        logger: Logger, maximumPackSize: Int64, storing: BlobsInFlight = BlobsInFlight(), settings: @escaping @Sendable (String) -> AppSettings?
    ) {
        self.storing = storing
        self.folder = folder
        self.apps = apps
        self.blobs = blobs
        self.releases = releases
        self.urls = urls
        self.metrics = metrics
        self.logger = logger
        self.maximumPackSize = maximumPackSize
        self.settings = settings
    }

    /// The app's settings (cached), or nil if there is no such app.
    func appSettings(_ app: String) -> AppSettings? { settings(app) }

    /// Whether the app of an upload is managed; refuses values only managed packs have on an
    /// unmanaged app's upload.
    func checkMode(_ parameters: UploadParameters) throws -> Bool {
        let managed = settings(parameters.app)?.isManaged ?? false
        if !managed && parameters.hasManagedValues {
            throw DepotError.badRequest("installSize, events and userInfo are for managed apps' packs; app \(parameters.app) is unmanaged")
        }
        return managed
    }

    /// Stores a finished, verified container (a temporary file) as a blob, then stages it, or
    /// with `release` publishes it at once. Refuses a plaintext checksum other than the one
    /// vouched for, a damaged zip and a malformed Apple Archive; the temporary file is the
    /// caller's to remove on failure.
    func store(container path: String, summary: PackSummary, keys: KeyRing, for parameters: UploadParameters) throws -> PublishResult {
        try store(container: path, summary: summary, installSize: check(container: path, summary: summary, keys: keys, for: parameters), for: parameters)
    }

    /// Stages a stored blob for the app's next release, and publishes it at once with `release`.
    func publish(_ summary: PackSummary, installSize: Int64, for request: UploadParameters) throws -> PublishResult {
        let entry = PackEntry(
            id: request.pack, revision: 0, url: urls.blob(request.app, summary.sha256), size: summary.size,
            sha256: summary.sha256, installSize: installSize, plaintextSHA256: summary.plaintextSHA256, policy: request.policy,
            tags: request.tags, keyID: summary.keyID, contentType: request.contentType,
            installationEventTypes: request.policy == .onDemand ? nil : request.installationEventTypes, userInfo: request.userInfo,
            language: request.language
        )
        // A pack staged twice: the earlier upload's blob is deleted once the draft no longer needs it.
        var superseded: String?
        let add: (inout Staging, [PackEntry]) throws -> Void = { staging, live in
            // (Not when it is this very blob: an upload finished again after a crash stores the same container.)
            if let earlier = staging.upserts[request.pack], earlier.sha256 != entry.sha256, !live.contains(where: { $0.sha256 == earlier.sha256 }) {
                superseded = earlier.sha256
            }
            try staging.checkChange(request.pack, by: request.scope)
            staging.upserts[request.pack] = entry
            staging.removals.remove(request.pack)
            staging.record(request.pack, scope: request.scope)
        }
        metrics.uploaded(bytes: summary.plaintextSize)
        if request.release {
            let result: PublishResult
            do {
                result = try release(
                    request.app, channel: request.channel, base: request.base, force: request.force, pack: request.pack, adding: add, storingItself: summary.sha256,
                    scope: request.scope
                )
            } catch let error as DepotError where error.kind == .conflict || error.kind == .forbidden {
                // Refused before anything changed: nothing was staged. The blob goes only if
                // nothing else names it (the same bytes may be live here or in another app) and no
                // other upload is storing it.
                removeUnneeded([summary.sha256], storingItself: summary.sha256)
                throw error
            }
            removeUnneeded([superseded].compactMap { $0 })
            return result
        }
        let live: [PackEntry]
        do {
            live = try releases.stage(request.app, channel: request.channel, add)
        } catch let error as DepotError where error.kind == .forbidden {
            // A change the token may not make: nothing was staged, so the stored blob goes
            // unless something else names it.
            removeUnneeded([summary.sha256], storingItself: summary.sha256)
            throw error
        }
        removeUnneeded([superseded].compactMap { $0 })
        let preview = Staging(upserts: [request.pack: entry]).merged(into: live).packs.first { $0.id == request.pack } ?? entry
        return PublishResult(
            app: request.app, pack: preview, release: try releases.current(request.app, channel: request.channel)?.version,
            staged: true, changed: true, channel: request.channel, manifestURL: urls.manifest(request.app, channel: request.channel)
        )
    }

    /// Publishes the staged draft on `channel` (after `adding` changed it, in the same lock
    /// hold); the result names `pack` as released, when given. `storingItself`: the blob of the
    /// upload calling this, which may end up unused (identical content) and goes then. `draft`:
    /// the fingerprint of the draft the caller confirmed (409 `draft_changed` if it is not the draft's now).
    func release(
        _ app: String, channel: String, base: Int?, force: Bool, pack: String? = nil, adding: ((inout Staging, [PackEntry]) throws -> Void)? = nil,
        storingItself: String? = nil, scope: [String]? = nil, draft: String? = nil
    ) throws -> PublishResult {
        let (release, unused) = try releases.publishStaged(
            app, channel: channel, base: base, adding: adding, check: force ? nil : allowanceGuard(app, channel: channel), scope: scope, draft: draft
        )
        removeUnneeded(unused, storingItself: storingItself)
        metrics.published(app: app, changed: release != nil)
        // The release this publish made (a patch release may follow at once), else the live one.
        let live = try release ?? releases.current(app, channel: channel)
        return PublishResult(
            app: app, pack: try pack.flatMap { try live?.manifest[pack: $0] }, release: live?.version, staged: false, changed: release != nil,
            channel: channel, manifestURL: urls.manifest(app, channel: channel)
        )
    }

    /// Deletes blobs that left a draft or were refused, unless anything still names them: any
    /// app's release (visible or not) or draft, or an upload storing the same bytes now
    /// (`storingItself`: the caller's own upload, which does not count). Decided and done under
    /// the publish lock with the in-flight counts held (see ``BlobStore``'s contract); when in
    /// doubt (a release cannot be read) the blob stays, for the garbage collector. While a backup
    /// runs (it holds ``BackupLock``) nothing is removed: it may have copied the draft that named
    /// the blob, and a restore of it would name a missing blob; the sweep removes it later.
    func removeUnneeded(_ candidates: [String], storingItself: String? = nil) {
        guard !candidates.isEmpty else { return }
        // The publish lock first: removals in this process take turns there, so that the backup
        // lock (tried, never waited for) is busy only when a backup or another process holds it.
        releases.exclusively {
            _ = try? BackupLock.exclusively(releases.folder) {
                storing.holding { counts in
                    for blob in candidates {
                        let others = (counts[blob] ?? 0) - (blob == storingItself ? 1 : 0)
                        guard others <= 0, (try? releases.anyAppNames(blob)) == false else { continue }
                        blobs.remove(blob)
                    }
                }
            }
        }
    }

    /// Refuses a release whose Info.plist keys exceed the allowances recorded for shipped builds.
    func allowanceGuard(_ app: String, channel: String) -> (Manifest, Int64) throws -> Void {
        Self.allowanceGuard(settings: settings(app), channel: channel, urls: urls)
    }

    /// The guard for an app with `settings`: every release passes it, patch releases included.
    static func allowanceGuard(settings: AppSettings?, channel: String, urls: PublicURL) -> (Manifest, Int64) throws -> Void {
        let allowances = settings?.allowances
        return { manifest, envelopeSize in
            guard let allowances else { return }
            let keys = BackgroundAssetsKeys(release: manifest, envelopeSize: envelopeSize, app: settings, channel: channel, urls: urls)
            let excesses = allowances.excesses(keys)
            guard excesses.isEmpty else {
                throw DepotError.conflict("allowance_exceeded", excesses.joined(separator: "; ")
                    + ". Nothing was published; ship builds with larger allowances, or repeat with ?force=true")
            }
        }
    }

    /// Publishes a new release (versions only go up) whose packs are release `target`'s. A pack
    /// whose content differs from the live one gets the next revision, so devices replace it;
    /// blobs are never deleted, so every older release stays installable.
    func rollback(_ app: String, to target: Int, channel: String, force: Bool, confirmRemoval: Bool = false, acceptRetiredKeys: Bool = false) throws -> RollbackResult {
        guard let old = try releases.release(app, target)?.manifest else { throw DepotError.notFound("release \(target) of app \(app)") }
        if !acceptRetiredKeys { try Self.checkRetiredKeys(old.packs, release: target, app: app, apps: apps) }
        let managed = settings(app)?.isManaged ?? false
        var removed: [String] = []
        let blobs = blobs
        let published = try releases.publish(app, channel: channel, rolloutChange: .content, change: { live in
            try Self.requireStored(old, version: target, in: blobs)
            removed = live.map(\.id).filter { id in !old.packs.contains { $0.id == id } }
            if managed && !removed.isEmpty && !confirmRemoval { throw Self.removalRefused(removed, app: app) }
            let current = Dictionary(live.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
            let restored = old.packs.map { pack -> PackEntry in
                // Patches are made anew for the restored revision (``PatchMaker``).
                guard let now = current[pack.id] else {
                    var restored = pack
                    restored.patches = nil
                    return restored
                }
                var restored = pack
                restored.patches = nil
                // Same container: the live revision; other content: the next one, so devices replace it.
                restored.revision = now.sha256 == pack.sha256 ? now.revision : now.revision + 1
                return restored
            }
            return restored.sorted { $0.id < $1.id } == live.sorted { $0.id < $1.id } ? nil : restored
        }, check: force ? nil : allowanceGuard(app, channel: channel))
        let version = try published?.version ?? releases.current(app, channel: channel)?.version ?? 0
        return RollbackResult(
            app: app, channel: channel, rolledBackTo: target, release: version, changed: published != nil, packs: old.packs.map(\.id),
            removed: removed
        )
    }

    /// A managed app's release that would drop packs devices have: they delete them, and the
    /// system can never download them again.
    static func removalRefused(_ packs: [String], app: String) -> DepotError {
        DepotError.conflict("live_pack_removed", "this would drop \(packs.sorted().joined(separator: ", ")) from the download manifest of managed app \(app): devices delete a pack that leaves it and the system never downloads it again; nothing was published. Repeat with ?removeLive=true (depot … --remove) if that is meant")
    }

    /// Points `channel` at release `version` from now on (forward only). For a managed app the
    /// move must keep versions rising: a pack whose bytes differ on the target release needs a
    /// higher version there (or devices keep the old bytes), and dropping a pack needs `confirmRemoval`.
    func promote(_ app: String, channel: String, to version: Int, force: Bool, confirmRemoval: Bool = false, acceptRetiredKeys: Bool = false) throws -> PromotionResult {
        let allowances = force ? nil : allowanceGuard(app, channel: channel)
        let apps = apps
        let managed = settings(app)?.isManaged ?? false
        let (releases, blobs) = (releases, blobs)
        let changed = try releases.promote(app, channel: channel, to: version, isStored: { !blobs.isMissing($0) }, check: { target, size in
            // Under the publish lock, which garbage collection takes too: what is checked here
            // stays stored until the channel names it.
            try Self.requireStored(target, version: version, in: blobs)
            if managed, let now = try releases.current(app, channel: channel)?.manifest {
                let next = Dictionary(target.packs.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
                for pack in now.packs {
                    guard let after = next[pack.id] else { continue }
                    if after.sha256 != pack.sha256 && after.revision <= pack.revision {
                        throw DepotError.conflict("version_not_raised", "pack \(pack.id) has other bytes in release \(version) under version \(after.revision), not above the \(pack.revision) channel \(channel) serves: devices would keep their copy; nothing changed. Publish the change on \(channel) instead (it gets a higher version)")
                    }
                }
                let dropped = now.packs.map(\.id).filter { next[$0] == nil }
                if !dropped.isEmpty && !confirmRemoval { throw Self.removalRefused(dropped, app: app) }
            }
            try allowances?(target, size)
            if !acceptRetiredKeys { try Self.checkRetiredKeys(target.allEntries, release: version, app: app, apps: apps) }
        })
        let served = try releases.current(app, channel: channel)?.version ?? version
        logger.notice("promoted", metadata: ["app": .string(app), "channel": .string(channel), "release": .stringConvertible(served)])
        return PromotionResult(app: app, channel: channel, release: served, changed: changed, manifestURL: urls.manifest(app, channel: channel))
    }

    /// Refuses (409 `retired_pack_key`) to put back packs encrypted under a pack key that was
    /// retired and that no live release or draft uses now: a build exported while it was unused
    /// does not hold it (``AppStore/clientConfiguration(_:)`` gives builds only the retired keys
    /// in use), so it could not read them. Key ids are labels the ring gives each key (each
    /// container is sealed with AES-GCM: the wrong key fails, never yields other bytes; a
    /// protected channel's statement binds the plaintext), so the refusal is by id.
    static func checkRetiredKeys(_ packs: [PackEntry], release: Int, app: String, apps: AppStore) throws {
        let used = Set(packs.map(\.keyID).filter { !$0.isEmpty })
        guard !used.isEmpty else { return }
        let states = try apps.storedPackKeys(app).states
        let retired = used.filter { states.retired.contains($0) }
        guard !retired.isEmpty else { return }
        let inUse = try apps.livePackKeys(app).keysInUse
        let stranded = retired.filter { !inUse.contains($0) }.sorted()
        guard let first = stranded.first else { return }
        let names = packs.filter { stranded.contains($0.keyID) }.map(\.id).sorted()
        let when = states.retiredAt[first].map { " on " + ISO8601DateFormatter().string(from: $0) } ?? ""
        throw DepotError.conflict("retired_pack_key", """
            release \(release)'s pack\(names.count == 1 ? "" : "s") \(names.joined(separator: ", ")) \(names.count == 1 ? "is" : "are") encrypted under pack key \
            \(stranded.joined(separator: ", ")), retired\(when) and used by no live release since: builds exported meanwhile do not hold it and \
            could not read \(names.count == 1 ? "it" : "them") (they keep their copies and report failures). Publish \(names.count == 1 ? "that pack" : "those packs") \
            again (the current key encrypts \(names.count == 1 ? "it" : "them")) and promote that release, or, when every build in the field holds \
            the key, accept it (--accept-retired-keys). Nothing changed
            """)
    }

    /// Throws unless every pack of release `version` is still stored: garbage collection removes
    /// the blobs of releases no channel serves once they are older than the retention, and a
    /// channel must never be pointed at a release devices could not download.
    static func requireStored(_ manifest: Manifest, version: Int, in blobs: any BlobStore) throws {
        for pack in manifest.packs where !blobs.contains(pack.sha256) {
            throw DepotError.conflict("blob_missing", "release \(version)'s pack \(pack.id) (blob \(pack.sha256)) is no longer stored: garbage collection removed it (older than the retention, served by no channel); nothing changed. Publish the pack again instead")
        }
    }

    /// Removes a channel other than production: devices following it get 404 from then on.
    func removeChannel(_ app: String, channel: String) throws {
        try releases.removeChannel(app, channel: channel)
    }

    /// What a managed app's archive unpacks to: counted in an uncompressed (`AA01`) archive,
    /// whose structure is checked to the last byte; as declared for a compressed one.
    func installSize(ofArchive path: String, size: Int64, declared: Int64?) throws -> Int64 {
        let file = try FileDescriptor.openForReading(path)
        defer { try? file.close() }
        var magic = [UInt8](repeating: 0, count: 4)
        _ = try magic.withUnsafeMutableBytes { try file.read(into: $0, at: 0) }
        guard let kind = AppleArchive.kind(ofPrefix: magic) else { throw ArchiveWriter.notAnArchive(magic) }
        guard kind == .uncompressed else {
            guard let declared else {
                throw DepotError(.unprocessable, "install_size_required", "a compressed Apple Archive (\(kind.rawValue)) unpacks to a size the origin cannot see: declare it (installSize=N, or depot publish --install-size N); nothing was stored")
            }
            return declared
        }
        do {
            return try AppleArchive.inspect(file, size: size).fileBytes
        } catch let error as AppleArchive.ArchiveError {
            throw DepotError(.unprocessable, "invalid_archive", "\(error); nothing was stored")
        }
    }

    /// A zip pack's unpacked size, or the plaintext size; refuses a zip that is damaged or unsafe.
    func installSize(ofContainer path: String, summary: PackSummary, contentType: String, keys: KeyRing) throws -> Int64 {
        guard ZipPack.isZip(contentType: contentType) else { return summary.plaintextSize }
        let (plain, file) = try folder.scratchFile(suffix: ".zip")
        try? file.close()
        defer { FileSystem.remove(plain) }
        try PackDecryptor.decrypt(file: path, to: plain, keyRing: keys)
        chmod(plain, 0o600)
        do {
            return try ZipPack.inspect(plain).installSize
        } catch {
            throw DepotError(.unprocessable, "invalid_zip", "\(error); nothing was stored")
        }
    }
}
