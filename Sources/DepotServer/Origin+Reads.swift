import DepotCore
import DepotHTTP
import Foundation

/// What apps, devices and CDN edges read.
extension Origin {
    /// `Cache-Control` for an app's responses: `private` when download credentials gate it, so
    /// that a shared cache never hands it to a client without them.
    private func cacheControl(_ value: String, gated: Bool) -> String {
        gated ? value.replacingOccurrences(of: "public", with: "private") : value
    }

    /// The URL of a channel's manifest: production's is the short one.
    func manifestURL(_ app: String, channel: String) -> String {
        publicURL + "/v1/apps/\(app)" + (channel == ReleaseStore.production ? "" : "/channels/\(channel)") + "/manifest"
    }

    func manifest(_ app: String, channel: String = ReleaseStore.production, _ request: HTTPRequest) throws -> HTTPResponse {
        let gated = try requireDownloadAccess(requireApp(app), request)
        guard let live = try releases.current(app, channel: channel) else {
            throw DepotError.notFound(channel == ReleaseStore.production ? "a release of app \(app)" : "channel \(channel) of app \(app)")
        }
        return Representation(
            source: .bytes(live.envelope), size: Int64(live.envelope.count), etag: live.etag, lastModified: live.manifest.publishedAt,
            contentType: "application/json",
            cacheControl: cacheControl("public, max-age=\(configuration.manifestMaxAge), must-revalidate", gated: gated), route: "manifest"
        ).response(to: request)
    }

    func release(_ app: String, _ number: String, _ request: HTTPRequest) throws -> HTTPResponse {
        let gated = try requireDownloadAccess(requireApp(app), request)
        guard number.count <= 9, number.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let version = Int(number), version > 0 else {
            throw DepotError(400, "invalid_release", "a release number is a positive decimal integer")
        }
        guard let stored = try releases.release(app, version) else { throw DepotError.notFound("release \(version) of app \(app)") }
        return Representation(
            source: .bytes(stored.envelope), size: Int64(stored.envelope.count), etag: stored.etag, lastModified: stored.manifest.publishedAt,
            contentType: "application/json", cacheControl: cacheControl("public, max-age=31536000, immutable", gated: gated), route: "release"
        ).response(to: request)
    }

    func releaseList(_ app: String, _ request: HTTPRequest) throws -> HTTPResponse {
        let gated = try requireDownloadAccess(requireApp(app), request)
        let channels = releases.channels(app)
        let live = channels[ReleaseStore.production]
        let list = try releases.list(app).map { manifest in
            ReleaseSummary(
                version: manifest.version, publishedAt: manifest.publishedAt, expiresAt: manifest.expiresAt, packs: manifest.packs.count,
                live: manifest.version == live, channels: channels.filter { $0.value == manifest.version }.keys.sorted(),
                url: publicURL + "/v1/apps/\(app)/releases/\(manifest.version)"
            )
        }
        let body = Array(try StoredJSON.encoder.encode(ReleaseList(app: app, live: live, channels: channels, releases: list))) + [10]
        return Representation(
            source: .bytes(body), size: Int64(body.count), etag: "\"" + Hex.encode(SHA256Hasher.hash(body).prefix(16)) + "\"",
            lastModified: nil, contentType: "application/json", cacheControl: cacheControl("public, max-age=0, must-revalidate", gated: gated),
            route: "releases"
        ).response(to: request)
    }

    func blob(_ app: String, _ sha256: String, _ request: HTTPRequest) throws -> HTTPResponse {
        guard Hex.isSHA256(sha256) else { throw DepotError(400, "invalid_hash", "a blob is named by 64 lower-case hex digits") }
        let gated = try requireDownloadAccess(requireApp(app), request)
        guard let file = blobs.open(sha256) else { throw DepotError.notFound("blob \(sha256)") }
        let (size, modified) = try file.sizeAndModification()
        return Representation(
            source: .file(file), size: size, etag: "\"\(sha256)\"", lastModified: modified, contentType: "application/octet-stream",
            cacheControl: cacheControl("public, max-age=31536000, immutable", gated: gated), route: "blob"
        ).response(to: request)
    }

    func infoPlist(_ app: String, _ request: HTTPRequest) throws -> HTTPResponse {
        let gated = try requireDownloadAccess(requireApp(app), request)
        let channel = try channelParameter(request)
        guard let live = try releases.current(app, channel: channel) else { throw DepotError.notFound("a release of app \(app) on channel \(channel)") }
        let keys = BackgroundAssetsKeys(
            manifest: live.manifest, manifestSize: Int64(live.envelope.count), manifestURL: manifestURL(app, channel: channel)
        )
        let body = Array(keys.xml.utf8)
        return Representation(
            source: .bytes(body), size: Int64(body.count), etag: "\"" + Hex.encode(SHA256Hasher.hash(body).prefix(16)) + "\"",
            lastModified: live.manifest.publishedAt, contentType: "application/xml; charset=utf-8",
            cacheControl: cacheControl("public, max-age=0, must-revalidate", gated: gated), route: "info-plist"
        ).response(to: request)
    }
}

struct ReleaseList: Codable {
    var app: String
    /// Production's release.
    var live: Int?
    /// Every channel's release.
    var channels: [String: Int]
    var releases: [ReleaseSummary]
}

/// `GET …/channels`.
struct ChannelList: Codable {
    struct Channel: Codable {
        var name: String
        var release: Int
        var manifestURL: String
    }
    var app: String
    var channels: [Channel]
}

/// `POST …/channels/{channel}?release=N`.
struct PromotionResult: Codable {
    var app: String
    var channel: String
    var release: Int
    var changed: Bool
    var manifestURL: String
}

struct ReleaseSummary: Codable {
    var version: Int
    var publishedAt: Date
    var expiresAt: Date
    var packs: Int
    /// Whether production serves it.
    var live: Bool
    /// The channels that serve it.
    var channels: [String]
    var url: String
}
