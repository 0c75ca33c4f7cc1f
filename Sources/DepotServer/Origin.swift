import DepotCore
import DepotHTTP
import Foundation
import Synchronization

/// The origin's request handler: routes, authentication and publishing over the data folder.
final class Origin: HTTPHandler {
    let configuration: OriginConfiguration
    let folder: DataFolder
    let apps: AppStore
    let blobs: BlobStore
    let releases: ReleaseStore
    let tokens: TokenStore
    let staticFiles: StaticFiles?
    private let publicURLValue = Mutex("")

    init(configuration: OriginConfiguration) throws {
        self.configuration = configuration
        folder = DataFolder(configuration.dataPath)
        try folder.prepare()
        apps = AppStore(folder: folder)
        blobs = BlobStore(folder: folder)
        releases = ReleaseStore(folder: folder, apps: apps, manifestLifetime: configuration.manifestLifetime)
        tokens = TokenStore(folder: folder)
        staticFiles = configuration.publicDirectory.map(StaticFiles.init(root:))
        _ = try apps.signingKey()
    }

    /// The base of every URL a manifest carries, without a trailing slash.
    var publicURL: String {
        get { publicURLValue.withLock { $0 } }
        set { publicURLValue.withLock { $0 = newValue.hasSuffix("/") ? String(newValue.dropLast()) : newValue } }
    }

    func handle(_ request: HTTPRequest) -> HTTPDisposition {
        do {
            return try route(request)
        } catch let error as DepotError {
            return .respond(error.response)
        } catch {
            return .respond(DepotError.storage(error).response)
        }
    }

    private func route(_ request: HTTPRequest) throws -> HTTPDisposition {
        let s = request.pathSegments
        if s.count == 1 && s[0] == "healthz" {
            try allow(request, "GET, HEAD")
            return .respond(.bytes(Array("{\"status\":\"ok\"}\n".utf8), contentType: "application/json"))
        }
        guard s.first == "v1" else {
            try allow(request, "GET, HEAD")
            guard let staticFiles, let response = staticFiles.response(for: s) else { throw DepotError.notFound("\(request.path)") }
            return .respond(response)
        }
        guard s.count >= 4, s[1] == "apps" else { throw DepotError.notFound("route \(request.path)") }
        let app = s[2]
        guard Identifier.isValidApp(app) else { throw DepotError.invalidID("app id") }
        switch (s[3], s.count) {
        case ("manifest", 4):
            try allow(request, "GET, HEAD")
            return .respond(try manifest(app, request))
        case ("blobs", 5):
            try allow(request, "GET, HEAD")
            return .respond(try blob(app, s[4]))
        case ("packs", 5):
            try allow(request, "PUT")
            return try upload(app, s[4], request)
        default:
            throw DepotError.notFound("route \(request.path)")
        }
    }

    private func allow(_ request: HTTPRequest, _ methods: String) throws {
        guard methods.split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == request.method }) else {
            throw DepotError.methodNotAllowed(methods)
        }
    }

    private func requireApp(_ app: String) throws {
        guard apps.settings(app) != nil else { throw DepotError.notFound("app \(app)") }
    }

    // MARK: Reads

    private func manifest(_ app: String, _ request: HTTPRequest) throws -> HTTPResponse {
        try requireApp(app)
        guard let live = try releases.current(app) else { throw DepotError.notFound("a release of app \(app)") }
        var headers = HTTPHeaders()
        headers.add("ETag", live.etag)
        headers.add("Cache-Control", "public, max-age=\(configuration.manifestMaxAge), must-revalidate")
        if let tags = request.headers["If-None-Match"], tags.split(separator: ",").contains(where: {
            let tag = $0.trimmingCharacters(in: .whitespaces)
            return tag == live.etag || tag == "W/" + live.etag || tag == "*"
        }) {
            return HTTPResponse(status: 304, headers: headers)
        }
        headers.add("Content-Type", "application/json")
        return HTTPResponse(status: 200, headers: headers, body: .bytes(live.envelope))
    }

    private func blob(_ app: String, _ sha256: String) throws -> HTTPResponse {
        guard Hex.isSHA256(sha256) else { throw DepotError(400, "invalid_hash", "a blob is named by 64 lower-case hex digits") }
        try requireApp(app)
        guard let file = blobs.open(sha256) else { throw DepotError.notFound("blob \(sha256)") }
        let size = try file.size()
        var headers = HTTPHeaders()
        headers.add("Content-Type", "application/octet-stream")
        headers.add("ETag", "\"\(sha256)\"")
        headers.add("Cache-Control", "public, max-age=31536000, immutable")
        // The descriptor passes to the response, which passes it to libmicrohttpd (sendfile).
        return HTTPResponse(status: 200, headers: headers, body: .file(FileRegion(descriptor: file.release(), offset: 0, length: size)))
    }

    // MARK: Writes

    private func authorize(_ request: HTTPRequest, app: String) throws {
        guard let header = request.headers["Authorization"] else { throw DepotError.missingToken }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { throw DepotError.missingToken }
        guard let token = tokens.authenticate(String(parts[1]).trimmingCharacters(in: .whitespaces)) else { throw DepotError.badToken }
        guard token.app == app else { throw DepotError.forbidden("this token is scoped to another app") }
        guard token.role == .publisher || token.role == .admin else { throw DepotError.forbidden("this token cannot publish") }
    }

    private func upload(_ app: String, _ pack: String, _ request: HTTPRequest) throws -> HTTPDisposition {
        guard Identifier.isValidPack(pack) else { throw DepotError.invalidID("pack id") }
        try authorize(request, app: app)
        try requireApp(app)
        let length = request.contentLength
        if request.headers["Transfer-Encoding"] == nil && length == nil {
            throw DepotError(411, "length_required", "send Content-Length or Transfer-Encoding: chunked")
        }
        if let length, length > configuration.maximumPackSize { throw DepotError.tooLarge(configuration.maximumPackSize) }
        let policyText = request.queryValue("policy") ?? "prefetch"
        guard let policy = PackEntry.Policy(rawValue: policyText) else {
            throw DepotError.badRequest("policy must be essential, prefetch or onDemand")
        }
        let tags = request.query.filter { $0.name == "tag" }.map(\.value)
        guard tags.allSatisfy({ !$0.isEmpty && $0.count <= 64 }), tags.count <= 32 else {
            throw DepotError.badRequest("tags are 1–64 characters, at most 32")
        }
        var expected: String?
        if let checksum = request.headers["X-Depot-SHA256"] {
            guard Hex.isSHA256(checksum.lowercased()) else { throw DepotError.badRequest("X-Depot-SHA256 must be 64 hex digits") }
            expected = checksum.lowercased()
        }
        let contentType = request.headers["Content-Type"] ?? "application/octet-stream"
        let upload = PackUploadRequest(
            app: app, pack: pack, policy: policy, tags: Array(Set(tags)).sorted(), contentType: contentType,
            expectedPlaintextSHA256: expected, declaredLength: length
        )
        let receiver = try PackUpload(request: upload, origin: self)
        if length == 0 { return .respond(receiver.finish()) }
        return .receiveBody(receiver)
    }

    /// Puts a stored blob into the app's next release, published at once.
    func publish(_ summary: PackSummary, for request: PackUploadRequest) throws -> HTTPResponse {
        let url = publicURL + "/v1/apps/\(request.app)/blobs/\(summary.sha256)"
        var entry = PackEntry(
            id: request.pack, revision: 1, url: url, size: summary.size, sha256: summary.sha256,
            installSize: summary.plaintextSize, plaintextSHA256: summary.plaintextSHA256, policy: request.policy,
            tags: request.tags, keyID: summary.keyID, contentType: request.contentType
        )
        var keptOldBlob = false
        let published = try releases.publish(request.app) { packs in
            var packs = packs
            if let index = packs.firstIndex(where: { $0.id == request.pack }) {
                let old = packs[index]
                if old.plaintextSHA256 == summary.plaintextSHA256 {
                    // Same content: keep the stored container (devices keep their copy) and its revision.
                    keptOldBlob = true
                    entry = PackEntry(
                        id: old.id, revision: old.revision, url: old.url, size: old.size, sha256: old.sha256,
                        installSize: old.installSize, plaintextSHA256: old.plaintextSHA256, policy: request.policy,
                        tags: request.tags, keyID: old.keyID, contentType: request.contentType
                    )
                    if entry == old { return nil }
                } else {
                    entry.revision = old.revision + 1
                }
                packs[index] = entry
            } else {
                packs.append(entry)
            }
            return packs
        }
        if keptOldBlob { blobs.remove(summary.sha256) }
        let version = try published?.version ?? releases.current(request.app)?.version ?? 0
        let body = PublishResult(
            app: request.app, pack: entry, release: version, changed: published != nil,
            manifestURL: publicURL + "/v1/apps/\(request.app)/manifest"
        )
        return .bytes(Array(try StoredJSON.encoder.encode(body)) + [10], status: published != nil ? 201 : 200, contentType: "application/json")
    }
}

/// The body of a successful upload.
struct PublishResult: Codable {
    var app: String
    var pack: PackEntry
    var release: Int
    var changed: Bool
    var manifestURL: String
}
