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
            expectedPlaintextSHA256: expected, declaredLength: length, release: request.queryValue("release") == "true",
            base: try baseParameter(request), force: request.queryValue("force") == "true", channel: try channelParameter(request)
        )
        let receiver = try PackUpload(request: upload, origin: self)
        if length == 0 { return .respond(receiver.finish()) }
        return .receiveBody(receiver)
    }

    /// Stages a stored blob for the app's next release, and publishes it at once with `?release=true`.
    func publish(_ summary: PackSummary, installSize: Int64, for request: PackUploadRequest) throws -> HTTPResponse {
        let entry = PackEntry(
            id: request.pack, revision: 0, url: publicURL + "/v1/apps/\(request.app)/blobs/\(summary.sha256)", size: summary.size,
            sha256: summary.sha256, installSize: installSize, plaintextSHA256: summary.plaintextSHA256, policy: request.policy,
            tags: request.tags, keyID: summary.keyID, contentType: request.contentType
        )
        // A pack staged twice: the earlier upload's blob is deleted once the draft no longer needs it.
        var superseded: String?
        let add: (inout Staging, [PackEntry]) -> Void = { staging, live in
            if let earlier = staging.upserts[request.pack], !live.contains(where: { $0.sha256 == earlier.sha256 }) {
                superseded = earlier.sha256
            }
            staging.upserts[request.pack] = entry
            staging.removals.remove(request.pack)
        }
        metrics.uploaded(bytes: summary.plaintextSize)
        if request.release {
            let response: HTTPResponse
            do {
                response = try releaseStaged(request.app, channel: request.channel, base: request.base, force: request.force, pack: request.pack, adding: add)
            } catch let error as DepotError where error.status == 409 {
                // Refused before anything changed: nothing was staged, the new blob is not needed.
                blobs.remove(summary.sha256)
                throw error
            }
            if let superseded { blobs.remove(superseded) }
            return response
        }
        let live = try releases.stage(request.app, channel: request.channel, add)
        if let superseded { blobs.remove(superseded) }
        let preview = Staging(upserts: [request.pack: entry]).merged(into: live).packs.first { $0.id == request.pack } ?? entry
        let body = PublishResult(app: request.app, pack: preview, release: try releases.current(request.app, channel: request.channel)?.version,
                                 staged: true, changed: true, channel: request.channel, manifestURL: manifestURL(request.app, channel: request.channel))
        return try json(body, status: 202, route: "publish")
    }

    /// Publishes the staged draft; answers with the release and, for an upload, its pack.
    func releaseStaged(
        _ app: String, channel: String, base: Int?, force: Bool, pack: String? = nil, adding: ((inout Staging, [PackEntry]) throws -> Void)? = nil
    ) throws -> HTTPResponse {
        let (release, unused) = try releases.publishStaged(
            app, channel: channel, base: base, adding: adding, check: force ? nil : allowanceGuard(app, channel: channel)
        )
        for blob in unused { blobs.remove(blob) }
        metrics.published(app: app, changed: release != nil)
        let live = try releases.current(app, channel: channel)
        let body = PublishResult(
            app: app, pack: pack.flatMap { live?.manifest[pack: $0] }, release: live?.version, staged: false, changed: release != nil,
            channel: channel, manifestURL: manifestURL(app, channel: channel)
        )
        return try json(body, status: release != nil ? 201 : 200, route: "publish")
    }

    /// `POST …/releases[?base=N]`: the staged draft becomes the next signed release.
    func publishRelease(_ app: String, _ request: HTTPRequest) throws -> HTTPResponse {
        try authorize(request, app: app)
        _ = try requireApp(app)
        return try releaseStaged(
            app, channel: try channelParameter(request), base: try baseParameter(request), force: request.queryValue("force") == "true"
        )
    }

    /// Refuses a release whose Info.plist keys exceed the allowances recorded for shipped builds.
    func allowanceGuard(_ app: String, channel: String) -> (Manifest, Int64) throws -> Void {
        let allowances = settings(app)?.allowances
        let manifestURL = manifestURL(app, channel: channel)
        return { manifest, envelopeSize in
            guard let allowances else { return }
            let excesses = allowances.excesses(BackgroundAssetsKeys(manifest: manifest, manifestSize: envelopeSize, manifestURL: manifestURL))
            guard excesses.isEmpty else {
                throw DepotError(409, "allowance_exceeded", excesses.joined(separator: "; ")
                    + ". Nothing was published; ship builds with larger allowances, or repeat with ?force=true")
            }
        }
    }

    /// `DELETE …/packs/{pack}[?removeLive=true]`: stages the pack's removal (or drops its staged upload).
    func removePack(_ app: String, _ pack: String, _ request: HTTPRequest) throws -> HTTPResponse {
        guard Identifier.isValidPack(pack) else { throw DepotError.invalidID("pack id") }
        try authorize(request, app: app)
        _ = try requireApp(app)
        let confirmed = request.queryValue("removeLive") == "true"
        var isLive = false
        var dropped: String?
        try releases.stage(app) { staging, live in
            isLive = live.contains { $0.id == pack }
            let staged = staging.upserts.removeValue(forKey: pack)
            guard isLive || staged != nil else { throw DepotError.notFound("pack \(pack) in the live release or the draft of app \(app)") }
            if isLive {
                guard confirmed else {
                    throw DepotError(409, "live_pack", "pack \(pack) is live: devices that installed it will delete it at their next sync; repeat with ?removeLive=true to stage its removal")
                }
                staging.removals.insert(pack)
            }
            if let staged, !live.contains(where: { $0.sha256 == staged.sha256 }) { dropped = staged.sha256 }
        }
        // Only once the draft no longer references it.
        if let dropped { blobs.remove(dropped) }
        if request.queryValue("release") == "true" {
            return try releaseStaged(
                app, channel: try channelParameter(request), base: try baseParameter(request), force: request.queryValue("force") == "true"
            )
        }
        let note = isLive ? "staged: the next release drops \(pack), and devices that installed it will delete it" : "the staged upload of \(pack) was dropped"
        return try json(RemovalResult(app: app, pack: pack, live: isLive, note: note), status: 200, route: "publish")
    }

    /// `GET …/staging`: the draft, as the next release would list it.
    func stagingView(_ app: String, _ request: HTTPRequest) throws -> HTTPResponse {
        try authorize(request, app: app)
        _ = try requireApp(app)
        let staging = try releases.staging(app)
        let live = try releases.current(app, channel: try channelParameter(request))
        let next = staging.merged(into: live?.manifest.packs ?? []).packs
        let body = StagingView(app: app, base: live?.version ?? 0, changed: staging.upserts.keys.sorted(),
                               removed: staging.removals.sorted(), next: next)
        return try json(body, status: 200, route: "staging")
    }

    /// `?channel=NAME`, production by default.
    func channelParameter(_ request: HTTPRequest) throws -> String {
        guard let name = request.queryValue("channel") else { return ReleaseStore.production }
        guard Identifier.isValidChannel(name) else { throw DepotError.invalidID("channel") }
        return name
    }

    func baseParameter(_ request: HTTPRequest) throws -> Int? {
        guard let text = request.queryValue("base") else { return nil }
        guard text.count <= 9, let base = Int(text), base >= 0 else { throw DepotError.badRequest("base must be the live release number") }
        return base
    }

    func json(_ value: some Encodable, status: Int, route: String) throws -> HTTPResponse {
        var response = HTTPResponse.bytes(Array(try StoredJSON.encoder.encode(value)) + [10], status: status, contentType: "application/json")
        response.route = route
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
        let channel = try channelParameter(request)
        var removed: [String] = []
        let published = try releases.publish(app, channel: channel, change: { live in
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
        }, check: request.queryValue("force") == "true" ? nil : allowanceGuard(app, channel: channel))
        let version = try published?.version ?? releases.current(app, channel: channel)?.version ?? 0
        let body = RollbackResult(
            app: app, channel: channel, rolledBackTo: target, release: version, changed: published != nil, packs: old.manifest.packs.map(\.id),
            removed: removed
        )
        return try json(body, status: published != nil ? 201 : 200, route: "rollback")
    }
}

/// The body of a rollback.
struct RollbackResult: Codable {
    var app: String
    var channel: String
    var rolledBackTo: Int
    /// The new release (or the live one, when it already had that content).
    var release: Int
    var changed: Bool
    var packs: [String]
    /// Packs of the live release that the older one did not have: devices delete them.
    var removed: [String]
}

/// The body of an upload or a release.
struct PublishResult: Codable {
    var app: String
    /// The pack as the release lists it (or, when staged, would list it).
    var pack: PackEntry?
    /// The live release after the call; nil while nothing was ever released.
    var release: Int?
    var staged: Bool
    var changed: Bool
    /// The channel the release went to (or, when staged, would go to).
    var channel: String
    var manifestURL: String
}

struct RemovalResult: Codable {
    var app: String
    var pack: String
    var live: Bool
    var note: String
}

struct StagingView: Codable {
    var app: String
    var base: Int
    var changed: [String]
    var removed: [String]
    var next: [PackEntry]
}
