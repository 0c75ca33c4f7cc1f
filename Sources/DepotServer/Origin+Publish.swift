import DepotCore
import DepotHTTP
import Foundation

/// What content teams call.
extension Origin {
    func upload(_ app: String, _ pack: String, _ request: HTTPRequest) throws -> HTTPDisposition {
        guard Identifier.isValidPack(pack) else { throw DepotError.invalidID("pack id") }
        try authorize(request, app: app)
        _ = try requireApp(app)
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
        metrics.published(app: request.app, changed: published != nil)
        metrics.uploaded(bytes: summary.plaintextSize)
        let version = try published?.version ?? releases.current(request.app)?.version ?? 0
        let body = PublishResult(
            app: request.app, pack: entry, release: version, changed: published != nil,
            manifestURL: publicURL + "/v1/apps/\(request.app)/manifest"
        )
        var response = HTTPResponse.bytes(
            Array(try StoredJSON.encoder.encode(body)) + [10], status: published != nil ? 201 : 200, contentType: "application/json"
        )
        response.route = "publish"
        return response
    }
}

extension Origin {
    /// `POST …/rollback?to=N`: publishes a new release (versions only go up) whose packs are
    /// release N's. A pack whose content differs from the live one gets the next revision, so
    /// devices replace it; blobs are never deleted, so every older release stays installable.
    func rollback(_ app: String, _ request: HTTPRequest) throws -> HTTPResponse {
        try authorize(request, app: app, admin: true)
        _ = try requireApp(app)
        guard let text = request.queryValue("to"), text.count <= 9, let target = Int(text), target > 0 else {
            throw DepotError.badRequest("name the release to roll back to: ?to=N")
        }
        guard let old = try releases.release(app, target) else { throw DepotError.notFound("release \(target) of app \(app)") }
        for pack in old.manifest.packs where !blobs.contains(pack.sha256) {
            throw DepotError(409, "blob_missing", "release \(target) references blob \(pack.sha256), which is no longer stored")
        }
        var removed: [String] = []
        let published = try releases.publish(app) { live in
            removed = live.map(\.id).filter { id in !old.manifest.packs.contains { $0.id == id } }
            let current = Dictionary(live.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
            let restored = old.manifest.packs.map { pack -> PackEntry in
                guard let now = current[pack.id] else { return pack }
                var restored = pack
                // Same container: the live revision; other content: the next one, so devices replace it.
                restored.revision = now.sha256 == pack.sha256 ? now.revision : now.revision + 1
                return restored
            }
            return restored.sorted { $0.id < $1.id } == live.sorted { $0.id < $1.id } ? nil : restored
        }
        let version = try published?.version ?? releases.current(app)?.version ?? 0
        let body = RollbackResult(
            app: app, rolledBackTo: target, release: version, changed: published != nil, packs: old.manifest.packs.map(\.id), removed: removed
        )
        var response = HTTPResponse.bytes(
            Array(try StoredJSON.encoder.encode(body)) + [10], status: published != nil ? 201 : 200, contentType: "application/json"
        )
        response.route = "rollback"
        return response
    }
}

/// The body of a rollback.
struct RollbackResult: Codable {
    var app: String
    var rolledBackTo: Int
    /// The new release (or the live one, when it already had that content).
    var release: Int
    var changed: Bool
    var packs: [String]
    /// Packs of the live release that the older one did not have: devices delete them.
    var removed: [String]
}

/// The body of a successful upload.
struct PublishResult: Codable {
    var app: String
    var pack: PackEntry
    var release: Int
    var changed: Bool
    var manifestURL: String
}
