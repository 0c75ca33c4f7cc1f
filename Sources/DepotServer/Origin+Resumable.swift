import DepotCore
import DepotHTTP
import Foundation

/// Resumable uploads, tus 1.0.0 (core, creation, checksum, termination, expiration), under
/// `/v1/apps/{app}/uploads`. Any tus 1.0 client works: metadata names the pack and its settings.
extension Origin {
    static let tusVersion = "1.0.0"
    static let tusExtensions = "creation,checksum,termination,expiration"

    /// `/v1/apps/{app}/uploads[/{id}]`.
    func resumable(_ app: String, _ id: String?, _ request: HTTPRequest) throws -> HTTPDisposition {
        do {
            if request.method == "OPTIONS" { return .respond(tusResponse(204, [
                ("Tus-Version", Self.tusVersion), ("Tus-Extension", Self.tusExtensions),
                ("Tus-Max-Size", String(configuration.maximumPackSize)),
                ("Tus-Checksum-Algorithm", MessageDigest.Algorithm.allCases.map(\.rawValue).joined(separator: ",")),
            ])) }
            guard request.headers["Tus-Resumable"] == Self.tusVersion else {
                throw DepotError(412, "tus_version", "send Tus-Resumable: \(Self.tusVersion)")
            }
            guard let id else {
                guard request.method == "POST" else { throw DepotError.methodNotAllowed("OPTIONS, POST") }
                return .respond(try createUpload(app, request))
            }
            switch request.method {
            case "HEAD": return .respond(try uploadOffset(app, id, request))
            case "GET": return .respond(try uploadStatus(app, id, request))
            case "PATCH": return try appendUpload(app, id, request)
            case "DELETE": return .respond(try terminateUpload(app, id, request))
            default: throw DepotError.methodNotAllowed("OPTIONS, HEAD, GET, PATCH, DELETE")
            }
        } catch let error as DepotError {
            var response = error.response
            response.headers.add("Tus-Resumable", Self.tusVersion)
            if error.status == 412 { response.headers.add("Tus-Version", Self.tusVersion) }
            response.route = "upload"
            return .respond(response)
        }
    }

    private func tusResponse(_ status: Int, _ headers: [(String, String)]) -> HTTPResponse {
        var response = HTTPResponse(status: status, route: "upload")
        response.headers.add("Tus-Resumable", Self.tusVersion)
        response.headers.add("Cache-Control", "no-store")
        for (name, value) in headers { response.headers.add(name, value) }
        return response
    }

    /// `POST …/uploads` (creation): validates everything a PUT would, then creates an empty upload.
    private func createUpload(_ app: String, _ request: HTTPRequest) throws -> HTTPResponse {
        try authorize(request, app: app)
        _ = try requireApp(app)
        if request.headers["Upload-Defer-Length"] != nil {
            throw DepotError.badRequest("Upload-Defer-Length is not supported: send Upload-Length")
        }
        guard let lengthText = request.headers["Upload-Length"], lengthText.count <= 19, lengthText.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
              let length = Int64(lengthText) else {
            throw DepotError.badRequest("Upload-Length must be the pack's size in bytes")
        }
        guard length <= configuration.maximumPackSize else { throw DepotError.tooLarge(configuration.maximumPackSize) }
        if request.hasBody && (request.contentLength ?? 1) > 0 {
            throw DepotError.badRequest("creation-with-upload is not supported: create, then PATCH")
        }
        let rawMetadata = request.headers["Upload-Metadata"]
        let metadata = try Self.parseMetadata(rawMetadata ?? "")
        guard let pack = metadata["pack"] else { throw DepotError.badRequest("Upload-Metadata must name the pack: pack <base64 id>") }
        guard Identifier.isValidPack(pack) else { throw DepotError.invalidID("pack id") }
        guard let policy = PackEntry.Policy(rawValue: metadata["policy"] ?? "prefetch") else {
            throw DepotError.badRequest("policy must be essential, prefetch or onDemand")
        }
        let tags = (metadata["tags"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard tags.allSatisfy({ $0.count <= 64 }), tags.count <= 32 else { throw DepotError.badRequest("tags are 1–64 characters, at most 32") }
        var expected: String?
        if let checksum = metadata["sha256"] {
            guard Hex.isSHA256(checksum.lowercased()) else { throw DepotError.badRequest("the sha256 metadata must be 64 hex digits") }
            expected = checksum.lowercased()
        }
        var base: Int?
        if let text = metadata["base"] {
            guard text.count <= 9, let value = Int(text), value >= 0 else { throw DepotError.badRequest("base must be the live release number") }
            base = value
        }
        if let channel = metadata["channel"], !Identifier.isValidChannel(channel) { throw DepotError.invalidID("channel") }
        let keys = try apps.packKeys(app)
        let header = PackHeader(keyID: keys.current)
        let now = Date()
        var state = ResumableState(
            id: "", app: app, pack: pack, policy: policy, tags: Array(Set(tags)).sorted(),
            contentType: metadata["contentType"] ?? metadata["filetype"] ?? "application/octet-stream",
            expectedPlaintextSHA256: expected, release: metadata["release"] == "true", base: base, force: metadata["force"] == "true",
            channel: metadata["channel"], metadata: rawMetadata, length: length, offset: 0, keyID: header.keyID, salt: Hex.encode(header.salt),
            noncePrefix: Hex.encode(header.noncePrefix), segmentSize: header.segmentSize, sealedSegments: 0, containerLength: 0,
            tail: "", created: now, expires: now.addingTimeInterval(configuration.uploadExpiry), result: nil
        )
        do {
            try uploads.create(&state, masterKey: keys.ring[keys.current]!)
        } catch {
            throw DepotError.storage(error)
        }
        logger.info("upload created", metadata: ["app": .string(app), "pack": .string(pack), "upload": .string(state.id), "length": .stringConvertible(length)])
        // An empty pack is complete at creation.
        if length == 0 && uploads.claim(state.id) {
            let finished = try ResumablePatch(state: state, origin: self, checksum: nil).finish()
            if finished.status >= 400 { return finished }
        }
        return tusResponse(201, [
            ("Location", "/v1/apps/\(app)/uploads/\(state.id)"), ("Upload-Expires", HTTPDate.format(state.expires)), ("Upload-Offset", "0"),
        ])
    }

    /// tus metadata: `key base64,key base64,key`.
    static func parseMetadata(_ text: String) throws -> [String: String] {
        var out: [String: String] = [:]
        for pair in text.split(separator: ",") {
            let parts = pair.trimmingCharacters(in: .whitespaces).split(separator: " ", maxSplits: 1)
            guard let key = parts.first, !key.isEmpty else { continue }
            var value = ""
            if parts.count == 2 {
                guard let data = Data(base64Encoded: String(parts[1])), let text = String(data: data, encoding: .utf8) else {
                    throw DepotError.badRequest("Upload-Metadata: the value of \(key) is not base64 of UTF-8")
                }
                value = text
            }
            guard out[String(key)] == nil else { throw DepotError.badRequest("Upload-Metadata: \(key) appears twice") }
            out[String(key)] = value
        }
        return out
    }

    /// The upload named by the URL, for this app and token; 404 for none, 410 past its expiry.
    private func existingUpload(_ app: String, _ id: String, _ request: HTTPRequest) throws -> ResumableState {
        try authorize(request, app: app)
        guard let state = uploads.load(id, app: app) else { throw DepotError.notFound("upload \(id) of app \(app)") }
        guard state.expires > Date() else {
            _ = try? uploads.withExclusiveAccess(id) { uploads.remove(id) }
            throw DepotError(410, "upload_expired", "upload \(id) expired; start a new one")
        }
        return state
    }

    private func offsetHeaders(_ state: ResumableState) -> [(String, String)] {
        var headers = [("Upload-Offset", String(state.offset)), ("Upload-Length", String(state.length)),
                       ("Upload-Expires", HTTPDate.format(state.expires))]
        if let metadata = state.metadata { headers.append(("Upload-Metadata", metadata)) }
        return headers
    }

    /// `HEAD …/uploads/{id}`: where to resume.
    private func uploadOffset(_ app: String, _ id: String, _ request: HTTPRequest) throws -> HTTPResponse {
        tusResponse(200, offsetHeaders(try existingUpload(app, id, request)))
    }

    /// `GET …/uploads/{id}`: the upload as JSON, with the publish result once complete.
    private func uploadStatus(_ app: String, _ id: String, _ request: HTTPRequest) throws -> HTTPResponse {
        let state = try existingUpload(app, id, request)
        let result = state.result.flatMap { try? JSONDecoder().decode(PublishResult.self, from: Data($0.utf8)) }
        var response = try json(UploadStatus(
            id: id, app: app, pack: state.pack, offset: state.offset, length: state.length, expires: state.expires,
            complete: state.result != nil, result: result
        ), status: 200, route: "upload")
        response.headers.add("Tus-Resumable", Self.tusVersion)
        response.headers.add("Cache-Control", "no-store")
        return response
    }

    /// `DELETE …/uploads/{id}` (termination).
    private func terminateUpload(_ app: String, _ id: String, _ request: HTTPRequest) throws -> HTTPResponse {
        _ = try existingUpload(app, id, request)
        guard try uploads.withExclusiveAccess(id, { uploads.remove(id) }) != nil else { throw Self.busy(id) }
        return tusResponse(204, [])
    }

    static func busy(_ id: String) -> DepotError {
        DepotError(409, "upload_busy", "another request is writing upload \(id); ask for its offset again in a moment")
    }

    /// `PATCH …/uploads/{id}`: appends at `Upload-Offset`.
    private func appendUpload(_ app: String, _ id: String, _ request: HTTPRequest) throws -> HTTPDisposition {
        var state = try existingUpload(app, id, request)
        guard request.headers["Content-Type"]?.lowercased() == "application/offset+octet-stream" else {
            throw DepotError(415, "unsupported_media_type", "a PATCH body is Content-Type: application/offset+octet-stream")
        }
        guard let offsetText = request.headers["Upload-Offset"], offsetText.count <= 19, let offset = Int64(offsetText), offset >= 0 else {
            throw DepotError.badRequest("Upload-Offset is required")
        }
        guard state.result == nil else { throw DepotError(409, "upload_complete", "upload \(id) is complete") }
        guard offset == state.offset else {
            throw DepotError(409, "offset_mismatch", "the upload is at offset \(state.offset), not \(offset)")
        }
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
        guard uploads.claim(id) else { throw Self.busy(id) }
        // Read again under the claim: another request may have finished in between.
        guard let current = uploads.load(id, app: app), current.offset == offset, current.result == nil else {
            uploads.release(id)
            throw DepotError(409, "offset_mismatch", "the upload moved on; ask for its offset again")
        }
        state = current
        do {
            let patch = try ResumablePatch(state: state, origin: self, checksum: checksum)
            if request.contentLength == 0 { return .respond(patch.finish()) }
            return .receiveBody(patch)
        } catch {
            uploads.release(id)
            throw DepotError.storage(error)
        }
    }

    /// The last byte arrived: seals the container, verifies it end to end, stores and stages
    /// (or publishes) the pack. Returns the error response when the pack is refused; the upload
    /// is then removed. Call with the upload claimed.
    func finishUpload(_ state: inout ResumableState) throws -> HTTPResponse? {
        let id = state.id
        do {
            let keys = try apps.packKeys(state.app)
            let file = try FileDescriptor(path: uploads.containerPath(id), flags: O_RDWR)
            let summary = try PackDecryptor.verify(file, keyRing: keys.ring, expectedSize: state.header.containerSize(plaintextSize: state.length))
            if let expected = state.expectedPlaintextSHA256, expected != summary.plaintextSHA256 {
                throw DepotError.checksumMismatch(expected: expected, actual: summary.plaintextSHA256)
            }
            let installSize = try installSize(ofContainer: uploads.containerPath(id), summary: summary, contentType: state.contentType, keys: keys.ring)
            try blobs.commit(upload: uploads.containerPath(id), file: file, sha256: summary.sha256)
            let response = try publish(summary, installSize: installSize, for: state.request)
            guard case .bytes(let body) = response.body else { return nil }
            state.result = String(decoding: body, as: UTF8.self)
            state.tail = ""
            try uploads.save(state)
            logger.info("upload complete", metadata: ["app": .string(state.app), "pack": .string(state.pack), "upload": .string(id)])
            return nil
        } catch {
            uploads.remove(id)
            return DepotError.storage(error).response
        }
    }

    /// A zip pack's unpacked size, or the plaintext size; refuses a zip that is damaged or unsafe.
    func installSize(ofContainer path: String, summary: PackSummary, contentType: String, keys: KeyRing) throws -> Int64 {
        guard ZipPack.isZip(contentType: contentType) else { return summary.plaintextSize }
        let plain = folder.uploads + "/" + Hex.encode(SecureRandom.bytes(12)) + ".zip"
        defer { FileSystem.remove(plain) }
        try PackDecryptor.decrypt(file: path, to: plain, keyRing: keys)
        chmod(plain, 0o600)
        do {
            return try ZipPack.inspect(plain).installSize
        } catch {
            throw DepotError(422, "invalid_zip", "\(error); nothing was stored")
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

/// One PATCH body: appended to the container through a resumed encryptor; committed (state
/// saved) every 32 MiB, at its end and when the connection drops; discarded on a checksum
/// mismatch (a PATCH with `Upload-Checksum` commits only at its end, once verified).
///
/// The periodic commits bound what a vanished client costs: libmicrohttpd (0.9.75, epoll)
/// may notice a peer that left in the middle of a large body only at the connection timeout,
/// and until then the upload stays busy (409) while HEAD already reports the last commit.
final class ResumablePatch: HTTPBodyReceiver {
    static let commitInterval: Int64 = 32 << 20
    private var state: ResumableState
    private let origin: Origin
    private let file: FileDescriptor
    private let encryptor: PackEncryptor
    private let sealer: UploadTailSealer
    private let checksum: (MessageDigest, [UInt8])?
    private var received: Int64 = 0
    private var done = false

    init(state: ResumableState, origin: Origin, checksum: (MessageDigest, [UInt8])?) throws {
        self.state = state
        self.origin = origin
        self.checksum = checksum
        let keys = try origin.apps.packKeys(state.app)
        guard let master = keys.ring[state.keyID] else {
            throw DepotError(409, "key_missing", "the pack key of this upload is gone; start a new upload")
        }
        let file = try FileDescriptor(path: origin.uploads.containerPath(state.id), flags: O_WRONLY)
        try file.truncate(to: state.containerLength)
        try file.seek(to: state.containerLength)
        self.file = file
        let header = state.header
        sealer = try UploadTailSealer(masterKey: master, header: header, id: state.id)
        encryptor = try PackEncryptor(
            resuming: header, masterKey: master, sealedSegments: state.sealedSegments, pending: try sealer.open(state.tail),
            sink: { try file.write($0) }
        )
    }

    func receive(_ chunk: UnsafeRawBufferPointer) -> HTTPResponse? {
        received += Int64(chunk.count)
        guard state.offset + received <= state.length else {
            return end(DepotError.badRequest("the body goes past Upload-Length \(state.length); the request was discarded").response)
        }
        checksum?.0.update(chunk)
        do {
            try encryptor.update(chunk)
            if checksum == nil && received >= Self.commitInterval { try commit() }
        } catch {
            return end(DepotError.storage(error).response)
        }
        return nil
    }

    func finish() -> HTTPResponse {
        guard !done else { return DepotError(409, "upload_busy", "this request already ended").response }
        if let (digest, expected) = checksum, digest.finalize() != expected {
            return end(DepotError(460, "checksum_mismatch", "Upload-Checksum does not match the body; the request was discarded").response)
        }
        do {
            try commit()
            if state.offset == state.length {
                try encryptor.sealFinal()
                try file.sync()
                if let refusal = try origin.finishUpload(&state) { return end(refusal) }
            }
        } catch {
            return end(DepotError.storage(error).response)
        }
        return end(nil)
    }

    func abort() {
        guard !done else { return }
        // A dropped connection keeps what arrived, unless a checksum was to vouch for it.
        if checksum == nil { try? commit() }
        _ = end(nil)
    }

    /// Makes the received bytes durable and records the new offset.
    private func commit() throws {
        try file.sync()
        state.offset += received
        received = 0
        state.sealedSegments = encryptor.sealedSegments
        state.containerLength = try file.size()
        state.tail = try sealer.seal(encryptor.pendingPlaintext)
        state.expires = Date().addingTimeInterval(origin.configuration.uploadExpiry)
        try origin.uploads.save(state)
    }

    /// Ends the request: releases the upload, answering `refusal` or the new offset.
    private func end(_ refusal: HTTPResponse?) -> HTTPResponse {
        done = true
        try? file.close()
        origin.uploads.release(state.id)
        if var refusal {
            refusal.headers.add("Tus-Resumable", Origin.tusVersion)
            refusal.route = "upload"
            return refusal
        }
        var response = HTTPResponse(status: 204, route: "upload")
        response.headers.add("Tus-Resumable", Origin.tusVersion)
        response.headers.add("Upload-Offset", String(state.offset))
        response.headers.add("Upload-Expires", HTTPDate.format(state.expires))
        return response
    }
}
