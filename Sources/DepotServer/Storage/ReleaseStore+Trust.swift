import DepotCore
import Foundation

/// Signing a manifest: the one place every release, promotion, rollout step, patch release and
/// re-sign turns a manifest into the envelope a channel serves.
extension ReleaseStore {
    /// What a manifest envelope carries besides the signed manifest (each signed on its own).
    struct Attachments: Equatable {
        /// Every root of the app, oldest first; nil for an app without a root.
        var roots: [Envelope]?
        /// On a protected channel: the statement binding the main packs, then the one binding a rollout's candidate.
        var releases: [Envelope]?
    }

    /// The envelope `channel` serves for `manifest`: signed by the keys in force, carrying the
    /// app's roots and, on a protected channel, the release statements that bind its packs.
    ///
    /// Nothing new reaches a protected channel unsigned: when the main packs differ from those
    /// of `serving` (what the channel serves now; nil for a new channel) in anything a statement
    /// binds, or the manifest starts a rollout, a missing statement refuses it (409
    /// `release_signature_required`). Re-signing what the channel serves (expiry, keys, patches,
    /// rollout steps) attaches what it finds. `release`: the release whose packs these are, when
    /// known (a promotion), named in a refusal.
    func seal(_ manifest: Manifest, app: String, channel: String, replacing serving: Manifest?, release: Int? = nil, now: Date = WallClock.now()) throws -> [UInt8] {
        var envelope = try Envelope.sign(manifest, with: apps.signingKeys(now: now))
        let attached = try attachments(for: manifest, app: app, channel: channel, checkingAgainst: .some(serving), release: release)
        (envelope.roots, envelope.releases) = (attached.roots, attached.releases)
        return envelope.encoded()
    }

    /// What a manifest of `channel` carries now. With `checkingAgainst` (what the channel
    /// serves, possibly nil), refuses what ``seal(_:app:channel:replacing:release:now:)`` refuses.
    func attachments(for manifest: Manifest, app: String, channel: String, checkingAgainst serving: Manifest?? = nil, release: Int? = nil) throws -> Attachments {
        guard let trust = try roots.trust(app) else { return Attachments() }
        let root = trust.newest.document
        guard root.protects(channel) else { return Attachments(roots: trust.envelopes) }
        let main = signedRelease(app, channel: channel, packs: manifest.packs, root: root, agreeingWith: manifest)
        var releases = main.map { [$0.envelope] } ?? []
        if case .some(let serving) = serving, serving.map({ ReleaseStatement.bound($0.packs) }) != ReleaseStatement.bound(manifest.packs) {
            guard let main else { throw Self.signatureRequired(app: app, channel: channel, root: root, release: release) }
            if let serving, let before = signedRelease(app, channel: channel, packs: serving.packs, root: root), main.release < before.release {
                throw DepotError.conflict("release_signature_older", "these packs are bound by release \(main.release)'s statement, and channel \(channel)'s devices accepted release \(before.release)'s: they refuse an older signed release as a replay. Publish the packs on an unprotected channel as a new release, sign it and promote it. Nothing changed")
            }
        }
        if let rollout = manifest.rollout {
            let offered = manifest.choosing(candidate: true).packs
            let candidate = signedRelease(app, channel: channel, packs: offered, root: root, release: rollout.release, agreeingWith: manifest)
            if let candidate, candidate.release != main?.release { releases.append(candidate.envelope) }
            if case .some(let serving) = serving, serving?.rollout?.salt != rollout.salt {
                if candidate == nil, let other = signedRelease(app, channel: channel, packs: offered, root: root, release: rollout.release),
                   let statement = other.envelope.payloadBytes.flatMap({ try? ReleaseStatement.decode($0) }) {
                    throw DepotError.conflict("statement_language_differs", "release \(rollout.release)'s statement binds primary language \(statement.primaryLanguage ?? "none"), and channel \(channel) serves \(manifest.primaryLanguage ?? "none"): devices would refuse the rollout. Change the primary language in a release of its own (promote it whole). Nothing changed")
                }
                guard candidate != nil else {
                    throw DepotError.conflict("release_signature_required", "channel \(channel) of app \(app) is protected (root version \(root.version)): a rollout's candidate must be signed too, and no statement of release \(rollout.release) binds its packs as the rollout offers them. Sign it and start: depot rollout start --server ORIGIN --app \(app) --channel \(channel) --release \(rollout.release) --fraction F --sign RELEASE-KEY.json. Nothing changed")
                }
                guard rollout.release > main?.release ?? 0 else {
                    throw DepotError.conflict("release_signature_older", "the rollout's candidate, release \(rollout.release), is not later than release \(main?.release ?? 0), whose statement binds the packs channel \(channel) serves: devices refuse it. Nothing changed")
                }
            }
        }
        return Attachments(roots: trust.envelopes, releases: releases.isEmpty ? nil : releases)
    }

    /// The statement of `channel` with the highest release (or of `release`) that binds exactly
    /// `packs` and verifies against `root`; with `agreeingWith`, one whose primary language (if
    /// it binds one) is that manifest's.
    func signedRelease(
        _ app: String, channel: String, packs: [PackEntry], root: RootDocument, release: Int? = nil, agreeingWith manifest: Manifest? = nil
    ) -> (release: Int, envelope: Envelope)? {
        roots.statements(app, channel: channel, binding: packs).first { found in
            guard release == nil || found.release == release, let statement = try? ReleaseStatement.verified(found.envelope, root: root) else { return false }
            return statement.channel == channel && statement.release == found.release && manifest.map(statement.agreesOnLanguage) != false
        }
    }

    /// On a protected channel, the primary language the newest statement binding `packs` (of
    /// `release`, when given) binds:
    /// what the manifest carries, whatever the app's setting says now (a change of it reaches a
    /// protected channel with the next signed release, never through a re-sign).
    func boundLanguage(_ app: String, channel: String, packs: [PackEntry], release: Int? = nil) throws -> String? {
        guard let trust = try roots.trust(app), trust.newest.document.protects(channel),
              let found = signedRelease(app, channel: channel, packs: packs, root: trust.newest.document, release: release),
              let payload = found.envelope.payloadBytes else { return nil }
        return try? ReleaseStatement.decode(payload).primaryLanguage
    }

    static func signatureRequired(app: String, channel: String, root: RootDocument, release: Int?) -> DepotError {
        let how = release.map { "Sign it and promote it: depot channels promote --server ORIGIN --app \(app) --channel \(channel) --release \($0) --sign RELEASE-KEY.json" }
            ?? "Publish them on an unprotected channel (--channel beta), then sign that release and promote it: depot channels promote --server ORIGIN --app \(app) --channel \(channel) --release N --sign RELEASE-KEY.json"
        return DepotError.conflict("release_signature_required", "channel \(channel) of app \(app) is protected (root version \(root.version)): its devices install only packs that \(root.releaseThreshold) of the app's release keys signed for it, and no statement binds \(release.map { "release \($0)'s packs" } ?? "these packs"). \(how). Nothing changed")
    }

    /// Whether the live envelope's attachments are not what the channel should carry now (a root
    /// added, a statement accepted for what it serves): the refresh signs it again.
    func attachmentsChanged(_ live: LiveManifest, app: String, channel: String) throws -> Bool {
        let envelope = try Envelope.decode(live.envelope)
        let now = Attachments(roots: envelope.roots, releases: envelope.releases)
        guard try roots.trust(app) != nil || now != Attachments() else { return false }
        return try attachments(for: live.manifest, app: app, channel: channel) != now
    }

    /// Records every app's roots and the signing keys as seen now, before the start-up pass: a
    /// change made while that pass runs (minutes on an origin with years of releases) or within
    /// its first second is then seen by the next ``refreshChangedTrust()``, not at the next pass.
    func lookAtTrust() {
        let keys = roots.signingKeysStamp
        for app in FileSystem.contents(of: folder.apps) { _ = roots.changedSinceLastLook(app, keys: keys) }
    }

    /// Signs again, at once, the live manifests of apps whose roots or signing keys changed
    /// since the last look (`depot root add`, `depot keys rotate-signing` beside the running
    /// origin): called every second between maintenance passes. Returns what it re-signed.
    func refreshChangedTrust() throws -> [String] {
        var refreshed: [String] = []
        let keys = roots.signingKeysStamp
        for app in FileSystem.contents(of: folder.apps) where roots.changedSinceLastLook(app, keys: keys) && FileSystem.isDirectory(folder.releases(app)) {
            for channel in channels(app).keys.sorted() where try refresh(app, channel: channel) {
                refreshed.append(channel == Self.production ? app : app + " (\(channel))")
            }
        }
        return refreshed
    }

    /// Accepts a release statement for `channel` (``RootStore/accept(_:app:channel:manifestOf:)``);
    /// when it binds what the channel serves (a release signed after it went live: a root added
    /// over it), the live manifest carries it at once.
    func acceptStatement(_ body: [UInt8], app: String, channel: String) throws -> RootStore.AcceptedStatement {
        let accepted = try roots.accept(body, app: app, channel: channel) { try release(app, $0)?.manifest }
        if let live = try current(app, channel: channel), let signed = try release(app, accepted.release)?.manifest.packs,
           ReleaseStatement.bound(signed) == ReleaseStatement.bound(try live.manifest.packs) {
            try refresh(app, channel: channel)
        }
        return accepted
    }
}
