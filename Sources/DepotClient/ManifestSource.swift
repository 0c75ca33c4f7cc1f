import DepotCore
import Foundation

/// Fetches a channel's envelope and accepts its manifest only if it is signed by a trusted key
/// (one, or two during a signing key rotation), is for this app and this channel, is not older
/// than the highest version already accepted on that channel, and has not expired.
public struct ManifestSource: Sendable {
    /// The default channel.
    public static let production = "production"
    /// The largest envelope accepted; a larger body is refused as it arrives.
    public static let sizeLimit = 4 << 20

    /// The manifest URL.
    public let url: URL
    /// The app the manifest must be for.
    public let app: String
    /// The channel the URL serves (whose floor applies).
    public let channel: String
    /// The public keys trusted to sign manifests.
    public let trustedKeys: [Ed25519PublicKey]
    /// Sent with every request (download credentials).
    public var headers: [String: String] = [:]
    let transport: HTTPTransport

    public init(url: URL, app: String, channel: String = ManifestSource.production, trustedKeys: [Ed25519PublicKey], transport: HTTPTransport = .shared) {
        self.url = url
        self.app = app
        self.channel = channel
        self.trustedKeys = trustedKeys
        self.transport = transport
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

    /// Verifies envelope bytes obtained some other way (on a device, the system downloads them).
    public func verify(_ bytes: [UInt8], floor: Int, now: Date) throws -> Manifest {
        guard bytes.count <= Self.sizeLimit else { throw ClientError.manifest("the envelope is larger than \(Self.sizeLimit) bytes") }
        let manifest: Manifest
        do {
            manifest = try Envelope.decode(bytes).verifiedManifest(trusting: trustedKeys)
        } catch {
            throw ClientError.manifest(error.description)
        }
        guard manifest.app == app else { throw ClientError.wrongApp(manifest.app) }
        // One channel's envelope (a higher version) served at another's URL by a poisoned cache or
        // a man in the middle would move devices to its packs and raise their floor. A manifest
        // signed before channels were named is production's.
        guard (manifest.channel ?? Self.production) == channel else { throw ClientError.wrongChannel(manifest.channel, asked: channel) }
        guard manifest.version >= floor else { throw ClientError.rollback(offered: manifest.version, floor: floor) }
        guard manifest.expiresAt > now else { throw ClientError.expired(manifest.version) }
        return manifest
    }
}
