import Foundation

/// What a device with a root of trust remembers between syncs: the newest root it accepted, and
/// per protected channel the highest signed release it accepted (kept in its state beside the
/// channels' version floors).
public struct TrustRecord: Codable, Hashable, Sendable {
    /// The newest root version accepted, and the SHA-256 of its signed bytes.
    public var rootVersion: Int
    public var rootSHA256: String
    /// Per protected channel, the highest release statement accepted.
    public var releaseFloors: [String: Int]
    /// The newest root itself, as signed (recorded since issue 61; nil in older states): the next
    /// sync walks on from it, TUF's rule, so that a second valid document of an old version (a
    /// `depot root sign` run twice) cannot fork the device.
    public var rootEnvelope: Envelope?
    /// Per protected channel, the packs' digest (``ReleaseStatement/packsSHA256``) of the release
    /// at its floor: a statement of that same number binding other packs is refused (nil in states
    /// recorded before issue 61, and for floors exported with a build).
    public var releaseDigests: [String: String]?
    /// Per protected channel, the newest rollout candidate (its release) this device chose: a
    /// rollout offering an older one is not taken again (the device follows the current packs),
    /// so the online key alone cannot move it to a candidate older than one it chose. A halt
    /// (the current packs, no rollout) is still the online key's: it is how a rollout stops.
    public var candidates: [String: Int]?

    public init(rootVersion: Int, rootSHA256: String, releaseFloors: [String: Int] = [:], rootEnvelope: Envelope? = nil) {
        (self.rootVersion, self.rootSHA256, self.releaseFloors, self.rootEnvelope) = (rootVersion, rootSHA256, releaseFloors, rootEnvelope)
    }
}

/// A manifest verified under a root of trust, with what accepting it records.
public struct TrustedManifest: Sendable {
    public var manifest: Manifest
    /// The newest root the envelope's chain reached.
    public var root: TrustedRoot
    /// On a protected channel, the release statement binding the manifest's packs.
    public var signedRelease: Int?
    /// That statement's digest of the packs (``ReleaseStatement/packsSHA256``).
    public var signedPacksSHA256: String?
}

/// How a device with a root of trust verifies a manifest envelope (<doc:RootOfTrust>): walk the
/// root chain from the pinned root (or the newest one recorded), check the newest has not expired,
/// check the manifest's signature by one of its online keys, and on a protected channel check the
/// packs against release statements signed by the release keys.
public enum ManifestTrust {
    /// Verifies envelope `bytes` (in memory).
    public static func verify(envelope bytes: [UInt8], pinned: Envelope, record: TrustRecord?, app: String, channel: String, now: Date) throws -> TrustedManifest {
        var reached: TrustedRoot?
        let (manifest, attachments) = try Envelope.verifiedManifest(envelope: bytes) { attachments in
            let root = try newestRoot(pinned: pinned, chain: attachments.roots, record: record, app: app, now: now)
            reached = root
            return try root.document.onlinePublicKeys()
        }
        return try bind(manifest, root: reached!, attachments: attachments, channel: channel)
    }

    /// Verifies the envelope in the file at `path` (at most `limit` bytes), in about its size in memory.
    public static func verify(file path: String, limit: Int, pinned: Envelope, record: TrustRecord?, app: String, channel: String, now: Date) throws -> TrustedManifest {
        var reached: TrustedRoot?
        let (manifest, attachments) = try Envelope.verifiedManifest(file: path, limit: limit) { attachments in
            let root = try newestRoot(pinned: pinned, chain: attachments.roots, record: record, app: app, now: now)
            reached = root
            return try root.document.onlinePublicKeys()
        }
        return try bind(manifest, root: reached!, attachments: attachments, channel: channel)
    }

    /// The newest root the chain reaches from the pinned one (or the recorded one), not expired.
    public static func newestRoot(pinned: Envelope, chain: [Envelope], record: TrustRecord?, app: String, now: Date) throws(TrustError) -> TrustedRoot {
        var start = try RootChain.selfSigned(pinned, app: app)
        // A build shipped with a newer root than the device recorded starts from it. Otherwise the
        // walk starts from the recorded root itself when the state holds it (TUF: the next version
        // is checked by the keys of the one the device holds, so a second document of a version it
        // passed, or of its own, is never read), else it must pass through the recorded root.
        var mustInclude = record.flatMap { $0.rootVersion >= start.document.version ? ($0.rootVersion, $0.rootSHA256) : nil }
        // (A kept root that does not verify, or is not the recorded version and SHA-256, is not used:
        // the walk must then pass through the recorded root, as for a state that kept none.)
        if let record, record.rootVersion >= start.document.version, let held = record.rootEnvelope,
           let recorded = try? RootChain.selfSigned(held, app: app), recorded.document.version == record.rootVersion, recorded.payloadSHA256 == record.rootSHA256 {
            (start, mustInclude) = (recorded, nil)
        }
        let newest = try RootChain.walk(from: start, through: chain, mustInclude: mustInclude)
        guard newest.document.expiresAt > now else {
            throw TrustError("app \(app)'s root of trust (version \(newest.document.version)) expired at \(ISO8601DateFormatter().string(from: newest.document.expiresAt)): the operator signs the next version (depot root sign) and adds it to the origin (depot root add); until then this device keeps its content")
        }
        return newest
    }

    private static func bind(_ manifest: Manifest, root: TrustedRoot, attachments: Envelope.Attachments, channel: String) throws -> TrustedManifest {
        guard root.document.protects(channel) else { return TrustedManifest(manifest: manifest, root: root, signedRelease: nil) }
        let statement = try ReleaseBinding.binding(manifest, statements: attachments.releases, root: root.document, channel: channel)
        return TrustedManifest(manifest: manifest, root: root, signedRelease: statement.release, signedPacksSHA256: statement.packsSHA256)
    }

    /// Why accepting `verified` would go back, or nil: a root older than the one recorded, a
    /// signed release older than the channel's, or a version below the channel's floor that no
    /// newer signed release lifts (one signed by the release keys ends a floor the holder of an
    /// online key pushed up).
    public static func refusal(_ verified: TrustedManifest, versionFloor: Int, record: TrustRecord?, channel: String) -> String? {
        if let record {
            if verified.root.document.version < record.rootVersion {
                return "root version \(verified.root.document.version) is older than version \(record.rootVersion), which this device trusts"
            }
            // The walk must have passed through the very root recorded (recorded by another
            // process since this one read the state, it may be a version the walk went through).
            if let passed = verified.root.walked[record.rootVersion], passed != record.rootSHA256 {
                return "root version \(record.rootVersion) is not the one this device trusts"
            }
        }
        let releaseFloor = record?.releaseFloors[channel] ?? 0
        if let release = verified.signedRelease, release < releaseFloor {
            return "release \(release) of channel \(channel) is older than release \(releaseFloor), which this device accepted: an older signed release is replayed"
        }
        if let release = verified.signedRelease, release == releaseFloor, let held = record?.releaseDigests?[channel], let digest = verified.signedPacksSHA256, digest != held {
            return "release \(release) of channel \(channel) binds other packs than the release \(release) this device accepted: one number, two releases"
        }
        if verified.manifest.version < versionFloor {
            guard let release = verified.signedRelease, release > releaseFloor else {
                return "manifest version \(verified.manifest.version) is lower than \(versionFloor), already accepted"
            }
        }
        return nil
    }

    /// The record after accepting `verified` on `channel`.
    public static func recording(_ verified: TrustedManifest, in record: TrustRecord?, channel: String) -> TrustRecord {
        var out = record ?? TrustRecord(rootVersion: 0, rootSHA256: "")
        if verified.root.document.version >= out.rootVersion {
            (out.rootVersion, out.rootSHA256) = (verified.root.document.version, verified.root.payloadSHA256)
            out.rootEnvelope = verified.root.kept
        }
        if let release = verified.signedRelease, release >= (out.releaseFloors[channel] ?? 0) {
            out.releaseFloors[channel] = release
            if let digest = verified.signedPacksSHA256 { out.releaseDigests = (out.releaseDigests ?? [:]).merging([channel: digest]) { $1 } }
        }
        return out
    }
}
