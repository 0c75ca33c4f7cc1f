import DepotCore
import Foundation

/// Moving a channel to an existing release, and removing a channel.
extension ReleaseStore {
    /// Points `channel` at an existing release (creating the channel). Channels only move to a
    /// higher number: going back is a rollback, which publishes a new release. `check` sees
    /// the release first (the allowance guard). Returns whether the channel moved.
    ///
    /// A release numbered below the one the channel serves, whose content is nonetheless ahead of
    /// it (every pack the channel serves, the same container or a later revision: the origin
    /// re-signed the channel's older content — its expiry, `depot root add`, a key rotation —
    /// after the release was published on beta), is published anew for the channel with exactly
    /// its packs: devices see the version rise, and a release statement binding those packs still
    /// binds them.
    ///
    /// `isStored` says which blobs may still be stored (false only when known to be gone): a patch whose blob garbage collection swept
    /// (its release served by no channel for longer than the retention) is left out of the copy
    /// signed for `channel`, never served as a URL that answers 404; the patch maker then makes
    /// it again for this channel.
    func promote(
        _ app: String, channel: String, to version: Int, isStored: (String) -> Bool = { _ in true }, check: ((Manifest, Int64) throws -> Void)?
    ) throws -> Bool {
        /// What the promotion does: nothing, the pointer moved, or a release to publish anew over `over`.
        enum Move {
            case unchanged, moved
            case republish(packs: [PackEntry], over: Int)
        }
        let move = try publishLock.withLock { _ -> Move in
            guard version <= head(app), FileSystem.exists(folder.release(app, version)) else {
                throw DepotError.notFound("release \(version) of app \(app)")
            }
            let serving = try current(app, channel: channel)
            let now = serving?.version
            if now == version { return .unchanged }
            if let rollout = serving?.rollout, rollout.fraction > 0 { throw Self.rolloutRunning(rollout, channel: channel) }
            let release = try load(app, version)
            let manifest = try release.manifest
            var packs = manifest.packs
            var swept = false
            for index in packs.indices {
                guard let patches = packs[index].patches else { continue }
                let kept = patches.filter { isStored($0.sha256) }
                guard kept.count != patches.count else { continue }
                packs[index].patches = kept.isEmpty ? nil : kept
                swept = true
            }
            if let now, let serving, now > version {
                // A later release with the same content (the origin re-signed it, named patches):
                // the channel serves release `version` already, as far as devices can tell.
                if Self.sameContent(manifest.packs, try serving.manifest.packs) { return .unchanged }
                guard try resigned(serving.manifest.packs, now: now, before: version, app: app, channel: channel, ahead: manifest.packs) else {
                    throw DepotError.conflict("channel_backwards", "channel \(channel) serves release \(now); it only moves forward. To go back, roll back (a new release with release \(version)'s packs)")
                }
                return .republish(packs: packs, over: now)
            }
            try checkRoom(for: channel, app: app)
            // Checked as the channel will serve it: without the release's rollout.
            var target = manifest
            target.rollout = nil
            try check?(target, Int64(release.size))
            // Signed for the channel it now serves: devices check the channel a manifest names.
            let served = try signed(release, for: channel, app: app, replacing: serving?.manifest, packs: swept ? packs : nil, withoutRollout: true)
            try FileSystem.createDirectory(folder.channels(app))
            try FileSystem.writeAtomically(Array("\(version)\n".utf8), to: pointerPath(app, channel))
            history.record(app, channel: channel, version: version)
            live.withLock { $0[app + "\u{0}" + channel] = served }
            return .moved
        }
        switch move {
        case .unchanged:
            return false
        case .moved:
            // An old release may be close to expiry, or signed by a retired key.
            try refresh(app, channel: channel)
            changed(app)
            return true
        case .republish(let packs, let over):
            // `base`: another change of the channel meanwhile (other than a re-sign) refuses it.
            return try publish(
                app, channel: channel, base: over, rolloutChange: .content, change: { _ in packs }, keepingRevisions: true, statementOf: version, check: check
            ) != nil
        }
    }

    /// Whether what the channel serves (`serving`, release `now`) is content the channel had
    /// before release `version` was published, signed again since (expiry, a root added, keys
    /// rotated), and `target` (that release's packs) is ahead of it. The releases published for
    /// the channel below `now` (among the 256 releases below it), newest first, must all hold
    /// exactly `serving`'s packs down to one at or below `version`: a change since — a pack
    /// removed, a rollback, a pack's tags — is a release of other content, and refuses it. A
    /// release of another channel at or below `version` holding exactly `serving`'s packs agrees
    /// too (the channel was promoted to it, or to content as old); other channels' releases are
    /// passed over.
    /// `target` holds every served pack, the same or a later revision, each changed one at least
    /// a restored folder's floor (``ReleaseFloor``); and no statement of the channel names a
    /// release above `version` (devices that recorded one refuse a lower one).
    func resigned(_ serving: [PackEntry], now: Int, before version: Int, app: String, channel: String, ahead target: [PackEntry]) throws -> Bool {
        guard Self.ahead(target, of: serving) else { return false }
        let floor = ReleaseFloor.read(folder) ?? 0
        let before = Set(serving.map { "\($0.id) \($0.sha256)" })
        guard target.allSatisfy({ before.contains("\($0.id) \($0.sha256)") || $0.revision >= floor }) else { return false }
        if let signed = roots.highestStatementRelease(app, channel: channel), signed > version { return false }
        for earlier in stride(from: now - 1, through: max(1, now - 256), by: -1) where FileSystem.exists(folder.release(app, earlier)) {
            let manifest = try load(app, earlier).manifest
            guard (manifest.channel ?? Self.production) == channel else {
                // Another channel's release with exactly this content, at or below `version`: the
                // channel was promoted to it, or to content as old (a promotion moves the pointer,
                // the release keeps its label). Above `version` it may be another channel's own
                // re-sign of the same content (`depot root add` re-signs every channel): on.
                if earlier <= version, Self.sameContent(manifest.packs, serving) { return true }
                continue
            }
            guard Self.sameContent(manifest.packs, serving) else { return false }
            if earlier <= version { return true }
        }
        return false
    }

    /// Whether `target` holds every pack of `serving`, each with the same container or a later
    /// revision (new content always gets a revision above any the pack had): content published
    /// after what the channel serves, whatever number a re-sign gave that.
    static func ahead(_ target: [PackEntry], of serving: [PackEntry]) -> Bool {
        let next = Dictionary(target.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        return serving.allSatisfy { pack in
            guard let after = next[pack.id] else { return false }
            return after.sha256 == pack.sha256 ? after.revision == pack.revision : after.revision > pack.revision
        }
    }

    /// Removes a channel other than production; its manifest URL then answers 404.
    func removeChannel(_ app: String, channel: String) throws {
        try publishLock.withLock { _ in
            guard channel != Self.production else { throw DepotError.conflict("production_channel", "the production channel cannot be removed") }
            guard FileSystem.exists(pointerPath(app, channel)) else { throw DepotError.notFound("channel \(channel) of app \(app)") }
            if let rollout = try current(app, channel: channel)?.rollout, rollout.fraction > 0 { throw Self.rolloutRunning(rollout, channel: channel) }
            FileSystem.remove(pointerPath(app, channel))
            try FileSystem.syncDirectory(folder.channels(app))
            history.record(app, channel: channel, version: nil)
            live.withLock { $0[app + "\u{0}" + channel] = nil }
        }
        changed(app)
    }
}

/// A release signed again for a channel it is promoted to.
extension ReleaseStore {
    /// `release` as `channel` serves it: itself when it was signed for that channel; otherwise
    /// the same packs and version signed again naming `channel`, written before any pointer names
    /// it (a promotion; or, once, a release signed before manifests named their channel). Call
    /// under the publish lock.
    /// `packs`, when given, replace the release's (its packs without swept patches).
    /// `withoutRollout`: the copy leaves out the release's rollout (a rollout step promoted to
    /// another channel: that channel gets the packs every device of the first one had).
    /// `replacing`: what the channel serves now (``seal(_:app:channel:replacing:release:now:)``).
    func signed(
        _ release: LiveManifest, for channel: String, app: String, replacing serving: Manifest?, packs: [PackEntry]? = nil, withoutRollout: Bool = false, now: Date = WallClock.now()
    ) throws -> LiveManifest {
        // An app with a root signs the copy anew: its roots and statements are the channel's.
        let changed = release.channel != channel || packs != nil || withoutRollout && release.rollout != nil
        guard try changed || roots.trust(app) != nil else { return release }
        var manifest = try release.manifest
        manifest.channel = channel
        if let packs { manifest.packs = packs }
        if withoutRollout { manifest.rollout = nil }
        manifest.expiresAt = now.addingTimeInterval(manifestLifetime)
        let envelope = try seal(manifest, app: app, channel: channel, replacing: serving, release: release.version, now: now)
        try FileSystem.createDirectory(folder.signedCopies(app, channel: channel))
        try FileSystem.writeAtomically(envelope, to: signedCopyPath(app, channel: channel, release.version))
        return LiveManifest(
            version: release.version, envelope: envelope, etag: "\"" + Hex.encode(SHA256Hasher.hash(envelope)) + "\"", manifest: manifest,
            path: signedCopyPath(app, channel: channel, release.version)
        )
    }
}
