import DepotCore
import Foundation

/// What the maintenance pass and start-up ask of the releases: re-signing before expiry or after
/// a key rotation, the blobs still needed, crash recovery.
extension ReleaseStore {
    /// Re-signs live manifests that are close to expiry (less than a third of the lifetime left)
    /// or signed by other keys than those in force: the same packs are published as the next
    /// version, so a quiet app never leaves devices with an expired (refused) manifest, and a key
    /// rotation reaches the live manifest without a publish. Returns the apps refreshed.
    @discardableResult
    func refreshExpiring(now: Date = WallClock.now()) throws -> [String] {
        var refreshed: [String] = []
        let keys = roots.signingKeysStamp
        for app in FileSystem.contents(of: folder.apps) where FileSystem.isDirectory(folder.releases(app)) {
            // What this pass sees of the app's roots and keys: a change after it is the watch's
            // (``refreshChangedTrust()``).
            _ = roots.changedSinceLastLook(app, keys: keys)
            for channel in channels(app).keys.sorted() where try refresh(app, channel: channel, now: now) {
                refreshed.append(channel == Self.production ? app : app + " (\(channel))")
            }
        }
        return refreshed
    }

    /// Re-signs one channel's release if it needs it (close to expiry, signed by other keys than
    /// those in force, or carrying other roots or statements than it should now); returns whether it did.
    @discardableResult
    func refresh(_ app: String, channel: String, now: Date = WallClock.now()) throws -> Bool {
        guard var live = try current(app, channel: channel) else { return false }
        var relabelled = false
        if live.channel != channel {
            // Signed before manifests named their channel: the same release, signed naming it.
            let version = live.version
            guard let signed = try exclusively({ () throws -> LiveManifest? in
                guard let served = try current(app, channel: channel), served.version == version else { return nil }
                let signed = try signed(served, for: channel, app: app, replacing: served.manifest, now: now)
                remember(signed, app: app, channel: channel)
                return signed
            }) else { return false }
            changed(app)
            (live, relabelled) = (signed, true)
        }
        // Also re-sign when the signing keys changed (a rotation began or a grace period ended),
        // so that builds trusting only the new key can read the live manifest at once.
        // Sent from a file replaced underneath since: read again at the next look, not re-signed.
        guard let envelope = try? live.envelope else {
            dropLive(live, app: app, channel: channel)
            return relabelled
        }
        let signers = Set((try? Envelope.decode(envelope))?.signatures.map(\.keyid) ?? [])
        let inForce = Set(try apps.signingKeys(now: now).map { ManifestSigningKey.keyID(for: $0.publicKey) })
        let stale = live.expiresAt.timeIntervalSince(now) < manifestLifetime / 3 || signers != inForce
        guard try stale || attachmentsChanged(live, app: app, channel: channel) else { return relabelled }
        let version = live.version
        return try publish(app, channel: channel, rolloutChange: .keep, change: { packs in
            try self.current(app, channel: channel)?.version == version ? packs : nil
        }, at: now) != nil
    }

    /// The blobs that releases and drafts still need: every channel's live release, every
    /// release published within `retention`, every draft. Call under ``exclusively(_:)``.
    func neededBlobs(retention: TimeInterval, now: Date) throws -> Set<String> {
        var needed = Set<String>()
        for app in FileSystem.contents(of: folder.apps) where FileSystem.isDirectory(folder.releases(app)) {
            for (channel, version) in channels(app) {
                let serving = try current(app, channel: channel)
                for pack in try serving?.manifest.allEntries ?? [] { needed.formUnion(pack.blobs) }
                // And the release the pointer on disk names (what the channel serves after a
                // restart), should the cached one ever differ from it (read only then: the same
                // release is the copy signed for the channel, less the patches swept before).
                if serving?.version != version, let pointed = try? load(app, version).manifest {
                    for pack in pointed.allEntries { needed.formUnion(pack.blobs) }
                }
            }
            needed.formUnion(try retainedBlobs(app, cutoff: now.addingTimeInterval(-retention)))
            for pack in try staging(app).upserts.values { needed.insert(pack.sha256) }
        }
        return needed
    }

    /// The blobs of `app`'s releases published at or after `cutoff`, and of any release file
    /// above `head` (a publish in progress, another process's): from the sweep's record of the
    /// last pass (``RetainedBlobs``) and the releases made since it, so that a pass reads what
    /// changed, not the retention's releases again. Without a record that still holds (the
    /// first pass, a restore, a longer retention), the releases within the retention are read
    /// (their dates from the kept listings: no file read to learn them) and the record written.
    /// A release file that cannot be read fails the pass, which then removes nothing.
    func retainedBlobs(_ app: String, cutoff: Date) throws -> Set<String> {
        let head = head(app)
        let path = folder.retainedBlobs(app)
        // The release files, by number: listed once (numbers jump by a billion after a restore's
        // floor, so they are never walked one by one).
        let files = Self.versions(in: folder.releases(app))
        var extra = Set<String>()
        var record: RetainedBlobs
        var next: Int
        let kept = RetainedBlobs.read(path).flatMap { kept in
            kept.through <= head && kept.from <= cutoff && digest(app, kept.through) == kept.digest ? kept : nil
        }
        if let kept {
            (record, next) = (kept, kept.through + 1)
        } else {
            record = RetainedBlobs(through: 0, digest: "", from: cutoff, lastUsed: [:])
            let snapshot = try history.snapshot(app)
            for release in snapshot.releases.sorted(by: { $0.version < $1.version }) where release.version <= head && release.publishedAt >= cutoff {
                record.use(try load(app, release.version).manifest, cutoff: cutoff)
            }
            // Any release file the listings lack below their last one (one they could not
            // read): read, and its blobs kept this pass whatever its date. Those above are
            // read below.
            let listed = Set(snapshot.releases.map(\.version))
            next = (listed.max() ?? 0) + 1
            for version in files where version < next && !listed.contains(version) {
                let manifest = try load(app, version).manifest
                record.use(manifest, cutoff: cutoff)
                for pack in manifest.allEntries { extra.formUnion(pack.blobs) }
            }
            record.through = min(next - 1, head)
        }
        // The releases made since, through `head`; then every file above it (a publish in
        // progress, another process's), used this pass only.
        for version in files where version >= next {
            let manifest = try load(app, version).manifest
            if version <= head {
                record.use(manifest, cutoff: cutoff)
                record.through = version
            } else {
                for pack in manifest.allEntries { extra.formUnion(pack.blobs) }
            }
        }
        let uses = record.lastUsed.count
        record.from = cutoff
        record.lastUsed = record.lastUsed.filter { $0.value >= cutoff }
        if kept == nil || record.through != kept?.through || record.lastUsed.count != uses, record.through >= 1, let digest = digest(app, record.through) {
            record.digest = digest
            try? record.write(to: path)
        }
        return extra.union(record.lastUsed.keys)
    }

    /// The SHA-256 of release `version`'s file, or nil when it cannot be read (or is larger than
    /// any envelope the origin writes).
    private func digest(_ app: String, _ version: Int) -> String? {
        ReleaseCatalog.read(folder.release(app, version), limit: 64 << 20).map { Hex.encode(SHA256Hasher.hash($0)) }
    }

    /// Builds every app's ``ReleaseHistory`` snapshot that is not kept (the maintenance thread,
    /// at start-up and after a replica's pull), so that no serving thread reads an app's history.
    func warmHistory() {
        for app in FileSystem.contents(of: folder.apps) where FileSystem.isDirectory(folder.releases(app)) {
            _ = try? history.snapshot(app)
        }
    }

    /// Crash recovery, at start-up: removes release files that a publish wrote but never made
    /// visible (the process died before writing `head`). Their draft is still there to publish.
    func removeUnpublishedReleases() throws {
        for app in FileSystem.contents(of: folder.apps) where FileSystem.isDirectory(folder.releases(app)) {
            let head = head(app)
            for version in Self.versions(in: folder.releases(app)) where version > head {
                FileSystem.remove(folder.release(app, version))
            }
            try FileSystem.syncDirectory(folder.releases(app))
        }
    }
}
