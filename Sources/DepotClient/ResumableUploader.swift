import DepotCore
import Foundation

/// Publishes a file through the origin's tus 1.0 endpoint (`/v1/apps/{app}/uploads`): creates
/// an upload (or picks up a known one), streams the file, and after a dropped connection or a
/// timeout asks for the offset and goes on from there, with exponential backoff.
///
/// Over `http://` the rest of the file goes in one PATCH, by `sendfile`; over `https://`
/// (URLSession) in PATCHes of 8 MiB. Either way memory stays flat.
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
            return pairs.map { "\($0.0) \(Data($0.1.utf8).base64EncodedString())" }.joined(separator: ",")
        }
    }

    public var server: URL
    public var app: String
    public var token: String
    /// Attempts after a transport failure before giving up: with the backoff (0.25 s doubling to
    /// 8 s), about a minute, which outlasts the origin's default 30 s connection timeout (the
    /// time it may take to notice that an earlier attempt's connection died).
    public var retries = 12
    public var timeout: TimeInterval = 60
    let transport: HTTPTransport

    public init(server: URL, app: String, token: String) {
        self.server = server
        self.app = app
        self.token = token
        transport = HTTPTransport(timeout: 3600)
    }

    private var authorization: (String, String) { ("Authorization", "Bearer \(token)") }
    private static let tus = ("Tus-Resumable", "1.0.0")

    /// Uploads `file`; `resume` is an upload URL from an earlier, interrupted run. `created`
    /// learns the upload URL as soon as there is one (to keep for a later run); `progress`
    /// gets (bytes stored by the origin, total). Returns the origin's JSON answer for the pack.
    public func upload(
        file path: String, sha256: String, options: Options, resume: URL?,
        created: @Sendable (URL) -> Void = { _ in }, progress: @escaping @Sendable (Int64, Int64) -> Void = { _, _ in }
    ) async throws -> [UInt8] {
        let length = try FileDescriptor.openForReading(path).size()
        var upload: URL
        var offset: Int64
        if let resume, let known = try await offsetOf(resume, length: length) {
            (upload, offset) = (resume, known)
        } else {
            upload = try await create(length: length, metadata: options.metadata(sha256: sha256))
            offset = 0
        }
        created(upload)
        progress(offset, length)
        var failures = 0
        while offset < length {
            do {
                offset = try await patch(upload, file: path, offset: offset, length: length, progress: progress)
                failures = 0
            } catch let error as ClientError where error.kind == .transport {
                failures += 1
                guard failures <= retries else { throw error }
                let delay = min(8.0, 0.25 * pow(2, Double(failures - 1))) * Double.random(in: 0.8...1.2)
                try await Task.sleep(for: .milliseconds(Int(delay * 1000)))
                guard let known = try await offsetOf(upload, length: length) else {
                    throw ClientError(.http, "the upload \(upload) is gone (expired or removed); run again to start over")
                }
                offset = known
                progress(offset, length)
            }
        }
        let status = try await exchange("GET", upload, headers: [authorization, Self.tus])
        guard status.status == 200 else { throw ClientError.http(status.status, upload.absoluteString, Self.message(status.body)) }
        struct Status: Decodable { var complete: Bool }
        guard (try? JSONDecoder().decode(Status.self, from: Data(status.body)))?.complete == true else {
            throw ClientError(.http, "the origin did not finish the upload \(upload)")
        }
        return status.body
    }

    /// The origin's offset for an upload of this length, or nil if it no longer has it.
    private func offsetOf(_ upload: URL, length: Int64) async throws -> Int64? {
        let response = try await exchange("HEAD", upload, headers: [authorization, Self.tus])
        if response.status == 404 || response.status == 410 { return nil }
        guard response.status == 200, let offset = response.header("Upload-Offset").flatMap({ Int64($0) }) else {
            throw ClientError.http(response.status, upload.absoluteString, Self.message(response.body))
        }
        guard response.header("Upload-Length").flatMap({ Int64($0) }) == length else { return nil }
        return offset
    }

    private func create(length: Int64, metadata: String) async throws -> URL {
        let endpoint = server.appendingPathComponent("v1/apps/\(app)/uploads")
        let response = try await exchange("POST", endpoint, headers: [
            authorization, Self.tus, ("Upload-Length", String(length)), ("Upload-Metadata", metadata), ("Content-Length", "0"),
        ])
        guard response.status == 201, let location = response.header("Location"), let url = URL(string: location, relativeTo: server) else {
            throw ClientError.http(response.status, endpoint.absoluteString, Self.message(response.body))
        }
        return url.absoluteURL
    }

    /// Sends the file from `offset`; returns the new offset.
    private func patch(_ upload: URL, file path: String, offset: Int64, length: Int64, progress: @escaping @Sendable (Int64, Int64) -> Void) async throws -> Int64 {
        let https = upload.scheme == "https"
        let count = https ? min(length - offset, 8 << 20) : length - offset
        let headers = [authorization, Self.tus, ("Upload-Offset", String(offset)), ("Content-Type", "application/offset+octet-stream"),
                       ("Content-Length", String(count))]
        let response: HTTPTransport.Response
        if https {
            var chunk = [UInt8](repeating: 0, count: Int(count))
            let file = try FileDescriptor.openForReading(path)
            let read = try chunk.withUnsafeMutableBytes { try file.read(into: $0, at: offset) }
            guard Int64(read) == count else { throw ClientError(.install, "the file changed while it was being published") }
            response = try await transport.send(method: "PATCH", to: upload, headers: Dictionary(headers) { $1 }, body: Data(chunk))
        } else {
            let timeout = timeout
            let connection = try HTTPConnection(url: upload, timeout: timeout)
            response = try await HTTPConnection.run(cancelling: connection) {
                defer { connection.close() }
                let file = try FileDescriptor.openForReading(path)
                guard try file.size() == length else { throw ClientError(.install, "\(path) changed while it was being published") }
                try connection.sendHead(method: "PATCH", headers: headers)
                var sent = offset
                try connection.sendFile(file, offset: offset, count: count) { step in
                    sent += step
                    progress(sent, length)
                }
                return try connection.readResponse(method: "PATCH", limit: 1 << 20)
            }
        }
        if response.status == 409, ["offset_mismatch", "upload_busy"].contains(where: { Self.message(response.body).hasPrefix($0) }) {
            // Another attempt is still finishing on the origin: ask for the offset again.
            throw ClientError(.transport, "\(upload): \(Self.message(response.body))")
        }
        guard response.status == 204, let reached = response.header("Upload-Offset").flatMap({ Int64($0) }) else {
            throw ClientError.http(response.status, upload.absoluteString, Self.message(response.body))
        }
        progress(reached, length)
        return reached
    }

    /// A body-less exchange.
    private func exchange(_ method: String, _ url: URL, headers: [(String, String)]) async throws -> HTTPTransport.Response {
        try await transport.send(method: method, to: url, headers: Dictionary(headers) { $1 })
    }

    /// The message of a JSON error body, or its first characters.
    public static func message(_ body: [UInt8]) -> String {
        struct Body: Decodable { struct E: Decodable { var code: String; var message: String }; var error: E }
        if let body = try? JSONDecoder().decode(Body.self, from: Data(body)) { return "\(body.error.code): \(body.error.message)" }
        return String(decoding: body.prefix(300), as: UTF8.self)
    }
}
