import DepotClient
import DepotCore
import Foundation

/// Checks what devices download through an edge or CDN against the signed manifests: every
/// channel's manifest (signature), then every pack and patch URL in it — status, exact
/// `Content-Length`, no `Content-Encoding`, the body's SHA-256 (or sampled records authenticated
/// with the key ring), `Cache-Control` and `ETag`, https and the app's
/// `BADownloadDomainAllowList`. Background Assets fails a download whose size differs from the
/// manifest's by one byte; this finds such an edge before devices do.
struct EdgeVerifier {
    /// One thing a device would trip on.
    struct Problem: Sendable, CustomStringConvertible {
        var subject: String
        var what: String
        var description: String { "\(subject): \(what)" }
    }

    let server: URL
    let app: String
    let transport: HTTPTransport
    /// Extra request fields (download credentials).
    let headers: [String: String]
    /// Manifest keys and pack key ring; without them signatures are not checked and sampling is off.
    let configuration: ClientConfiguration?
    /// Records to authenticate per download instead of hashing whole bodies.
    let sample: Int?
    /// The Info.plist keys the app ships with (nil: the origin's computed ones).
    let rules: BackgroundAssetsRules?
    let allowHTTP: Bool
    /// Follow an unsigned manifest's URLs on other hosts than the edge's (without credentials).
    /// Without it, and without `configuration`, only the edge's own scheme, host and port are
    /// fetched: an unsigned manifest is whatever the edge says, and must not send the checker
    /// (and its credentials) to internal addresses or plain http elsewhere.
    var anyHost = false
    /// The whole check's deadline: past it, what is in flight is cancelled and the report says so.
    var deadline: Duration = .seconds(3600)

    /// What a device sends: URLSession asks for compressed bodies, which is how a CDN that
    /// compresses `application/octet-stream` ends up changing a pack's size.
    static let acceptEncoding = "gzip, deflate, br"

    struct Report: Sendable {
        var manifests = 0
        var downloads = 0
        var bytes: Int64 = 0
        var problems: [Problem] = []
    }

    /// Checks `channels` (nil: every channel the edge lists), within the deadline: at the
    /// deadline the check is cancelled and what was found so far is returned with a problem
    /// saying so, without waiting for a call that does not heed the cancellation (a connect).
    func run(channels requested: [String]?) async -> Report {
        let progress = Locked(Report())
        // The first of the two to finish answers.
        let answered = Locked(false)
        let first: @Sendable () -> Bool = {
            answered.withLock { done in
                defer { done = true }
                return !done
            }
        }
        let deadline = deadline
        return await withCheckedContinuation { (continuation: CheckedContinuation<Report, Never>) in
            let timer = Locked<Task<Void, Never>?>(nil)
            let checking = Task {
                let report = await checkAll(channels: requested, progress: progress)
                guard first() else { return }
                timer.withLock { $0 }?.cancel()
                continuation.resume(returning: report)
            }
            timer.withLock {
                $0 = Task {
                    try? await Task.sleep(for: deadline)
                    guard first() else { return }
                    checking.cancel()
                    var partial = progress.withLock { $0 }
                    partial.problems.append(Problem(
                        subject: "the check", what: "stopped at its deadline of \(deadline.components.seconds) s (--deadline): what was in flight was cancelled and the rest not checked"
                    ))
                    continuation.resume(returning: partial)
                }
            }
        }
    }

    /// Whether `url` is on the edge itself: the same scheme, host and port.
    func isOnEdge(_ url: URL) -> Bool {
        func port(_ url: URL) -> Int? { url.port ?? (url.scheme?.lowercased() == "https" ? 443 : url.scheme?.lowercased() == "http" ? 80 : nil) }
        return url.scheme?.lowercased() == server.scheme?.lowercased() && url.host?.lowercased() == server.host?.lowercased() && port(url) == port(server)
    }

    private func checkAll(channels requested: [String]?, progress: Locked<Report>) async -> Report {
        var report = Report()
        let channels: [String]
        if let requested { channels = requested } else {
            do { channels = try await listChannels() } catch {
                report.problems.append(Problem(subject: "the channel list", what: "\(error)"))
                channels = [ManifestSource.production]
            }
        }
        var rules = self.rules
        if rules == nil {
            do {
                let answer = try await transport.get(url("info-plist"), headers: headers, limit: 1 << 20)
                guard answer.status == 200 else { throw ClientError.http(answer.status, url("info-plist").absoluteString, "") }
                rules = try BackgroundAssetsRules.parse(plist: answer.body)
            } catch {
                report.problems.append(Problem(subject: "the app's Info.plist keys", what: "not read from the origin (\(error)); give --info-plist"))
            }
        }
        if allowHTTP { rules?.requiresHTTPS = false }
        for channel in channels where !Task.isCancelled {
            await check(channel: channel, rules: rules, into: &report, progress: progress)
        }
        return report
    }

    private func url(_ path: String) -> URL { server.appendingPathComponent("v1/apps/\(app)/\(path)") }

    private func listChannels() async throws -> [String] {
        struct Listing: Decodable {
            struct Channel: Decodable { var name: String }
            var channels: [Channel]
        }
        let answer = try await transport.get(url("channels"), headers: headers, limit: 4 << 20)
        guard answer.status == 200 else { throw ClientError.http(answer.status, url("channels").absoluteString, "") }
        let names = try JSONDecoder().decode(Listing.self, from: Data(answer.body)).channels.map(\.name)
        return names.isEmpty ? [ManifestSource.production] : names
    }

    /// One channel's checks; `progress` keeps what was found so far, for a check stopped at its deadline.
    private func check(channel: String, rules: BackgroundAssetsRules?, into report: inout Report, progress: Locked<Report>) async {
        defer { progress.withLock { [report] in $0 = report } }
        let manifestURL = ManifestSource.url(server: server, app: app, channel: channel)
        let subject = "channel \(channel), the manifest (\(manifestURL.absoluteString))"
        if let refusal = rules?.refusal(for: manifestURL) { report.problems.append(Problem(subject: subject, what: "a device refuses it: \(refusal)")) }
        let manifest: Manifest
        do {
            let answer = try await transport.get(manifestURL, headers: headers, limit: Int(ManifestSource.sizeLimit))
            guard answer.status == 200 else { throw ClientError.http(answer.status, manifestURL.absoluteString, "") }
            report.manifests += 1
            if let configuration {
                let source = try ManifestSource(url: manifestURL, channel: channel, configuration: configuration, transport: transport)
                manifest = try source.verify(answer.body, floor: 0, now: Date())
            } else {
                guard let payload = Data(base64Encoded: try Envelope.decode(answer.body).payload) else { throw ClientError.manifest("the envelope's payload is not base64") }
                manifest = try Manifest.decode(Array(payload))
            }
        } catch {
            report.problems.append(Problem(subject: subject, what: "\(error)"))
            return
        }
        for pack in manifest.packs {
            var downloads = [(subject: "channel \(channel), pack \(pack.id) revision \(pack.revision)", url: pack.url, size: pack.size, sha256: pack.sha256)]
            for patch in pack.patches ?? [] {
                downloads.append(("channel \(channel), pack \(pack.id)'s patch from revision \(patch.fromRevision)", patch.url, patch.size, patch.sha256))
            }
            for download in downloads where !Task.isCancelled {
                progress.withLock { [report] in $0 = report }
                guard let url = URL(string: download.url) else {
                    report.problems.append(Problem(subject: download.subject, what: "the manifest's URL \(download.url) is not a URL"))
                    continue
                }
                let subject = "\(download.subject) (\(download.url))"
                if let refusal = rules?.refusal(for: url) { report.problems.append(Problem(subject: subject, what: "a device refuses it: \(refusal)")) }
                let onEdge = isOnEdge(url)
                if !onEdge && configuration == nil && !anyHost {
                    report.problems.append(Problem(subject: subject, what: "not fetched: it is not on the edge (\(server.absoluteString)), and the manifest's signature was not checked; give --config to check it (then every URL it signs is followed), or --any-host"))
                    continue
                }
                // Credentials go to the edge, and to the URLs a signed manifest names; never elsewhere.
                let found = await check(url, size: download.size, sha256: download.sha256, keyID: pack.keyID, credentials: onEdge || configuration != nil)
                report.downloads += 1
                report.bytes += found.bytes
                report.problems += found.problems.map { Problem(subject: subject, what: $0) }
            }
        }
    }

    /// The checks of one download: what a device would see, in sentences.
    private func check(_ url: URL, size: Int64, sha256: String, keyID: String, credentials: Bool) async -> (bytes: Int64, problems: [String]) {
        var problems: [String] = []
        let head: HTTPTransport.Response
        let body = BodyDigest()
        let fields = (credentials ? headers : [:]).merging(["Accept-Encoding": Self.acceptEncoding]) { $1 }.map { ($0.key, $0.value) }
        do {
            let request = HTTPTransport.Request(method: sample == nil ? "GET" : "HEAD", url: url, headers: fields, largeResponse: true)
            head = try await transport.exchange(request) { _ in .stream(limit: size + (1 << 20), into: body.update) }
        } catch {
            let got = body.count
            return (got, [got > 0 ? "the body stops after \(got) of \(size) bytes (\(error)): a device's download fails" : "the download fails: \(error)"])
        }
        guard head.status == 200 else { return (0, ["HTTP \(head.status): a device's download fails"]) }
        if let encoding = head.header("Content-Encoding"), encoding.lowercased() != "identity" {
            problems.append("Content-Encoding \(encoding): the edge compresses the pack, so a device receives other bytes than the manifest's \(size) and fails the download (turn compression off for application/octet-stream)")
        }
        if let length = head.contentLength {
            if length != size { problems.append("Content-Length \(length), the manifest says \(size): a device fails the download") }
        } else {
            problems.append("no Content-Length (\(head.header("Transfer-Encoding").map { "Transfer-Encoding \($0)" } ?? "no length at all")): Background Assets needs the exact size the manifest states")
        }
        let bytes = body.count
        if sample == nil {
            if bytes != size && head.header("Content-Encoding") == nil {
                problems.append("the body has \(bytes) bytes, the manifest says \(size): a device fails the download")
            } else if bytes == size, body.sha256() != sha256 {
                problems.append("the body's SHA-256 is not the manifest's \(sha256): a device refuses the pack (the edge serves another or an old blob under this URL)")
            }
        }
        problems += Self.cachingProblems(head)
        if let sample, problems.isEmpty { problems += await sampled(url, size: size, records: sample, keyID: keyID, credentials: credentials) }
        return (bytes, problems)
    }

    /// A content-addressed pack never changes: it should be cached for long, and resumable.
    static func cachingProblems(_ head: HTTPTransport.Response) -> [String] {
        var problems: [String] = []
        let cache = head.header("Cache-Control")?.lowercased() ?? ""
        let maxAge = cache.split(separator: ",").compactMap { part -> Int? in
            let part = part.trimmingCharacters(in: .whitespaces)
            return part.hasPrefix("max-age=") ? Int(part.dropFirst(8)) : nil
        }.first
        if cache.isEmpty {
            problems.append("no Cache-Control: edges and devices may fetch this immutable pack again")
        } else if cache.contains("no-store") || cache.contains("no-cache") || cache.contains("private") || (maxAge ?? 0) < 86_400 {
            problems.append("Cache-Control \"\(head.header("Cache-Control") ?? "")\": this immutable pack should be cacheable for a day or more (the origin sends public, max-age=31536000, immutable)")
        }
        if let etag = head.header("ETag") {
            if etag.hasPrefix("W/") { problems.append("a weak ETag \(etag): a cut download cannot resume with If-Range, a device starts over") }
        } else {
            problems.append("no ETag: a cut download cannot resume with If-Range, a device starts over")
        }
        return problems
    }

    /// Authenticates the container's header and `records` of its records (the first, the last
    /// and others spread between), fetched by `Range`, with the app's key ring: a cut, a
    /// transform or damage in those bytes fails. It cannot tell another genuine container of the
    /// same size (an old blob) from the manifest's: only the whole body's SHA-256 can.
    private func sampled(_ url: URL, size: Int64, records: Int, keyID: String, credentials: Bool) async -> [String] {
        do {
            guard let keyRing = try configuration?.keyRing() else { return ["not sampled: --sample needs --config (the key ring)"] }
            let first = try await range(url, from: 0, count: min(size, Int64(PackHeader.minimumSize + 255)), credentials: credentials)
            let (header, headerSize) = try PackHeader.parse(first)
            let headerBytes = Array(first[0..<headerSize])
            guard let master = keyRing[header.keyID] else { return ["record check: the key ring has no key \(header.keyID)"] }
            let cipher = try AES256GCM(key: try header.dataKey(master: master))
            let segments = try header.layout(containerSize: size).segments
            let recordSize = Int64(header.segmentSize) + Int64(AES256GCM.tagSize)
            var picks: Set<Int64> = [0, segments - 1]
            let spread = max(0, min(Int64(records), segments) - 2)
            for k in 0..<spread { picks.insert((k + 1) * segments / (spread + 1)) }
            for index in picks.sorted() {
                let start = Int64(headerSize) + index * recordSize
                let sealed = try await range(url, from: start, count: min(recordSize, size - start), credentials: credentials)
                var plain = [UInt8](repeating: 0, count: max(0, sealed.count - AES256GCM.tagSize))
                do {
                    try sealed.withUnsafeBytes { bytes in
                        try plain.withUnsafeMutableBytes { out in
                            try cipher.open(bytes, nonce: header.nonce(segment: UInt32(index), final: index == segments - 1), aad: headerBytes, into: out)
                        }
                    }
                } catch {
                    return ["record \(index) of \(segments) (bytes \(start)–\(start + Int64(sealed.count) - 1)) does not authenticate with the pack's key: a device refuses the pack"]
                }
            }
            return []
        } catch {
            return ["record check: \(error)"]
        }
    }

    /// Exactly `count` bytes from `offset`, by `Range` (206 with the matching `Content-Range`).
    private func range(_ url: URL, from offset: Int64, count: Int64, credentials: Bool) async throws -> [UInt8] {
        let last = offset + count - 1
        let answer = try await transport.get(url, headers: (credentials ? headers : [:]).merging(["Range": "bytes=\(offset)-\(last)"]) { $1 }, limit: Int(count) + 1)
        guard answer.status == 206, answer.header("Content-Range")?.hasPrefix("bytes \(offset)-\(last)/") == true, answer.body.count == Int(count) else {
            throw ClientError.http(answer.status, url.absoluteString, "bytes \(offset)-\(last) asked, \(answer.body.count) bytes and Content-Range \(answer.header("Content-Range") ?? "none") answered")
        }
        return answer.body
    }
}

/// A body's SHA-256 and length, fed from the transport's thread.
final class BodyDigest: @unchecked Sendable {
    // @unchecked: every use holds the lock.
    private let lock = NSLock()
    private let hasher = SHA256Hasher()
    private var received: Int64 = 0

    func update(_ bytes: UnsafeRawBufferPointer) {
        lock.withLock {
            hasher.update(bytes)
            received += Int64(bytes.count)
        }
    }

    var count: Int64 { lock.withLock { received } }
    func sha256() -> String { lock.withLock { Hex.encode(hasher.finalize()) } }
}
