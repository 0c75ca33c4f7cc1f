import DepotCore
import DepotHTTP
import Foundation
import Logging

/// Resumable uploads, tus 1.0.0 (core, creation, checksum, termination, expiration), under
/// `/v1/apps/{app}/uploads`. Any tus 1.0 client works: metadata names the pack and its settings.
struct ResumableHandlers: Sendable {
    static let version = "1.0.0"
    static let extensions = "creation,checksum,termination,expiration"
    /// A trailer of the PATCH that completes an upload: the plaintext SHA-256 of the whole upload,
    /// which a client can compute while it sends instead of reading the file once before.
    static let lateChecksumField = "Depot-Content-SHA256"

    let uploads: ResumableUploads
    let publisher: Publisher
    /// How long an untouched upload lives.
    let expiry: TimeInterval

    /// Every tus answer, errors included, says which protocol version it speaks.
    static func protocolHeaders(_ response: inout HTTPResponse) {
        if response.headers["Tus-Resumable"] == nil { response.headers.add("Tus-Resumable", version) }
        if response.status == 412 { response.headers.add("Tus-Version", version) }
    }

    /// `OPTIONS …/uploads[/{upload}]`: what the server supports.
    func options(_ context: RequestContext) throws -> HTTPResponse {
        Self.response(204, [
            ("Tus-Version", Self.version), ("Tus-Extension", Self.extensions), ("Tus-Max-Size", String(publisher.maximumPackSize)),
            ("Tus-Checksum-Algorithm", MessageDigest.Algorithm.allCases.map(\.rawValue).joined(separator: ",")),
        ])
    }

    /// `POST …/uploads` (creation): checks everything a PUT would, then creates an empty upload.
    func create(_ context: RequestContext) throws -> HTTPResponse {
        let request = context.request
        try Self.requireVersion(request)
        if request.headers["Upload-Defer-Length"] != nil {
            throw DepotError.badRequest("Upload-Defer-Length is not supported: send Upload-Length")
        }
        guard let lengthText = request.headers["Upload-Length"], lengthText.count <= 19, lengthText.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
              let length = Int64(lengthText) else {
            throw DepotError.badRequest("Upload-Length must be the pack's size in bytes")
        }
        guard length <= publisher.maximumPackSize else { throw DepotError.tooLarge(publisher.maximumPackSize) }
        if request.hasBody && (request.contentLength ?? 1) > 0 {
            throw DepotError.badRequest("creation-with-upload is not supported: create, then PATCH")
        }
        let rawMetadata = request.headers["Upload-Metadata"]
        let metadata = try Self.parseMetadata(rawMetadata ?? "")
        let tags = (metadata["tags"] ?? "").split(separator: ",").map(\.trimmingWhitespace).filter { !$0.isEmpty }
        var parameters = try UploadParameters.parse(
            app: context.app, pack: metadata["pack"], policy: metadata["policy"], tags: tags, sha256: metadata["sha256"],
            checksumName: "the sha256 metadata", contentType: metadata["contentType"] ?? metadata["filetype"], release: metadata["release"] == "true",
            base: metadata["base"], force: metadata["force"] == "true", channel: metadata["channel"]
        )
        try parameters.parseManaged(installSize: metadata["installSize"], events: metadata["events"], userInfo: metadata["userInfo"])
        try parameters.parseLanguage(metadata["language"])
        parameters.scope = context.scope
        if parameters.release { try context.requireChannel(parameters.channel) }
        try publisher.releases.staging(context.app).checkChange(parameters.pack, by: parameters.scope)
        let managed = try publisher.checkMode(parameters)
        // A managed app's archive is stored as uploaded: the header is not written (its fields are unused).
        let header = managed ? PackHeader(keyID: "archive") : PackHeader(keyID: try publisher.apps.packKeys(context.app).current)
        let state = try uploads.create(parameters, metadata: rawMetadata, length: length, header: header, archive: managed, expiry: expiry)
        publisher.logger.info("upload created", metadata: [
            "app": .string(context.app), "pack": .string(parameters.pack), "upload": .string(state.id), "length": .stringConvertible(length),
        ])
        // An empty pack is complete at creation.
        if length == 0 {
            do {
                try session(state.id, context, at: 0).finish()
            } catch {
                // The client never learns this upload's URL: nothing of it may be finished later.
                uploads.remove(state.id)
                throw error
            }
        }
        return Self.response(201, [
            ("Location", publisher.urls.upload(context.app, state.id)), ("Upload-Expires", HTTPDate.format(state.expires)), ("Upload-Offset", "0"),
        ])
    }

    /// `HEAD …/uploads/{upload}`: where to resume.
    func offset(_ context: RequestContext) throws -> HTTPResponse {
        try Self.requireVersion(context.request)
        let state = try uploads.find(context["upload"], app: context.app)
        try Self.requireScope(context, state)
        var headers = [("Upload-Offset", String(state.offset)), ("Upload-Length", String(state.length)),
                       ("Upload-Expires", HTTPDate.format(state.expires))]
        if let metadata = state.metadata { headers.append(("Upload-Metadata", metadata)) }
        return Self.response(200, headers)
    }

    /// `GET …/uploads/{upload}`: the upload as JSON, with the publish result once complete.
    func status(_ context: RequestContext) throws -> HTTPResponse {
        try Self.requireVersion(context.request)
        let state = try uploads.find(context["upload"], app: context.app)
        try Self.requireScope(context, state)
        var response = try JSONResponse.make(UploadStatus(
            id: state.id, app: state.app, pack: state.pack, offset: state.offset, length: state.length, expires: state.expires,
            complete: state.result != nil, result: state.publishResult
        ), status: 200)
        response.headers.add("Cache-Control", "no-store")
        return response
    }

    /// `DELETE …/uploads/{upload}` (termination).
    func terminate(_ context: RequestContext) throws -> HTTPResponse {
        try Self.requireVersion(context.request)
        let state = try uploads.find(context["upload"], app: context.app)
        try Self.requireScope(context, state)
        try uploads.terminate(state.id)
        return Self.response(204, [])
    }

    /// A token scoped to channels (trusted publishing) reads, writes into or ends only uploads
    /// made within its scope: its bytes are never staged under a wider one, nor another's work
    /// read or dropped.
    static func requireScope(_ context: RequestContext, _ state: ResumableState) throws {
        guard let mine = context.scope, !(state.scope.map { Set($0).isSubset(of: mine) } ?? false) else { return }
        throw DepotError(.forbidden, "channel_not_allowed", "this upload was created by a token that may act on more channels than this one")
    }

    /// `PATCH …/uploads/{upload}`: appends at `Upload-Offset`.
    func append(_ context: RequestContext) throws -> HTTPDisposition {
        let request = context.request
        try Self.requireVersion(request)
        let state = try uploads.find(context["upload"], app: context.app)
        // The PATCH that completes an upload made with release=true releases it: its token too must reach the channel.
        if state.release { try context.requireChannel(state.channel ?? ReleaseStore.production) }
        try Self.requireScope(context, state)
        guard request.headers["Content-Type"]?.lowercased() == "application/offset+octet-stream" else {
            throw HTTPFailure(status: 415, code: "unsupported_media_type", message: "a PATCH body is Content-Type: application/offset+octet-stream")
        }
        guard let offsetText = request.headers["Upload-Offset"], offsetText.count <= 19, let offset = Int64(offsetText), offset >= 0 else {
            throw DepotError.badRequest("Upload-Offset is required")
        }
        guard state.result == nil else { throw DepotError.conflict("upload_complete", "upload \(state.id) is complete") }
        guard offset == state.offset else { throw DepotError.conflict("offset_mismatch", "the upload is at offset \(state.offset), not \(offset)") }
        if let length = request.contentLength, length > state.length - state.offset {
            throw DepotError.badRequest("the body would go past Upload-Length \(state.length)")
        }
        var checksum: (MessageDigest, [UInt8])?
        if let header = request.headers["Upload-Checksum"] {
            let parts = header.split(separator: " ")
            guard parts.count == 2, let algorithm = MessageDigest.Algorithm(rawValue: String(parts[0])),
                  let digest = Data(base64Encoded: String(parts[1])), digest.count == algorithm.size else {
                throw DepotError.badRequest("Upload-Checksum must be one of \(MessageDigest.Algorithm.allCases.map(\.rawValue)) and a base64 digest")
            }
            checksum = (MessageDigest(algorithm), Array(digest))
        }
        // The whole upload's SHA-256, as a header or announced as a trailer (checked when this PATCH completes the upload).
        let late = try request.headers[Self.lateChecksumField].map { value in
            guard let name = Hex.sha256(from: value) else { throw DepotError.badRequest("\(Self.lateChecksumField) must be 64 hex digits") }
            return name
        }
        let announced = request.headers["Trailer"].map { $0.lowercased().split(separator: ",").map(\.trimmingWhitespace).contains(Self.lateChecksumField.lowercased()) } ?? false
        // An upload whose verified container already moved into the blob store (the store could
        // not answer when the origin started again): a PATCH with no body stages it from its record.
        if request.contentLength == 0, state.finishing != nil {
            guard let staged = try uploads.withExclusiveAccess(state.id, { try uploads.restageMoved(state.id, app: context.app, publisher: publisher) })
            else { throw ResumableUploads.busy(state.id) }
            if let staged { return .respond(Self.finished(staged)) }
        }
        let session = try session(state.id, context, at: offset)
        // A PATCH with a checksum commits only at its end, once verified.
        session.commitsPeriodically = checksum == nil
        let receiver = ResumablePatchReceiver(session, checksum: checksum, late: late, trailerAnnounced: announced)
        if request.contentLength == 0 { return .respond(receiver.finish()) }
        return .receiveBody(receiver)
    }

    /// A PATCH's `204`: where the upload stands.
    static func finished(_ state: ResumableState) -> HTTPResponse {
        var response = HTTPResponse(status: 204)
        response.headers.add("Tus-Resumable", version)
        response.headers.add("Upload-Offset", String(state.offset))
        response.headers.add("Upload-Expires", HTTPDate.format(state.expires))
        return response
    }

    private func session(_ id: String, _ context: RequestContext, at offset: Int64) throws -> ResumableSession {
        try ResumableSession(claiming: id, app: context.app, at: offset, uploads: uploads, publisher: publisher, expiry: expiry)
    }

    private static func requireVersion(_ request: HTTPRequest) throws {
        guard request.headers["Tus-Resumable"] == version else {
            throw HTTPFailure(status: 412, code: "tus_version", message: "send Tus-Resumable: \(version)")
        }
    }

    static func response(_ status: Int, _ headers: [(String, String)]) -> HTTPResponse {
        var response = HTTPResponse(status: status)
        response.headers.add("Tus-Resumable", version)
        response.headers.add("Cache-Control", "no-store")
        for (name, value) in headers { response.headers.add(name, value) }
        return response
    }

    /// tus metadata (``TusMetadata``), a malformed header answered with 400.
    static func parseMetadata(_ text: String) throws -> [String: String] {
        do {
            return try TusMetadata.parse(text)
        } catch {
            throw DepotError.badRequest(error.description)
        }
    }
}

/// `GET …/uploads/{id}`.
struct UploadStatus: Codable {
    var id: String
    var app: String
    var pack: String
    var offset: Int64
    var length: Int64
    var expires: Date
    var complete: Bool
    var result: PublishResult?
}

/// Receives one PATCH body into a ``ResumableSession``, checking `Upload-Checksum` at the end
/// (a mismatch discards the whole request, 460).
final class ResumablePatchReceiver: HTTPBodyReceiver {
    private let session: ResumableSession
    private let checksum: (MessageDigest, [UInt8])?
    /// A `Depot-Content-SHA256` header.
    private let late: String?
    /// The request's `Trailer` field names `Depot-Content-SHA256`.
    private let trailerAnnounced: Bool
    private var done = false

    init(_ session: ResumableSession, checksum: (MessageDigest, [UInt8])?, late: String? = nil, trailerAnnounced: Bool = false) {
        self.session = session
        self.checksum = checksum
        self.late = late
        self.trailerAnnounced = trailerAnnounced
    }

    func receive(_ chunk: UnsafeRawBufferPointer) -> HTTPResponse? {
        checksum?.0.update(chunk)
        do {
            try session.append(chunk)
            return nil
        } catch {
            done = true
            if (error as? DepotError)?.code == "not_an_apple_archive" { session.discard() } else { session.abandon(keepReceived: false) }
            return ErrorResponse.response(for: error)
        }
    }

    func finish() -> HTTPResponse { finish(trailers: HTTPHeaders()) }

    /// A `Depot-Content-SHA256` header or trailer (the whole upload's plaintext SHA-256, which a
    /// client computes while it sends) is checked when this PATCH completes the upload. An
    /// announced trailer that did not arrive (a proxy may drop trailers) leaves the upload
    /// unfinished at its last commit, so that the client can send the rest with the header.
    func finish(trailers: HTTPHeaders) -> HTTPResponse {
        guard !done else { return ErrorResponse.response(for: ResumableUploads.busy(session.state.id)) }
        done = true
        if let (digest, expected) = checksum, digest.finalize() != expected {
            session.abandon(keepReceived: false)
            return ErrorResponse.response(for: HTTPFailure(
                status: 460, code: "checksum_mismatch", message: "Upload-Checksum does not match the body; the request was discarded"
            ))
        }
        var late = self.late
        let field = ResumableHandlers.lateChecksumField
        if let value = trailers[field] {
            guard let name = Hex.sha256(from: value), late == nil || late == name else {
                session.abandon(keepReceived: false)
                return ErrorResponse.response(for: DepotError.badRequest("the \(field) trailer must be 64 hex digits (and agree with the header); the request was discarded"))
            }
            late = name
        } else if trailerAnnounced && late == nil && session.reachesEnd {
            session.abandon(keepReceived: false)
            return ErrorResponse.response(for: DepotError(
                .invalid, "trailer_missing", "the announced \(field) trailer did not arrive (a proxy may drop trailers); "
                    + "the upload stays at its offset: send the rest with \(field) as a header"
            ))
        }
        do {
            return ResumableHandlers.finished(try session.finish(lateSHA256: late))
        } catch {
            return ErrorResponse.response(for: error)
        }
    }

    /// A dropped connection keeps what arrived, unless a checksum was to vouch for it.
    func abort() {
        guard !done else { return }
        done = true
        session.abandon(keepReceived: checksum == nil)
    }
}
