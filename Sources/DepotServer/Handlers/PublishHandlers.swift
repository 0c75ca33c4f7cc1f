import DepotCore
import DepotHTTP
import Foundation

/// What content teams call to publish: one-piece uploads, releases, removals, the draft,
/// rollbacks and channel moves. Each turns a request into one ``Publisher`` call.
struct PublishHandlers: Sendable {
    let publisher: Publisher

    /// `PUT …/packs/{pack}`: the body is encrypted as it arrives, then stored and staged.
    func upload(_ context: RequestContext) throws -> HTTPDisposition {
        let request = context.request
        let length = request.contentLength
        if request.headers["Transfer-Encoding"] == nil && length == nil {
            throw HTTPFailure(status: 411, code: "length_required", message: "send Content-Length or Transfer-Encoding: chunked")
        }
        if let length, length > publisher.maximumPackSize { throw DepotError.tooLarge(publisher.maximumPackSize) }
        var parameters = try UploadParameters.parse(
            app: context.app, pack: context["pack"], policy: context.query("policy"), tags: request.query.filter { $0.name == "tag" }.map(\.value),
            sha256: request.headers["X-Depot-SHA256"], checksumName: "X-Depot-SHA256", contentType: request.headers["Content-Type"],
            release: context.flag("release"), base: context.query("base"), force: context.flag("force"), channel: context.query("channel")
        )
        // userInfo travels base64-encoded: JSON in a header would need escaping.
        let userInfo = try request.headers["X-Depot-User-Info"].map { text -> String in
            guard let data = Data(base64Encoded: text) else { throw DepotError.badRequest("X-Depot-User-Info must be a base64-encoded JSON object") }
            return String(decoding: data, as: UTF8.self)
        }
        try parameters.parseManaged(installSize: context.query("installSize"), events: context.query("events"), userInfo: userInfo)
        try parameters.parseLanguage(context.query("language"))
        parameters.scope = context.scope
        if parameters.release { try context.requireChannel(parameters.channel) }
        // Refused before the body is read (checked again under the draft's lock when it is staged).
        try publisher.releases.staging(context.app).checkChange(parameters.pack, by: parameters.scope)
        let receiver = PackUploadReceiver(try PackIngest(parameters, publisher: publisher))
        if length == 0 { return .respond(receiver.finish()) }
        return .receiveBody(receiver)
    }

    /// `POST …/releases[?base=N][&draft=F][&channel=][&force=true]`: the draft becomes the next
    /// signed release; with `draft`, only if it is still the draft of that fingerprint (`GET …/staging`).
    func release(_ context: RequestContext) throws -> HTTPResponse {
        let channel = try UploadParameters.channel(context.query("channel"))
        try context.requireChannel(channel)
        var draft: String?
        if let text = context.query("draft") {
            guard text.utf8.count == 32, text.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else {
                throw DepotError.badRequest("draft is the draft's fingerprint as GET …/staging gives it (32 lower-case hex digits)")
            }
            draft = text
        }
        return try JSONResponse.make(publisher.release(
            context.app, channel: channel, base: UploadParameters.base(context.query("base")),
            force: context.flag("force"), scope: context.scope, draft: draft
        ))
    }

    /// `DELETE …/packs/{pack}[?removeLive=true][&release=true]`: stages the pack's removal (or
    /// drops its staged upload), and publishes at once with `release=true`.
    func removePack(_ context: RequestContext) throws -> HTTPResponse {
        if context.flag("release") { try context.requireChannel(UploadParameters.channel(context.query("channel"))) }
        let removal = try publisher.remove(
            context["pack"], app: context.app, confirmLive: context.flag("removeLive"), stagedOnly: context.flag("staged"), scope: context.scope
        )
        guard context.flag("release") else { return try JSONResponse.make(removal, status: 200) }
        return try release(context)
    }

    /// `GET …/staging[?channel=]`: the draft, as the next release would list it.
    func staging(_ context: RequestContext) throws -> HTTPResponse {
        try JSONResponse.make(publisher.staging(context.app, channel: UploadParameters.channel(context.query("channel"))), status: 200)
    }

    /// `POST …/rollback?to=N` (admin): a new release with release N's packs.
    func rollback(_ context: RequestContext) throws -> HTTPResponse {
        guard let target = context.query("to").flatMap(ReleaseNumber.parse) else {
            throw DepotError.badRequest("name the release to roll back to: ?to=N")
        }
        let channel = try UploadParameters.channel(context.query("channel"))
        try context.requireChannel(channel)
        let result = try publisher.rollback(
            context.app, to: target, channel: channel, force: context.flag("force"),
            confirmRemoval: context.flag("removeLive"), acceptRetiredKeys: context.flag("acceptRetiredKeys")
        )
        return try JSONResponse.make(result, status: result.changed ? 201 : 200)
    }

    /// `POST …/channels/{channel}?release=N[&force=true]`: the channel serves release N from now on.
    func promote(_ context: RequestContext) throws -> HTTPResponse {
        guard let version = context.query("release").flatMap(ReleaseNumber.parse) else {
            throw DepotError.badRequest("name the release to promote: ?release=N")
        }
        try context.requireChannel(context["channel"])
        let result = try publisher.promote(
            context.app, channel: context["channel"], to: version, force: context.flag("force"), confirmRemoval: context.flag("removeLive"),
            acceptRetiredKeys: context.flag("acceptRetiredKeys")
        )
        return try JSONResponse.make(result, status: result.changed ? 201 : 200)
    }

    /// `DELETE …/channels/{channel}` (admin): devices following it get 404 from then on.
    func removeChannel(_ context: RequestContext) throws -> HTTPResponse {
        try context.requireChannel(context["channel"])
        try publisher.removeChannel(context.app, channel: context["channel"])
        var response = HTTPResponse(status: 204)
        response.headers.add("Cache-Control", "no-store")
        return response
    }
}

/// Receives a `PUT` body into a ``PackIngest``.
final class PackUploadReceiver: HTTPBodyReceiver {
    private let ingest: PackIngest

    init(_ ingest: PackIngest) { self.ingest = ingest }

    func receive(_ chunk: UnsafeRawBufferPointer) -> HTTPResponse? {
        do {
            try ingest.append(chunk)
            return nil
        } catch {
            ingest.abort()
            return ErrorResponse.response(for: error)
        }
    }

    func finish() -> HTTPResponse {
        do {
            return try JSONResponse.make(ingest.finish())
        } catch {
            return ErrorResponse.response(for: error)
        }
    }

    func abort() { ingest.abort() }
}
