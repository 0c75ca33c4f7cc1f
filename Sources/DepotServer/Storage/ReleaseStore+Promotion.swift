import DepotCore
import Foundation

/// Moving a channel to an existing release, and removing a channel.
extension ReleaseStore {
    /// Points `channel` at an existing release (creating the channel). Channels only move to a
    /// higher number: going back is a rollback, which publishes a new release. `check` sees
    /// the release first (the allowance guard). Returns whether the pointer moved.
    ///
    /// `isStored` says which blobs may still be stored (false only when known to be gone): a patch whose blob garbage collection swept
    /// (its release served by no channel for longer than the retention) is left out of the copy
    /// signed for `channel`, never served as a URL that answers 404; the patch maker then makes
    /// it again for this channel.
    func promote(
        _ app: String, channel: String, to version: Int, isStored: (String) -> Bool = { _ in true }, check: ((Manifest, Int64) throws -> Void)?
    ) throws -> Bool {
        let moved = try publishLock.withLock { _ -> Bool in
            guard version <= head(app), FileSystem.exists(folder.release(app, version)) else {
                throw DepotError.notFound("release \(version) of app \(app)")
            }
            let serving = try current(app, channel: channel)
            let now = serving?.version
            if now == version { return false }
            if let rollout = serving?.rollout, rollout.fraction > 0 { throw Self.rolloutRunning(rollout, channel: channel) }
            if let now, now > version {
                // A later release with the same content (the origin re-signed it, named patches):
                // the channel serves release `version` already, as far as devices can tell.
                if let serving, Self.sameContent(try load(app, version).manifest.packs, try serving.manifest.packs) { return false }
                throw DepotError.conflict("channel_backwards", "channel \(channel) serves release \(now); it only moves forward. To go back, roll back (a new release with release \(version)'s packs)")
            }
            try checkRoom(for: channel, app: app)
            let release = try load(app, version)
            // Checked as the channel will serve it: without the release's rollout.
            let manifest = try release.manifest
            var target = manifest
            target.rollout = nil
            try check?(target, Int64(release.body.count))
            var packs = manifest.packs
            var swept = false
            for index in packs.indices {
                guard let patches = packs[index].patches else { continue }
                let kept = patches.filter { isStored($0.sha256) }
                guard kept.count != patches.count else { continue }
                packs[index].patches = kept.isEmpty ? nil : kept
                swept = true
            }
            // Signed for the channel it now serves: devices check the channel a manifest names.
            let served = try signed(release, for: channel, app: app, replacing: serving?.manifest, packs: swept ? packs : nil, withoutRollout: true)
            try FileSystem.createDirectory(folder.channels(app))
            try FileSystem.writeAtomically(Array("\(version)\n".utf8), to: pointerPath(app, channel))
            history.record(app, channel: channel, version: version)
            live.withLock { $0[app + "\u{0}" + channel] = served }
            return true
        }
        // An old release may be close to expiry, or signed by a retired key.
        if moved {
            try refresh(app, channel: channel)
            changed(app)
        }
        return moved
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
