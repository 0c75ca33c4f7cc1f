import DepotCore
import DepotHTTP
import Foundation
import Synchronization

/// A live release as served: the envelope's bytes (held once, in the memory responses are sent
/// from), its ETag and the few facts the routes read per request. The decoded manifest is not
/// kept: a channel's live release costs its bytes, not the several times as much its decoded
/// packs take (300 channels each serving a 3,500-pack release kept ~1.5 GB decoded); the paths
/// that need the packs (a publish, the Info.plist keys once per release, a report's listing once
/// per release, the hourly sweep) decode them again.
struct LiveManifest: Sendable {
    let version: Int
    /// The envelope as every response sends it.
    let body: SharedBytes
    let etag: String
    let publishedAt: Date
    let expiresAt: Date
    /// The channel the manifest names (nil: signed before manifests named one).
    let channel: String?
    let rollout: Rollout?
    /// Its packs and its rollout's candidates.
    let entryCount: Int

    init(version: Int, envelope: [UInt8], etag: String, manifest: Manifest) {
        (self.version, body, self.etag) = (version, SharedBytes(envelope), etag)
        (publishedAt, expiresAt, channel, rollout) = (manifest.publishedAt, manifest.expiresAt, manifest.channel, manifest.rollout)
        entryCount = manifest.allEntries.count
        DecodedManifests.shared.keep(manifest, etag: etag)
    }

    /// A copy of the envelope's bytes.
    var envelope: [UInt8] { body.bytes }

    /// The manifest, decoded from the envelope again (the last few decoded are kept: a publisher
    /// staging packs one by one decodes the live manifest once, not once per pack).
    var manifest: Manifest {
        get throws {
            if let kept = DecodedManifests.shared.kept(etag) { return kept }
            let decoded = try ReleaseStore.decodeManifest(body.bytes)
            DecodedManifests.shared.keep(decoded, etag: etag)
            return decoded
        }
    }
}

/// The last few live manifests decoded, by ETag (a handful: their memory is what keeping every
/// channel's decoded manifest cost).
final class DecodedManifests: Sendable {
    static let shared = DecodedManifests()
    static let limit = 2
    private let recent = Mutex<[(etag: String, manifest: Manifest)]>([])

    func kept(_ etag: String) -> Manifest? {
        recent.withLock { recent in recent.first { $0.etag == etag }?.manifest }
    }

    func keep(_ manifest: Manifest, etag: String) {
        recent.withLock { recent in
            recent.removeAll { $0.etag == etag }
            recent.insert((etag, manifest), at: 0)
            if recent.count > Self.limit { recent.removeLast() }
        }
    }
}
