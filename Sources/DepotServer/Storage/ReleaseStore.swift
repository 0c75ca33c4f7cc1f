import DepotCore
import Foundation
import Synchronization

/// A live release as served: the envelope's bytes and its ETag.
struct LiveManifest: Sendable {
    let version: Int
    let envelope: [UInt8]
    let etag: String
    let manifest: Manifest
}

/// Signed releases per app: `releases/NNNNNN.json` (immutable) and `current` (the live number).
///
/// Publishing is serialised by one lock; a release becomes live by one atomic rename of
/// `current`, after its envelope is durable. Live envelopes are cached in memory.
public final class ReleaseStore: Sendable {
    let folder: DataFolder
    let apps: AppStore
    private let publishLock = Mutex(())
    private let live = Mutex<[String: LiveManifest]>([:])
    /// How long a signed manifest stays valid.
    let manifestLifetime: TimeInterval

    init(folder: DataFolder, apps: AppStore, manifestLifetime: TimeInterval) {
        self.folder = folder
        self.apps = apps
        self.manifestLifetime = manifestLifetime
    }

    /// The live release of an app, or nil before its first release.
    func current(_ app: String) throws -> LiveManifest? {
        if let cached = live.withLock({ $0[app] }) { return cached }
        guard let text = try? FileSystem.readFile(folder.currentPointer(app)),
              let version = Int(String(decoding: text, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) else {
            return nil
        }
        let loaded = try load(app, version)
        live.withLock { $0[app] = loaded }
        return loaded
    }

    private func load(_ app: String, _ version: Int) throws -> LiveManifest {
        let bytes = try FileSystem.readFile(folder.release(app, version))
        let envelope = try Envelope.decode(bytes)
        guard let payload = Data(base64Encoded: envelope.payload) else { throw EnvelopeError.malformed }
        let manifest = try Manifest.decode(Array(payload))
        return LiveManifest(version: version, envelope: bytes, etag: "\"" + Hex.encode(SHA256Hasher.hash(bytes)) + "\"", manifest: manifest)
    }

    /// An older (or the live) release by number, or nil if there is none. A release exists only
    /// once `current` has named it: a file above the live number is a publish still in progress.
    func release(_ app: String, _ version: Int) throws -> LiveManifest? {
        guard let live = try current(app), version <= live.version, FileSystem.exists(folder.release(app, version)) else { return nil }
        return try load(app, version)
    }

    /// Every release of the app, oldest first.
    func list(_ app: String) throws -> [Manifest] {
        guard let live = try current(app) else { return [] }
        return try Self.versions(in: folder.releases(app)).filter { $0 <= live.version }.map { try load(app, $0).manifest }
    }

    static func versions(in folder: String) -> [Int] {
        FileSystem.contents(of: folder).compactMap { name -> Int? in
            name.hasSuffix(".json") && !name.hasPrefix(".") ? Int(name.dropLast(5)) : nil
        }.sorted()
    }

    /// Re-signs live manifests that are close to expiry (less than a third of the lifetime left)
    /// or signed by other keys than those in force: the same packs are published as the next
    /// version, so a quiet app never leaves devices with an expired (refused) manifest, and a key
    /// rotation reaches the live manifest without a publish. Returns the apps refreshed.
    @discardableResult
    func refreshExpiring(now: Date = Date()) throws -> [String] {
        var refreshed: [String] = []
        for app in FileSystem.contents(of: folder.apps) where FileSystem.isDirectory(folder.releases(app)) {
            guard let live = try current(app) else { continue }
            // Also re-sign when the signing keys changed (a rotation began or a grace period ended),
            // so that builds trusting only the new key can read the live manifest at once.
            let signers = Set((try? Envelope.decode(live.envelope))?.signatures.map(\.keyid) ?? [])
            let inForce = Set(try apps.signingKeys(now: now).map { ManifestSigningKey.keyID(for: $0.publicKey) })
            guard live.manifest.expiresAt.timeIntervalSince(now) < manifestLifetime / 3 || signers != inForce else { continue }
            let version = live.version
            if try publish(app, change: { packs in try self.current(app)?.version == version ? packs : nil }) != nil {
                refreshed.append(app)
            }
        }
        return refreshed
    }

    /// Removes blobs that nothing needs any more: not in any app's live release, not in a release
    /// published within `retention`, not in a draft, and older than `grace` (a blob is committed a
    /// moment before it is staged). Runs under the publish lock, so no publish or rollback can
    /// pick a blob up while it goes. Returns the blobs removed (or, with `dryRun`, that would be).
    @discardableResult
    func collectGarbage(retention: TimeInterval, grace: TimeInterval, now: Date = Date(), dryRun: Bool = false) throws -> (blobs: [String], bytes: Int64) {
        try publishLock.withLock { _ in
            var needed = Set<String>()
            for app in FileSystem.contents(of: folder.apps) where FileSystem.isDirectory(folder.releases(app)) {
                let live = try current(app)
                for pack in live?.manifest.packs ?? [] { needed.insert(pack.sha256) }
                for version in Self.versions(in: folder.releases(app)) {
                    let manifest = try load(app, version).manifest
                    if manifest.publishedAt >= now.addingTimeInterval(-retention) { for pack in manifest.packs { needed.insert(pack.sha256) } }
                }
                for pack in try staging(app).upserts.values { needed.insert(pack.sha256) }
            }
            var removed: [String] = []
            var bytes: Int64 = 0
            for prefix in FileSystem.contents(of: folder.blobs) {
                for name in FileSystem.contents(of: folder.blobs + "/" + prefix) where Hex.isSHA256(name) && !needed.contains(name) {
                    let path = folder.blob(name)
                    guard let file = try? FileDescriptor.openForReading(path), let (size, modified) = try? file.sizeAndModification(),
                          modified < now.addingTimeInterval(-grace) else { continue }
                    if !dryRun { FileSystem.remove(path) }
                    removed.append(name)
                    bytes += size
                }
            }
            return (removed, bytes)
        }
    }

    /// Crash recovery, at start-up: removes release files that a publish wrote but never made
    /// live (the process died before renaming `current`). Their draft is still there to publish.
    func removeUnpublishedReleases() throws {
        for app in FileSystem.contents(of: folder.apps) where FileSystem.isDirectory(folder.releases(app)) {
            let live = try current(app)?.version ?? 0
            for version in Self.versions(in: folder.releases(app)) where version > live {
                FileSystem.remove(folder.release(app, version))
            }
            try FileSystem.syncDirectory(folder.releases(app))
        }
    }

    /// The staged changes of an app.
    func staging(_ app: String) throws -> Staging {
        guard FileSystem.exists(folder.staging(app)) else { return Staging() }
        return try StoredJSON.read(Staging.self, from: folder.staging(app))
    }

    /// Changes the staged draft, under the publish lock; returns the live packs it was staged against.
    @discardableResult
    func stage(_ app: String, _ change: (inout Staging, [PackEntry]) throws -> Void) throws -> [PackEntry] {
        try publishLock.withLock { _ in
            var staging = try self.staging(app)
            let live = try current(app)?.manifest.packs ?? []
            try change(&staging, live)
            try saveStaging(app, staging)
            return live
        }
    }

    private func saveStaging(_ app: String, _ staging: Staging) throws {
        if staging.isEmpty {
            FileSystem.remove(folder.staging(app))
            try FileSystem.syncDirectory(folder.app(app))
        } else {
            try StoredJSON.write(staging, to: folder.staging(app))
        }
    }

    /// Publishes the staged changes as the next release and empties the draft. `base`, when
    /// given, must be the live version: a publisher that raced another gets ``DepotError`` 409.
    /// Returns the new release and the blobs that ended up unused, or nil if nothing changed.
    /// `adding` changes the draft first, in the same lock hold: an upload with `?release=true`
    /// is staged and published in one step, or (on a conflict) not staged at all.
    func publishStaged(
        _ app: String, base: Int?, adding: ((inout Staging, [PackEntry]) throws -> Void)? = nil,
        check: ((Manifest, Int64) throws -> Void)? = nil
    ) throws -> (release: LiveManifest?, unusedBlobs: [String]) {
        var unused: [String] = []
        let release = try publish(app, base: base, change: { live in
            var staging = try self.staging(app)
            try adding?(&staging, live)
            guard !staging.isEmpty else { throw DepotError(409, "nothing_staged", "nothing is staged for app \(app)") }
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

    /// Publishes the next release: `change` edits the live pack list; returns nil if it changed nothing.
    /// With `base`, the live version must equal it (409 otherwise), checked under the lock.
    /// `check` sees the signed manifest and its envelope size before anything is written, and
    /// may refuse it (the allowance guard).
    func publish(
        _ app: String, base expected: Int? = nil, change: ([PackEntry]) throws -> [PackEntry]?,
        check: ((Manifest, Int64) throws -> Void)? = nil, then: (() throws -> Void)? = nil
    ) throws -> LiveManifest? {
        try publishLock.withLock { _ in
            let base = try current(app)
            if let expected, expected != (base?.version ?? 0) {
                throw DepotError(409, "conflict", "the live release is \(base?.version ?? 0), not \(expected): another publish came first; nothing was published")
            }
            guard let packs = try change(base?.manifest.packs ?? []) else {
                try then?()
                return nil
            }
            // Start-up removed any release a crash left unpublished, so the next number is free;
            // the files still count, so that a number is never written twice.
            let version = max(base?.version ?? 0, Self.versions(in: folder.releases(app)).last ?? 0) + 1
            let now = Date()
            let manifest = Manifest(
                app: app, version: version, publishedAt: now, expiresAt: now.addingTimeInterval(manifestLifetime), packs: packs
            )
            let envelope = try Envelope.sign(manifest, with: apps.signingKeys()).encoded()
            try check?(manifest, Int64(envelope.count))
            try FileSystem.writeAtomically(envelope, to: folder.release(app, version))
            try FileSystem.writeAtomically(Array("\(version)\n".utf8), to: folder.currentPointer(app))
            let published = LiveManifest(
                version: version, envelope: envelope, etag: "\"" + Hex.encode(SHA256Hasher.hash(envelope)) + "\"", manifest: manifest
            )
            live.withLock { $0[app] = published }
            try then?()
            return published
        }
    }
}
