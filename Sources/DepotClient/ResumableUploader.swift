import DepotCore
import Foundation

/// Publishes a file through the origin's tus 1.0 endpoint (`/v1/apps/{app}/uploads`): creates
/// an upload (or picks up a known one), streams the file, and after a dropped connection or a
/// timeout asks for the offset and goes on from there, with exponential backoff.
///
/// Where the transport streams files (`http://`, by `sendfile`) the rest of the file goes in
/// one chunked PATCH, and the file's SHA-256, computed on another thread while it is sent,
/// follows it in a `Depot-Content-SHA256` trailer; elsewhere (URLSession, which cannot send
/// trailers) the SHA-256 is computed first and goes in the upload's metadata, and the file in
/// PATCHes of 8 MiB. Either way memory stays flat and the origin checks the whole file end to end.
public struct ResumableUploader: Sendable {
    /// What the pack is published as: the upload's tus metadata.
    public struct Options: Sendable {
        public var pack: String
        public var policy: String = "prefetch"
        public var tags: [String] = []
        public var contentType: String = "application/octet-stream"
        public var release = false
        public var base: Int?
        public var force = false
        public var channel: String?
        /// Managed apps: the bytes a compressed Apple Archive unpacks to.
        public var installSize: Int64?
        /// Managed apps: the installation events an essential or prefetch pack applies to.
        public var installationEventTypes: [String]?
        /// Managed apps: the pack's `userInfo`, a JSON object.
        public var userInfo: String?
        /// The language the pack is localized for (`fr-CA`); its id ends with `-` and it.
        public var language: String?

        public init(pack: String) { self.pack = pack }

        /// The settings as tus metadata, without the checksum (which names the content).
        public var metadata: String { metadata(sha256: nil) }

        func metadata(sha256: String?) -> String {
            var pairs: [(String, String)] = [("pack", pack), ("policy", policy), ("contentType", contentType)]
            if let sha256 { pairs.append(("sha256", sha256)) }
            if !tags.isEmpty { pairs.append(("tags", tags.joined(separator: ","))) }
            if release { pairs.append(("release", "true")) }
            if let base { pairs.append(("base", String(base))) }
            if force { pairs.append(("force", "true")) }
            if let channel { pairs.append(("channel", channel)) }
            if let installSize { pairs.append(("installSize", String(installSize))) }
            if let installationEventTypes { pairs.append(("events", installationEventTypes.joined(separator: ","))) }
            if let userInfo { pairs.append(("userInfo", userInfo)) }
            if let language { pairs.append(("language", language)) }
            return pairs.map { "\($0.0) \(Data($0.1.utf8).base64EncodedString())" }.joined(separator: ",")
        }
    }

    public var server: URL
    public var app: String
    public var token: String
    /// When to try again after a transport failure, and how long to wait: by default about a
    /// minute in all (`RetryPolicy.uploads`).
    public var retry = RetryPolicy.uploads
    /// Seconds without progress before a request fails.
    public var timeout: TimeInterval = 60
    /// What https trusts and where names connect.
    public var transport = TransportOptions()
    /// Where files stream, send the file's SHA-256 after it (a trailer) instead of reading the
    /// file once before the upload. Through a proxy that drops trailers (nginx does) the origin
    /// keeps the upload at its last commit and the rest goes again with the digest in a header;
    /// `trailersDropped` tells the caller, who can turn this off for that server.
    public var digestAfterBody = true

    public init(server: URL, app: String, token: String) {
        self.server = server
        self.app = app
        self.token = token
    }

    private var authorization: (String, String) { ("Authorization", "Bearer \(token)") }
    private static let tus = ("Tus-Resumable", "1.0.0")
    /// The trailer that carries the whole file's SHA-256 after the PATCH that completes it.
    static let lateChecksum = "Depot-Content-SHA256"

    /// Uploads `file`; `resume` is an upload URL from an earlier, interrupted run. `sha256` is
    /// the file's plaintext SHA-256 when the caller has it; otherwise it is computed (while
    /// sending where files stream, before elsewhere). `created` learns the upload URL as soon
    /// as there is one (to keep for a later run); `progress` gets (bytes stored by the origin,
    /// total). Returns the origin's JSON answer for the pack.
    public func upload(
        file path: String, sha256: String? = nil, options: Options, resume: URL?,
        created: @Sendable (URL) -> Void = { _ in }, progress: @escaping @Sendable (Int64, Int64) -> Void = { _, _ in },
        trailersDropped: @Sendable () -> Void = {}
    ) async throws -> [UInt8] {
        let transport = HTTPTransport(timeout: timeout, options: self.transport)
        let length = try FileDescriptor.openForReading(path).size()
        // Hashed alongside the PATCH where a trailer can carry the digest; first otherwise.
        let streams = HTTPTransport.streamsFiles(to: server) && digestAfterBody
        let late = sha256 == nil && streams ? BackgroundFileDigest(path: path) : nil
        var upload: URL
        var offset: Int64
        if let resume { try checkSameOrigin(resume) }
        if let resume, let known = try await offsetOf(resume, length: length, transport) {
            (upload, offset) = (resume, known)
        } else {
            // Only a new upload carries the digest in its metadata (a resumed one has its own).
            let early = try sha256 ?? (streams ? nil : SHA256Hasher.hexDigest(ofFile: path))
            upload = try await create(length: length, metadata: options.metadata(sha256: early), transport)
            offset = 0
        }
        created(upload)
        progress(offset, length)
        var failures = 0
        var stalls = 0
        var trailersArrive = true
        while offset < length {
            do {
                let reached = try await patch(
                    upload, file: path, offset: offset, length: length, digest: late, trailer: trailersArrive, transport, progress: progress
                )
                // An origin (or something posing as one) that acknowledges a PATCH without taking
                // its bytes would be sent the same part forever.
                if reached <= offset {
                    stalls += 1
                    guard stalls < Self.stallLimit else {
                        throw ClientError(.http, "\(upload): the origin acknowledged \(Self.stallLimit) parts in a row without advancing past offset \(offset); stopped")
                    }
                } else {
                    stalls = 0
                }
                offset = reached
                failures = 0
            } catch is TrailerDropped {
                // Something between here and the origin drops trailers: the digest goes as a header.
                trailersArrive = false
                trailersDropped()
                guard let known = try await offsetOf(upload, length: length, transport) else {
                    throw ClientError(.http, "the upload \(upload) is gone (expired or removed); run again to start over")
                }
                offset = known
                progress(offset, length)
            } catch let error as ClientError where error.kind == .transport {
                failures += 1
                guard failures <= retry.retries else { throw error }
                await retry.wait(beforeRetry: failures)
                try Task.checkCancellation()
                guard let known = try await offsetOf(upload, length: length, transport) else {
                    throw ClientError(.http, "the upload \(upload) is gone (expired or removed); run again to start over")
                }
                offset = known
                progress(offset, length)
            }
        }
        var status = try await statusOf(upload, transport)
        if !status.complete {
            // Every byte arrived but the origin stopped before it stored the pack (a restart, its
            // store down): a PATCH with no body at the end finishes it.
            _ = try await patch(upload, file: path, offset: length, length: length, digest: late, trailer: false, transport, progress: progress)
            status = try await statusOf(upload, transport)
        }
        guard status.complete else { throw ClientError(.http, "the origin did not finish the upload \(upload)") }
        return status.body
    }

    /// The upload's status (`GET`): whether the pack is stored, and the answer's body.
    private func statusOf(_ upload: URL, _ transport: HTTPTransport) async throws -> (complete: Bool, body: [UInt8]) {
        let status = try await transport.exchange(.init(method: "GET", url: upload, headers: [authorization, Self.tus]))
        guard status.status == 200 else { throw ClientError.http(status.status, upload.absoluteString, Self.message(status.body)) }
        struct Status: Decodable { var complete: Bool }
        return ((try? JSONDecoder().decode(Status.self, from: Data(status.body)))?.complete == true, status.body)
    }

    /// The origin's offset for an upload of this length, or nil if it no longer has it.
    private func offsetOf(_ upload: URL, length: Int64, _ transport: HTTPTransport) async throws -> Int64? {
        let response = try await transport.exchange(.init(method: "HEAD", url: upload, headers: [authorization, Self.tus]))
        if response.status == 404 || response.status == 410 { return nil }
        guard response.status == 200, let offset = response.header("Upload-Offset").flatMap({ Int64($0) }) else {
            throw ClientError.http(response.status, upload.absoluteString, Self.message(response.body))
        }
        guard response.header("Upload-Length").flatMap({ Int64($0) }) == length else { return nil }
        return offset
    }

    private func create(length: Int64, metadata: String, _ transport: HTTPTransport) async throws -> URL {
        let endpoint = server.appendingPathComponent("v1/apps/\(app)/uploads")
        let response = try await transport.exchange(.init(method: "POST", url: endpoint, headers: [
            authorization, Self.tus, ("Upload-Length", String(length)), ("Upload-Metadata", metadata), ("Content-Length", "0"),
        ]))
        guard response.status == 201, let location = response.header("Location"), let url = URL(string: location, relativeTo: server) else {
            throw ClientError.http(response.status, endpoint.absoluteString, Self.message(response.body))
        }
        try checkSameOrigin(url.absoluteURL)
        return url.absoluteURL
    }

    /// Consecutive PATCHes acknowledged without progress before the upload fails.
    static let stallLimit = 3

    /// The bearer token goes only to the server it was given for: an upload URL (a `Location`, or
    /// one kept to resume) on another scheme, host or port is refused.
    private func checkSameOrigin(_ url: URL) throws {
        func origin(_ url: URL) -> String {
            let scheme = url.scheme?.lowercased() ?? ""
            return "\(scheme)://\(url.host?.lowercased() ?? ""):\(url.port ?? (scheme == "https" ? 443 : 80))"
        }
        guard origin(url) == origin(server) else {
            throw ClientError(.http, "the upload URL \(url.absoluteString) is not on \(origin(server)); the token is not sent there")
        }
    }

    /// The origin said the announced trailer did not arrive.
    private struct TrailerDropped: Error {}

    /// Sends the file from `offset`, to its end with `digest` in a trailer (or, when trailers do
    /// not get through, in a header once it is known) when given; returns the new offset.
    private func patch(
        _ upload: URL, file path: String, offset: Int64, length: Int64, digest: BackgroundFileDigest?, trailer: Bool, _ transport: HTTPTransport,
        progress: @escaping @Sendable (Int64, Int64) -> Void
    ) async throws -> Int64 {
        let count = HTTPTransport.streamsFiles(to: upload) ? length - offset : min(length - offset, 8 << 20)
        guard try FileDescriptor.openForReading(path).size() == length else {
            throw ClientError(.install, "\(path) changed while it was being published")
        }
        var headers = [authorization, Self.tus, ("Upload-Offset", String(offset)), ("Content-Type", "application/offset+octet-stream")]
        var request = HTTPTransport.Request(method: "PATCH", url: upload, headers: headers, body: .file(path: path, offset: offset, count: count))
        if let digest, offset + count == length, trailer {
            headers.append(("Trailer", Self.lateChecksum))
            request.headers = headers
            request.trailer = { [(Self.lateChecksum, try digest.value())] }
        } else {
            if let digest, offset + count == length { request.headers.append((Self.lateChecksum, try digest.value())) }
            request.headers.append(("Content-Length", String(count)))
        }
        let response = try await transport.exchange(request, limit: 1 << 20, progress: { sent in progress(offset + sent, length) })
        if response.status == 400, Self.message(response.body).hasPrefix("trailer_missing") { throw TrailerDropped() }
        if response.status == 409, ["offset_mismatch", "upload_busy"].contains(where: { Self.message(response.body).hasPrefix($0) }) {
            // Another attempt is still finishing on the origin: ask for the offset again.
            throw ClientError(.transport, "\(upload): \(Self.message(response.body))")
        }
        guard response.status == 204, let reached = response.header("Upload-Offset").flatMap(HTTPResponseParser.decimal), reached <= length else {
            throw ClientError.http(response.status, upload.absoluteString, Self.message(response.body))
        }
        progress(reached, length)
        return reached
    }

    /// The message of a JSON error body, or its first characters.
    public static func message(_ body: [UInt8]) -> String {
        struct Body: Decodable { struct E: Decodable { var code: String; var message: String }; var error: E }
        if let body = try? JSONDecoder().decode(Body.self, from: Data(body)) { return "\(body.error.code): \(body.error.message)" }
        return String(decoding: body.prefix(300), as: UTF8.self)
    }
}
