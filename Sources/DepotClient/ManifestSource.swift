import DepotCore
import Foundation

/// Fetches a channel's envelope and accepts its manifest only if it is signed by a trusted key
/// (one, or two during a signing key rotation), is for this app and this channel, is not older
/// than the highest version already accepted on that channel, and has not expired.
///
/// With a pinned root (``root``, an app with a root of trust: DepotCore's RootOfTrust article), the trusted keys
/// are the online keys of the newest root the envelope's chain reaches from it, and on a channel
/// that root protects the packs must be a release the app's release keys signed.
public struct ManifestSource: Sendable {
    /// The default channel.
    public static let production = "production"
    /// The largest envelope accepted; a larger body is refused as it arrives.
    /// (16 MiB: a manifest of 10,000 packs is about 6 MiB; verifying one takes about its size
    /// in memory, see ``verify(file:floor:now:)``.)
    public static let sizeLimit = 16 << 20

    /// The manifest URL.
    public let url: URL
    /// The app the manifest must be for.
    public let app: String
    /// The channel the URL serves (whose floor applies).
    public let channel: String
    /// The public keys trusted to sign manifests (without a root).
    public let trustedKeys: [Ed25519PublicKey]
    /// The signed root document the build pins (`ClientConfiguration.root`); nil: ``trustedKeys``.
    public let root: Envelope?
    /// Per protected channel, the signed release the configuration was exported at
    /// (`ClientConfiguration.releaseFloors`): a device that has recorded none yet (a new install)
    /// accepts no older one.
    public var releaseFloors: [String: Int] = [:]
    /// Sent with every request (download credentials).
    public var headers: [String: String] = [:]
    let transport: HTTPTransport

    public init(
        url: URL, app: String, channel: String = ManifestSource.production, trustedKeys: [Ed25519PublicKey], root: Envelope? = nil,
        releaseFloors: [String: Int] = [:], transport: HTTPTransport = .shared
    ) {
        self.url = url
        self.releaseFloors = releaseFloors
        self.app = app
        self.channel = channel
        self.trustedKeys = trustedKeys
        self.root = root
        self.transport = transport
    }

    /// A source trusting what `configuration` says: its root, or else its manifest keys.
    public init(url: URL, channel: String = ManifestSource.production, configuration: ClientConfiguration, transport: HTTPTransport = .shared) throws {
        let root = try configuration.pinnedRoot()
        self.init(
            url: url, app: configuration.app, channel: channel, trustedKeys: root == nil ? try configuration.trustedKeys() : [], root: root,
            releaseFloors: configuration.releaseFloors ?? [:], transport: transport
        )
    }

    /// The manifest URL of a channel of `app` on `server`.
    public static func url(server: URL, app: String, channel: String = ManifestSource.production) -> URL {
        let base = server.appendingPathComponent("v1").appendingPathComponent("apps").appendingPathComponent(app)
        return channel == production ? base.appendingPathComponent("manifest")
            : base.appendingPathComponent("channels").appendingPathComponent(channel).appendingPathComponent("manifest")
    }

    /// What a fetch brought.
    public enum Fetched: Sendable {
        /// A new envelope, not yet verified, with its ETag.
        case envelope([UInt8], etag: String?)
        /// `304 Not Modified`: the envelope last accepted is still current.
        case notModified
    }

    /// Fetches the envelope; with `etag`, asks `If-None-Match` (a periodic check that changes nothing transfers nothing).
    public func fetch(ifNoneMatch etag: String? = nil) async throws -> Fetched {
        var headers = headers
        if let etag { headers["If-None-Match"] = etag }
        let response: HTTPTransport.Response
        do {
            response = try await transport.get(url, headers: headers, limit: Self.sizeLimit)
        } catch let error as ClientError where error.kind == .tooLarge {
            throw ClientError.manifest("the envelope at \(url) is larger than \(Self.sizeLimit) bytes")
        }
        if response.status == 304 && etag != nil { return .notModified }
        guard response.status == 200 else {
            throw ClientError.http(response.status, url.absoluteString, String(decoding: response.body.prefix(300), as: UTF8.self))
        }
        return .envelope(response.body, etag: response.header("ETag"))
    }

    /// Fetches and verifies in one step. `floor` is the highest version accepted before on this
    /// channel; `now` is the one instant used for the expiry check in this sync.
    public func fetch(floor: Int, now: Date) async throws -> Manifest {
        guard case .envelope(let bytes, _) = try await fetch() else { throw ClientError.manifest("unexpected 304") }
        return try verify(bytes, floor: floor, now: now)
    }

    /// A manifest accepted by ``verify(_:state:now:)``: what the state records once it takes it.
    public struct Accepted: Sendable {
        public var manifest: Manifest
        /// With a root of trust, the root reached and the signed release (``InstalledState/record(_:channel:installID:)``).
        public var trusted: TrustedManifest?
    }

    /// Verifies envelope bytes obtained some other way (on a device, the system downloads them).
    public func verify(_ bytes: [UInt8], floor: Int, now: Date) throws -> Manifest {
        try verify(bytes, state: Self.state(app: app, channel: channel, floor: floor), now: now).manifest
    }

    /// Verifies envelope bytes against what the device's `state` accepted before (its floors, and
    /// with a root of trust, the newest root and signed release it recorded).
    public func verify(_ bytes: [UInt8], state: InstalledState, now: Date) throws -> Accepted {
        guard bytes.count <= Self.sizeLimit else { throw ClientError.manifest("the envelope is larger than \(Self.sizeLimit) bytes") }
        if let root {
            let trusted: TrustedManifest
            do {
                trusted = try ManifestTrust.verify(envelope: bytes, pinned: root, record: state.trust, app: app, channel: channel, now: now)
            } catch {
                throw ClientError.manifest(String(describing: error))
            }
            return try accept(Accepted(manifest: trusted.manifest, trusted: trusted), state: state, now: now)
        }
        let manifest: Manifest
        do {
            manifest = try Envelope.verifiedManifest(envelope: bytes, trusting: trustedKeys)
        } catch {
            throw ClientError.manifest(error.description)
        }
        return try accept(Accepted(manifest: manifest, trusted: nil), state: state, now: now)
    }

    /// Verifies the envelope in a file (on a device, the one the system fetched, or the one the
    /// extension accepted) in about the file's size in memory
    /// (`Envelope.verifiedManifest(file:limit:trusting:)`), as ``verify(_:floor:now:)`` does.
    public func verify(file path: String, floor: Int, now: Date) throws -> Manifest {
        try verify(file: path, state: Self.state(app: app, channel: channel, floor: floor), now: now).manifest
    }

    /// ``verify(_:state:now:)`` for the envelope in a file, in about the file's size in memory.
    public func verify(file path: String, state: InstalledState, now: Date) throws -> Accepted {
        do {
            if let root {
                let trusted = try ManifestTrust.verify(file: path, limit: Self.sizeLimit, pinned: root, record: state.trust, app: app, channel: channel, now: now)
                return try accept(Accepted(manifest: trusted.manifest, trusted: trusted), state: state, now: now)
            }
            let manifest = try Envelope.verifiedManifest(file: path, limit: Self.sizeLimit, trusting: trustedKeys)
            return try accept(Accepted(manifest: manifest, trusted: nil), state: state, now: now)
        } catch let error as SystemError where error.errno == EFBIG {
            throw ClientError.manifest("the envelope is larger than \(Self.sizeLimit) bytes")
        } catch let error as SystemError {
            throw ClientError.state("cannot read the manifest \(path): \(error)")
        } catch let error as EnvelopeError {
            throw ClientError.manifest(error.description)
        } catch let error as TrustError {
            throw ClientError.manifest(error.description)
        }
    }

    /// A state holding only `floor` for the channel (the callers that pass a floor).
    private static func state(app: String, channel: String, floor: Int) -> InstalledState {
        var state = InstalledState(app: app)
        state.raiseFloor(channel: channel, to: floor)
        return state
    }

    private func accept(_ accepted: Accepted, state: InstalledState, now: Date) throws -> Accepted {
        let manifest = accepted.manifest
        guard manifest.app == app else { throw ClientError.wrongApp(manifest.app) }
        // A higher schemaVersion means a change this client cannot read safely (docs/Integrating.md,
        // "Versions and compatibility"): refused before the floor moves; the device keeps its packs.
        guard manifest.schemaVersion <= Manifest.currentSchemaVersion else {
            throw ClientError.manifest("schemaVersion \(manifest.schemaVersion) is newer than this client reads (\(Manifest.currentSchemaVersion), AssetDepot \(AssetDepotVersion.current)): ship a build with a newer DepotClient")
        }
        // One channel's envelope (a higher version) served at another's URL by a poisoned cache or
        // a man in the middle would move devices to its packs and raise their floor. A manifest
        // signed before channels were named is production's.
        guard (manifest.channel ?? Self.production) == channel else { throw ClientError.wrongChannel(manifest.channel, asked: channel) }
        if let refusal = state.refusal(accepted, channel: channel) { throw refusal }
        if let release = accepted.trusted?.signedRelease, let exported = releaseFloors[channel], release < exported {
            throw ClientError.manifest("release \(release) of channel \(channel) is older than release \(exported), which this build's configuration was exported at: an older signed release is replayed")
        }
        guard manifest.expiresAt > now else { throw ClientError.expired(manifest.version) }
        guard accepted.trusted?.signedRelease != nil else { return accepted }
        // An Apple Archive (no key: served as published) whose plaintext fields are not its
        // container's would let a patch lead to bytes the signer never saw.
        for entry in manifest.allEntries where entry.keyID.isEmpty && (entry.plaintextSHA256 != entry.sha256 || entry.installSize != entry.size) {
            throw ClientError.manifest("pack \(entry.id) is an Apple Archive whose plaintext is not its container: refused on protected channel \(channel)")
        }
        // A protected channel: a zip's tree patch is checked file by file against hashes the patch
        // itself carries, which no release key signed; such a pack is downloaded whole (its
        // container's SHA-256 is bound). Byte patches stay: their result is checked against the
        // signed plaintext SHA-256 and size.
        var bound = accepted
        bound.manifest = Self.withoutTreePatches(manifest)
        return bound
    }

    /// `manifest` without the patches of its zip packs (and of its rollout's).
    static func withoutTreePatches(_ manifest: Manifest) -> Manifest {
        func strip(_ packs: inout [PackEntry]) {
            for index in packs.indices where packs[index].patches != nil && (ZipPack.isZip(contentType: packs[index].contentType) || packs[index].keyID.isEmpty) {
                packs[index].patches = nil
            }
        }
        var out = manifest
        strip(&out.packs)
        if out.rollout != nil { strip(&out.rollout!.packs) }
        return out
    }
}
