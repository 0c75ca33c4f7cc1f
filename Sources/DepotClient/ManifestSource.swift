import DepotCore
import Foundation

/// Fetches the live envelope and accepts its manifest only if it is signed by a trusted key,
/// is for this app, is not older than the last accepted one, and has not expired.
public struct ManifestSource: Sendable {
    /// The manifest URL.
    public let url: URL
    /// The app the manifest must be for.
    public let app: String
    /// The public keys trusted to sign manifests.
    public let trustedKeys: [Ed25519PublicKey]
    let transport: HTTPTransport

    /// The largest envelope accepted.
    public static let sizeLimit = 4 << 20

    public init(url: URL, app: String, trustedKeys: [Ed25519PublicKey], transport: HTTPTransport = HTTPTransport()) {
        self.url = url
        self.app = app
        self.trustedKeys = trustedKeys
        self.transport = transport
    }

    /// The manifest URL of `app` on `server`.
    public static func url(server: URL, app: String) -> URL {
        server.appendingPathComponent("v1").appendingPathComponent("apps").appendingPathComponent(app).appendingPathComponent("manifest")
    }

    /// Fetches and verifies. `floor` is the highest version accepted before; `now` is the one
    /// instant used for the expiry check in this sync.
    public func fetch(floor: Int, now: Date) async throws -> Manifest {
        let response = try await transport.get(url, limit: Self.sizeLimit)
        guard response.status == 200 else {
            throw ClientError.http(response.status, url.absoluteString, String(decoding: response.body.prefix(300), as: UTF8.self))
        }
        return try verify(response.body, floor: floor, now: now)
    }

    /// Verifies envelope bytes obtained some other way (on a device, the system downloads them).
    public func verify(_ bytes: [UInt8], floor: Int, now: Date) throws -> Manifest {
        let manifest: Manifest
        do {
            manifest = try Envelope.decode(bytes).verifiedManifest(trusting: trustedKeys)
        } catch {
            throw ClientError.manifest(error.description)
        }
        guard manifest.app == app else { throw ClientError.wrongApp(manifest.app) }
        guard manifest.version >= floor else { throw ClientError.rollback(offered: manifest.version, floor: floor) }
        guard manifest.expiresAt > now else { throw ClientError.expired(manifest.version) }
        return manifest
    }
}
