import DepotCore
import DepotHTTP
import Foundation

/// Channels: named pointers to releases, each with its own manifest URL.
extension Origin {
    /// `GET …/channels`.
    func channelList(_ app: String, _ request: HTTPRequest) throws -> HTTPResponse {
        let gated = try requireDownloadAccess(requireApp(app), request)
        let channels = releases.channels(app).sorted { $0.key < $1.key }.map {
            ChannelList.Channel(name: $0.key, release: $0.value, manifestURL: manifestURL(app, channel: $0.key))
        }
        let body = Array(try StoredJSON.encoder.encode(ChannelList(app: app, channels: channels))) + [10]
        return Representation(
            source: .bytes(body), size: Int64(body.count), etag: "\"" + Hex.encode(SHA256Hasher.hash(body).prefix(16)) + "\"",
            lastModified: nil, contentType: "application/json",
            cacheControl: gated ? "private, max-age=0, must-revalidate" : "public, max-age=0, must-revalidate", route: "channels"
        ).response(to: request)
    }

    /// `POST …/channels/{channel}?release=N[&force=true]`: the channel serves release N from now on.
    func promote(_ app: String, _ channel: String, _ request: HTTPRequest) throws -> HTTPResponse {
        guard Identifier.isValidChannel(channel) else { throw DepotError.invalidID("channel") }
        try authorize(request, app: app)
        _ = try requireApp(app)
        guard let text = request.queryValue("release"), text.count <= 9, let version = Int(text), version > 0 else {
            throw DepotError.badRequest("name the release to promote: ?release=N")
        }
        let force = request.queryValue("force") == "true"
        let changed = try releases.promote(app, channel: channel, to: version, check: force ? nil : allowanceGuard(app, channel: channel))
        let served = try releases.current(app, channel: channel)?.version ?? version
        logger.notice("promoted", metadata: ["app": .string(app), "channel": .string(channel), "release": .stringConvertible(served)])
        let body = PromotionResult(app: app, channel: channel, release: served, changed: changed, manifestURL: manifestURL(app, channel: channel))
        return try json(body, status: changed ? 201 : 200, route: "channels")
    }

    /// `DELETE …/channels/{channel}` (admin): devices following it get 404 from then on.
    func removeChannel(_ app: String, _ channel: String, _ request: HTTPRequest) throws -> HTTPResponse {
        guard Identifier.isValidChannel(channel) else { throw DepotError.invalidID("channel") }
        try authorize(request, app: app, admin: true)
        _ = try requireApp(app)
        try releases.removeChannel(app, channel: channel)
        var response = HTTPResponse(status: 204, route: "channels")
        response.headers.add("Cache-Control", "no-store")
        return response
    }
}
