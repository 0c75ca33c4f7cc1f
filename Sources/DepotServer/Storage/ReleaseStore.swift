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

    /// An older (or the live) release by number, or nil if there is none.
    func release(_ app: String, _ version: Int) throws -> LiveManifest? {
        guard FileSystem.exists(folder.release(app, version)) else { return nil }
        return try load(app, version)
    }

    /// Every release of the app, oldest first.
    func list(_ app: String) throws -> [Manifest] {
        let versions = FileSystem.contents(of: folder.releases(app)).compactMap { name -> Int? in
            name.hasSuffix(".json") && !name.hasPrefix(".") ? Int(name.dropLast(5)) : nil
        }
        return try versions.sorted().map { try load(app, $0).manifest }
    }

    /// Publishes the next release: `change` edits the live pack list; returns nil if it changed nothing.
    func publish(_ app: String, change: ([PackEntry]) throws -> [PackEntry]?) throws -> LiveManifest? {
        try publishLock.withLock { _ in
            let base = try current(app)
            guard let packs = try change(base?.manifest.packs ?? []) else { return nil }
            // Versions come from the files, not the pointer, so a release written before a crash
            // (but never made live) is never overwritten: versions only go up.
            let onDisk = FileSystem.contents(of: folder.releases(app)).compactMap { name -> Int? in
                name.hasSuffix(".json") ? Int(name.dropLast(5)) : nil
            }
            let version = max(base?.version ?? 0, onDisk.max() ?? 0) + 1
            let now = Date()
            let manifest = Manifest(
                app: app, version: version, publishedAt: now, expiresAt: now.addingTimeInterval(manifestLifetime), packs: packs
            )
            let envelope = try Envelope.sign(manifest, with: [apps.signingKey()]).encoded()
            try FileSystem.writeAtomically(envelope, to: folder.release(app, version))
            try FileSystem.writeAtomically(Array("\(version)\n".utf8), to: folder.currentPointer(app))
            let published = LiveManifest(
                version: version, envelope: envelope, etag: "\"" + Hex.encode(SHA256Hasher.hash(envelope)) + "\"", manifest: manifest
            )
            live.withLock { $0[app] = published }
            return published
        }
    }
}
