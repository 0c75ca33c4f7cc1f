import DepotCore
import Foundation

/// One file to download: a pack's container, into a partial file that survives interruptions.
public struct DownloadItem: Hashable, Sendable {
    public var id: String
    public var url: URL
    /// The size the manifest states; anything else fails, as in the framework.
    public var size: Int64
    /// The container's SHA-256 (also the origin's ETag, used for `If-Range` when no other is known).
    public var sha256: String
    /// Where the bytes go; kept between attempts and runs, so a download resumes.
    public var path: String

    public init(id: String, url: URL, size: Int64, sha256: String, path: String) {
        self.id = id
        self.url = url
        self.size = size
        self.sha256 = sha256
        self.path = path
    }
}

/// What the downloader reports as it goes.
public enum DownloadEvent: Hashable, Sendable {
    /// A download began (or resumed, from `offset`).
    case started(id: String, offset: Int64, size: Int64)
    /// Bytes on disk so far.
    case progress(id: String, received: Int64, size: Int64)
    /// An attempt failed in a way worth retrying; the next comes after a backoff.
    case retrying(id: String, attempt: Int, reason: String)
    /// Complete: every byte on disk, SHA-256 computed.
    case finished(id: String, size: Int64)
    /// Given up.
    case failed(id: String, reason: String)
}

/// Downloads pack containers: several at once, each resumable from its partial file with
/// `Range` and `If-Range`, retried by `RetryPolicy` (exponential backoff with jitter on 5xx,
/// 408, 429, timeouts and dropped connections), never reading past the declared size, and
/// failing on any size mismatch. It does not hash: the installer's decryption pass computes
/// the container's SHA-256 on its way through, following the partial file as it grows
/// (`DownloadFollower`), so a sync reads each download once and decrypts while it downloads.
///
/// Over `HTTPTransport`: `http://` is measured at about curl's speed on loopback; over
/// `https://` (URLSession) a retry resumes where the partial file ends, but an attempt cut
/// mid-transfer keeps nothing of that attempt.
public struct Downloader: Sendable {
    /// Downloads at once.
    public var concurrency: Int
    /// When to try again and how long to wait.
    public var retry: RetryPolicy
    /// Seconds without progress before an attempt fails.
    public var timeout: TimeInterval
    /// Sent with every request (download credentials).
    public var headers: [String: String]
    let transport: HTTPTransport

    /// `retries` after the first attempt; the first backoff `baseDelay`, doubling per retry (up
    /// to 30 s), times a random factor in 0.5–1.5.
    public init(
        concurrency: Int = 4, retries: Int = 5, timeout: TimeInterval = 30, baseDelay: TimeInterval = 0.5, headers: [String: String] = [:],
        options: TransportOptions = TransportOptions()
    ) {
        self.concurrency = max(1, concurrency)
        retry = RetryPolicy(retries: retries, baseDelay: baseDelay, maximumDelay: RetryPolicy.downloads.maximumDelay)
        self.timeout = timeout
        self.headers = headers
        transport = HTTPTransport(timeout: timeout, options: options)
    }

    /// Downloads every item; returns each one's size on disk or its error. Events go to
    /// `events` as they happen. Cancelling the calling task cancels the transfers.
    public func download(_ items: [DownloadItem], events: AsyncStream<DownloadEvent>.Continuation? = nil) async -> [String: Result<Int64, ClientError>] {
        await withTaskGroup(of: (String, Result<Int64, ClientError>).self) { group in
            var results: [String: Result<Int64, ClientError>] = [:]
            var pending = items[...]
            func startNext() {
                guard let item = pending.popFirst() else { return }
                group.addTask { (item.id, await self.download(item, events: events)) }
            }
            for _ in 0..<concurrency { startNext() }
            while let (id, result) = await group.next() {
                results[id] = result
                startNext()
            }
            return results
        }
    }

    /// Starts downloading; events arrive on the stream, which ends after the last download.
    /// Cancel the returned task to stop.
    public func start(_ items: [DownloadItem]) -> (events: AsyncStream<DownloadEvent>, results: Task<[String: Result<Int64, ClientError>], Never>) {
        let (stream, continuation) = AsyncStream.makeStream(of: DownloadEvent.self, bufferingPolicy: .bufferingNewest(1024))
        let task = Task {
            let results = await download(items, events: continuation)
            continuation.finish()
            return results
        }
        return (stream, task)
    }

    /// One item, with retries; `follower` (an install reading the file as it grows) learns how
    /// far the partial file is complete.
    func download(
        _ item: DownloadItem, follower: DownloadFollower? = nil, events: AsyncStream<DownloadEvent>.Continuation?
    ) async -> Result<Int64, ClientError> {
        var attempt = 0
        while true {
            if Task.isCancelled { return .failure(.cancelled) }
            do {
                try await attemptOnce(item, follower: follower, events: events)
                events?.yield(.finished(id: item.id, size: item.size))
                return .success(item.size)
            } catch let failure as Failure {
                guard failure.retryable, attempt < retry.retries, !Task.isCancelled else {
                    if failure.error.kind == .noSpace || failure.error.kind == .integrity {
                        // Worth nothing to a later attempt, and it holds space.
                        FileSystem.remove(item.path)
                        FileSystem.remove(item.path + ".etag")
                    }
                    events?.yield(.failed(id: item.id, reason: failure.error.description))
                    return .failure(Task.isCancelled ? .cancelled : failure.error)
                }
                attempt += 1
                events?.yield(.retrying(id: item.id, attempt: attempt, reason: failure.error.description))
                await retry.wait(beforeRetry: attempt)
            } catch {
                // A cancellation (the URLSession engine ends its exchange with CancellationError)
                // is one, whichever layer noticed it first.
                let error = error is CancellationError || Task.isCancelled ? .cancelled : error as? ClientError ?? ClientError.install(item.id, error)
                events?.yield(.failed(id: item.id, reason: error.description))
                return .failure(error)
            }
        }
    }

    /// A failed attempt and whether another may succeed.
    struct Failure: Error {
        var error: ClientError
        var retryable: Bool
    }

    /// One attempt: request from where the partial file ends, append.
    private func attemptOnce(_ item: DownloadItem, follower: DownloadFollower?, events: AsyncStream<DownloadEvent>.Continuation?) async throws {
        let file = try Self.open(item)
        var offset = try file.size()
        if offset > item.size {
            follower?.settle(at: 0)
            try file.truncate(to: 0)
            offset = 0
        }
        follower?.settle(at: offset)
        if offset == item.size && offset > 0 { return }
        var fields = headers.map { ($0.key, $0.value) }
        // The bytes as stored: the manifest's size and SHA-256 are theirs (a CDN may compress
        // what a client accepts compressed, and URLSession asks for gzip by default).
        if !headers.keys.contains(where: { $0.lowercased() == "accept-encoding" }) { fields.append(("Accept-Encoding", "identity")) }
        if offset > 0 {
            // A kept ETag that is not a well-formed strong one (a damaged file) is not sent.
            let kept = (try? FileSystem.readFile(item.path + ".etag", limit: 512)).map { String(decoding: $0, as: UTF8.self) }
            let etag = kept.flatMap { HTTPResponseParser.isStrongETag($0) ? $0 : nil } ?? "\"\(item.sha256)\""
            fields += [("Range", "bytes=\(offset)-"), ("If-Range", etag)]
        }
        events?.yield(.started(id: item.id, offset: offset, size: item.size))
        let request = HTTPTransport.Request(method: "GET", url: item.url, headers: fields, largeResponse: true)
        let response: HTTPTransport.Response
        // An attempt cut short reports what it got (progress comes in 1 MiB steps otherwise).
        var succeeded = false
        defer {
            if !succeeded, let size = try? file.size(), size > offset { events?.yield(.progress(id: item.id, received: size, size: item.size)) }
        }
        do {
            response = try await transport.exchange(request) { [offset] head in
                try Self.bodyHandling(head, item: item, file: file, offset: offset, follower: follower, events: events)
            }
        } catch let failure as Failure {
            throw failure
        } catch let error as ClientError where error.kind == .tooLarge {
            throw Failure(error: .sizeMismatch(item.id, expected: item.size, got: (try? file.size()) ?? -1), retryable: false)
        } catch let error as ClientError {
            throw Failure(error: error, retryable: error.kind == .transport)
        } catch let error as SystemError where error.isNoSpace {
            throw Failure(error: .noSpace(FileSystem.directory(of: item.path)), retryable: false)
        }
        guard response.status == 200 || response.status == 206 else {
            throw Failure(error: .http(response.status, item.url.absoluteString, String(decoding: response.body.prefix(300), as: UTF8.self)),
                          retryable: RetryPolicy.isRetryable(status: response.status))
        }
        guard try file.size() == item.size else {
            // The server closed early without a declared length: resume on the next attempt.
            throw Failure(error: .transport(item.url.absoluteString, URLError(.networkConnectionLost)), retryable: true)
        }
        succeeded = true
        // No fsync: a download is a cache. The installed copy is what must be durable, and the
        // installer syncs it; a partial file that lost bytes in a power cut fails its SHA-256
        // and is fetched again.
    }

    /// Where the body of `head` goes: appended to the partial file for 200 and 206, an excerpt
    /// in memory (for the error message) otherwise.
    private static func bodyHandling(
        _ head: HTTPTransport.Response, item: DownloadItem, file: FileDescriptor, offset: Int64, follower: DownloadFollower?,
        events: AsyncStream<DownloadEvent>.Continuation?
    ) throws -> HTTPTransport.BodyHandling {
        var offset = offset
        switch head.status {
        case 206:
            guard let range = head.header("Content-Range"), let (first, total) = parseContentRange(range), first == offset, total == item.size else {
                // Not the range asked for: start over on the next attempt.
                follower?.settle(at: 0)  // first: a reader failing on the cut file then sees the rewind
                try file.truncate(to: 0)
                throw Failure(error: ClientError.http(206, item.url.absoluteString, "unexpected Content-Range"), retryable: true)
            }
        case 200:
            if let length = head.contentLength, length != item.size {
                throw Failure(error: .sizeMismatch(item.id, expected: item.size, got: length), retryable: false)
            }
            if offset > 0 {
                follower?.settle(at: 0)  // first: a reader failing on the cut file then sees the rewind
                try file.truncate(to: 0)
                offset = 0
            }
        case 416:
            follower?.settle(at: 0)
            try file.truncate(to: 0)
            throw Failure(error: ClientError.http(416, item.url.absoluteString, "range not satisfiable"), retryable: true)
        default:
            return .excerpt(limit: 4096)
        }
        if let etag = head.header("ETag"), HTTPResponseParser.isStrongETag(etag) {
            try? FileSystem.writeAtomically(Array(etag.utf8), to: item.path + ".etag")
        }
        try file.seek(to: offset)
        var received = offset
        var reported = offset
        return .stream(limit: item.size - offset) { chunk in
            try file.write(chunk)
            received += Int64(chunk.count)
            follower?.advance(to: received)
            if received - reported >= 1 << 20 || received == item.size {
                reported = received
                events?.yield(.progress(id: item.id, received: received, size: item.size))
            }
        }
    }

    private static func open(_ item: DownloadItem) throws -> FileDescriptor {
        do {
            return try FileDescriptor(path: item.path, flags: O_RDWR | O_CREAT, mode: 0o644)
        } catch {
            throw Failure(error: error.isNoSpace ? .noSpace(FileSystem.directory(of: item.path)) : .install(item.id, error), retryable: false)
        }
    }

    /// `bytes first-last/total` → (first, total).
    static func parseContentRange(_ text: String) -> (Int64, Int64)? {
        let parts = text.trimmingCharacters(in: .whitespaces).split(separator: " ")
        guard parts.count == 2, parts[0] == "bytes" else { return nil }
        let rangeAndTotal = parts[1].split(separator: "/")
        guard rangeAndTotal.count == 2, let total = Int64(rangeAndTotal[1]), let first = rangeAndTotal[0].split(separator: "-").first.flatMap({ Int64($0) }) else {
            return nil
        }
        return (first, total)
    }
}
