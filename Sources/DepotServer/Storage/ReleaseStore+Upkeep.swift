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
                for pack in try current(app, channel: channel)?.manifest.allEntries ?? [] { needed.formUnion(pack.blobs) }
                // And the release the pointer on disk names (what the channel serves after a
                // restart), should the cached one ever differ from it.
                if let pointed = try? load(app, version).manifest { for pack in pointed.allEntries { needed.formUnion(pack.blobs) } }
            }
            // Releases published within the retention (their dates from the kept listings: no
            // file read to learn them), and any file above the last listed one (written by
            // another process meanwhile): a pass reads what the retention keeps, not the history.
            let snapshot = try history.snapshot(app)
            let cutoff = now.addingTimeInterval(-retention)
            var recent = snapshot.releases.filter { $0.publishedAt >= cutoff }.map(\.version)
            // Any release file the listings lack (one they could not read, one written since) is
            // read here: a file that cannot be read fails the pass, which then removes nothing.
            let listed = Set(snapshot.releases.map(\.version))
            recent += Self.versions(in: folder.releases(app)).filter { !listed.contains($0) }
            for version in recent {
                let manifest = try load(app, version).manifest
                if manifest.publishedAt >= cutoff || !listed.contains(version) { for pack in manifest.allEntries { needed.formUnion(pack.blobs) } }
            }
            for pack in try staging(app).upserts.values { needed.insert(pack.sha256) }
        }
        return needed
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
