import DepotCore
import DepotHTTP
import Foundation
import Synchronization

/// What apps, devices and CDN edges read: manifests, releases, blobs, the Info.plist keys and
/// the listings. Each answer goes through ``Representation`` (validators, preconditions, ranges).
struct ReadHandlers: Sendable {
    let releases: ReleaseStore
    let blobs: any BlobStore
    /// The bucket, when blobs live in one: their responses stream from it (decided once, not per request).
    let bucket: S3BlobStore?
    let urls: PublicURL
    /// `max-age` of a live manifest, in seconds.
    let manifestMaxAge: Int
    /// Large live envelopes' answers, sent by sendfile.
    let largeManifests: LargeManifestAnswers
    /// Managed apps' download manifests, by the ETag of the release they come from.
    let downloadManifests = DownloadManifestBodies()
    /// An app's settings (cached by the caller).
    let settings: @Sendable (String) -> AppSettings?
    /// Hot blobs' answers, made once (a data folder's blobs; never the bucket's).
    let answers: BlobResponses
    /// The Info.plist keys per app and channel, with the live release's ETag and the settings
    /// they were made from; and the release lists.
    let plists = InfoPlistBodies()

    init(
        releases: ReleaseStore, blobs: any BlobStore, urls: PublicURL, manifestMaxAge: Int, answers: BlobResponses = BlobResponses(limits: .none, blobsFolder: nil),
        settings: @escaping @Sendable (String) -> AppSettings?
    ) {
        (self.releases, self.blobs, self.urls, self.manifestMaxAge, self.settings) = (releases, blobs, urls, manifestMaxAge, settings)
        bucket = blobs as? S3BlobStore
        self.answers = answers
        largeManifests = LargeManifestAnswers(folder: releases.folder)
    }

    /// `GET …/manifest` and `GET …/channels/{channel}/manifest`: the live envelope.
    func manifest(_ context: RequestContext) throws -> HTTPResponse {
        let channel = context.parameters["channel"] ?? ReleaseStore.production
        guard let (live, source) = try releases.served(context.app, channel: channel) else {
            throw DepotError.notFound(channel == ReleaseStore.production ? "a release of app \(context.app)" : "channel \(channel) of app \(context.app)")
        }
        let representation = Representation(
            source: source, size: Int64(live.size), etag: live.etag, lastModified: live.publishedAt,
            contentType: "application/json",
            cacheControl: Representation.cacheControl("public, max-age=\(manifestMaxAge), must-revalidate", gated: context.gated)
        )
        // A large envelope's plain GET or HEAD: its answer made once, sent by sendfile.
        if !Representation.isConditional(context.request), let answer = largeManifests.answer(
            live, key: context.app + "\u{0}" + channel + (context.gated ? "\u{0}gated" : ""), headers: representation.wholeHeaders, threads: answers.limits.serverThreads
        ) {
            return HTTPResponse(status: 200, body: .prepared(answer))
        }
        return representation.response(to: context.request)
    }

    /// `GET …/download-manifest` and `GET …/channels/{channel}/download-manifest`: a managed
    /// app's live release as the download manifest `AssetPackManager` reads. The system may add
    /// query parameters (a platform): accepted, and kept in the access log.
    func downloadManifest(_ context: RequestContext) throws -> HTTPResponse {
        let channel = context.parameters["channel"] ?? ReleaseStore.production
        guard settings(context.app)?.isManaged == true else {
            throw DepotError.notFound("a download manifest of app \(context.app): it is unmanaged (its devices read \(urls.manifest(context.app, channel: channel)))")
        }
        guard let live = try releases.current(context.app, channel: channel) else {
            throw DepotError.notFound(channel == ReleaseStore.production ? "a release of app \(context.app)" : "channel \(channel) of app \(context.app)")
        }
        let (body, etag) = try downloadManifests.body(of: live, key: context.app + "\u{0}" + channel)
        return Representation(
            source: .shared(body), size: Int64(body.count), etag: etag, lastModified: live.publishedAt, contentType: "application/json",
            cacheControl: Representation.cacheControl("public, max-age=\(manifestMaxAge), must-revalidate", gated: context.gated)
        ).response(to: context.request)
    }

    /// `GET …/releases/{release}`: an envelope, immutable.
    func release(_ context: RequestContext) throws -> HTTPResponse {
        let version = ReleaseNumber.parse(context["release"])!
        // Its bytes as they are (kept, or its file by sendfile), with the ETag and date kept per file version: no decoding per request.
        guard let (body, facts) = try releases.releaseFile(context.app, version) else { throw DepotError.notFound("release \(version) of app \(context.app)") }
        let source: Representation.Source
        switch body {
        case .kept(let bytes): source = .shared(bytes)
        case .file(let file): source = .file(file)
        }
        return Representation(
            source: source, size: facts.size, etag: facts.etag, lastModified: facts.publishedAt,
            contentType: "application/json", cacheControl: Representation.cacheControl("public, max-age=31536000, immutable", gated: context.gated)
        ).response(to: context.request)
    }

    /// `GET …/releases[?before=V][&limit=N]`: a page of the app's releases (the newest `limit`,
    /// 100 by default and 500 at most, below release `before`), oldest first, with the app's
    /// channels, the count of all its releases and the path of the next (older) page. What a
    /// request costs does not depend on the history: the first page is kept, made once per
    /// change; another is copied from the kept summaries of its releases.
    func releaseList(_ context: RequestContext) throws -> HTTPResponse {
        let app = context.app
        var limit = ReleaseHistory.defaultPage
        if let text = context.query("limit") {
            guard let value = Int(text), (1...ReleaseHistory.largestPage).contains(value) else { throw DepotError.badRequest("limit is 1 to \(ReleaseHistory.largestPage)") }
            limit = value
        }
        var before: Int?
        if let text = context.query("before") {
            guard let value = Int(text), value >= 1 else { throw DepotError.badRequest("before is a release number") }
            before = value
        }
        let history = try releases.history.snapshot(app)
        let source: Representation.Source
        let size: Int
        let etag: String
        if before == nil && limit == ReleaseHistory.defaultPage {
            (source, size, etag) = (.shared(history.firstPage.body), history.firstPage.body.count, history.firstPage.etag)
        } else {
            let body = history.page(before: before, limit: limit)
            (source, size, etag) = (.bytes(body), body.count, "\"\(history.digest)-b\(before ?? 0)-l\(limit)\"")
        }
        return Representation(
            source: source, size: Int64(size), etag: etag, lastModified: nil, contentType: "application/json",
            cacheControl: Representation.cacheControl("public, max-age=0, must-revalidate", gated: context.gated)
        ).response(to: context.request)
    }

    /// `GET …/channels`: the channels and the release each serves (kept, made once per change).
    func channelList(_ context: RequestContext) throws -> HTTPResponse {
        let kept = try releases.history.snapshot(context.app).channelList
        return Representation(
            source: .shared(kept.body), size: Int64(kept.body.count), etag: kept.etag, lastModified: nil, contentType: "application/json",
            cacheControl: Representation.cacheControl("public, max-age=0, must-revalidate", gated: context.gated)
        ).response(to: context.request)
    }

    /// `GET …/blobs/{sha256}`: a pack's container, by sendfile. Only a blob that a release of
    /// this app names: the store is shared by every app (content-addressed), so another app's
    /// blob, or a draft's that no release has named yet, is 404 here whatever the store holds.
    func blob(_ context: RequestContext) throws -> HTTPResponse {
        let sha256 = context["sha256"]
        guard try releases.releaseNames(sha256, app: context.app) else { throw DepotError.notFound("blob \(sha256) in a release of app \(context.app)") }
        let gated = context.gated
        func representation(_ source: Representation.Source, size: Int64, modified: Date?) -> Representation {
            Representation(
                source: source, size: size, etag: TextAssembler.quoted(sha256), lastModified: modified, contentType: "application/octet-stream",
                cacheControl: Representation.cacheControl("public, max-age=31536000, immutable", gated: gated)
            )
        }
        if let bucket {
            // From the bucket: one HEAD, then exactly the bytes the response carries (the range,
            // if any) streamed from a ranged GET while they are sent.
            guard let blob = try bucket.stat(sha256) else { throw DepotError.notFound("blob \(sha256)") }
            return representation(.stream { offset, length in bucket.reader(sha256, start: offset, length: length) }, size: blob.size, modified: blob.modified)
                .response(to: context.request)
        }
        if answers.isEnabled && !Representation.isConditional(context.request) {
            // A plain GET or HEAD: the answer made once for this blob, queued as it is.
            let made = try answers.answer(.init(sha256: sha256, gated: gated)) { representation(.bytes([]), size: $0, modified: $1).wholeHeaders }
            switch made {
            case .answer(let prepared): return HTTPResponse(status: 200, body: .prepared(prepared))
            case .opened(let blob): return representation(.file(blob.file), size: blob.size, modified: blob.modified).response(to: context.request)
            case .missing: break  // Looked for once more by its path below (the store decides).
            }
        }
        if answers.isEnabled {
            // A range or a conditional request: a small blob kept in memory answers it, with no file
            // opened (it is kept by this request if it was not yet).
            let key = BlobResponses.Key(sha256: sha256, gated: gated)
            if let kept = answers.keptBytes(key) {
                return representation(.shared(kept.bytes), size: kept.size, modified: kept.modified).response(to: context.request)
            }
            switch try answers.answer(key, headers: { representation(.bytes([]), size: $0, modified: $1).wholeHeaders }) {
            case .answer:
                if let kept = answers.keptBytes(key) {
                    return representation(.shared(kept.bytes), size: kept.size, modified: kept.modified).response(to: context.request)
                }
            case .opened(let blob): return representation(.file(blob.file), size: blob.size, modified: blob.modified).response(to: context.request)
            case .missing: break
            }
        }
        guard let blob = try blobs.open(sha256) else { throw DepotError.notFound("blob \(sha256)") }
        return representation(.file(blob.file), size: blob.size, modified: blob.modified).response(to: context.request)
    }

    /// `GET …/info-plist[?channel=]`: the Background Assets keys of a channel's release.
    func infoPlist(_ context: RequestContext) throws -> HTTPResponse {
        let app = context.app
        let channel = try UploadParameters.channel(context.query("channel"))
        guard let live = try releases.current(app, channel: channel) else { throw DepotError.notFound("a release of app \(app) on channel \(channel)") }
        let appSettings = settings(app)
        // Made once per live release and settings: the keys walk every pack of the release.
        let key = app + "\u{0}" + channel
        let body: [UInt8]
        if let known = plists.kept.withLock({ $0[key] }), known.etag == live.etag, known.settings == appSettings {
            body = known.body
        } else {
            body = Array(BackgroundAssetsKeys(release: try live.manifest, envelopeSize: Int64(live.size), app: appSettings, channel: channel, urls: urls).xml.utf8)
            plists.kept.withLock { plists in
                // Keyed by live channels (the route found a release): bounded by the apps and
                // --max-channels, so a miss is only a channel's first request or a new release.
                plists[key] = (live.etag, appSettings, body)
            }
        }
        return Representation(
            source: .bytes(body), size: Int64(body.count), etag: Representation.etag(of: body), lastModified: live.publishedAt,
            contentType: "application/xml; charset=utf-8", cacheControl: Representation.cacheControl("public, max-age=0, must-revalidate", gated: context.gated)
        ).response(to: context.request)
    }
}

/// The Info.plist keys' bodies, per app and channel (bounded by the apps and their channels).
final class InfoPlistBodies: Sendable {
    let kept = Mutex<[String: (etag: String, settings: AppSettings?, body: [UInt8])]>([:])
}

/// Managed apps' download manifests, made once per live release and shared by every response;
/// one per app and channel (a new release replaces its channel's, whatever the history).
final class DownloadManifestBodies: Sendable {
    private let bodies = Mutex<[String: (etag: String, made: (SharedBytes, String))]>([:])

    /// The download manifest of `live` (served on the channel `key` names) and its ETag.
    func body(of live: LiveManifest, key: String) throws -> (SharedBytes, String) {
        if let hit = bodies.withLock({ $0[key] }), hit.etag == live.etag { return hit.made }
        let bytes = DownloadManifest(release: try live.manifest).encoded()
        let made = (SharedBytes(bytes), Representation.etag(of: bytes))
        bodies.withLock { $0[key] = (live.etag, made) }
        return made
    }
}
