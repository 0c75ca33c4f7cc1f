import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Synchronization
import Testing

/// The downloader against the real origin, through a proxy that drops, refuses and stalls.
@Suite("Downloader")
struct DownloaderTests {
    /// Publishes `size` bytes as pack "p"; returns the item to download it to `path`, through `port`.
    static func publish(_ origin: TestOrigin, size: Int, path: String, port: UInt16) throws -> (DownloadItem, [UInt8]) {
        let plaintext = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 2654435761 >> 13) }
        let head = "PUT /v1/apps/\(origin.app)/packs/p?release=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(origin.token)\r\nContent-Length: \(size)\r\nConnection: close\r\n\r\n"
        #expect(try RawHTTP.send(port: origin.port, head, body: plaintext, timeout: RawHTTP.changeWait).first?.status == 201)
        let envelope = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first).body
        let entry = try #require(try Envelope.decode(envelope).verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())[pack: "p"])
        let url = URL(string: "http://127.0.0.1:\(port)/v1/apps/\(origin.app)/blobs/\(entry.sha256)")!
        return (DownloadItem(id: "p", url: url, size: entry.size, sha256: entry.sha256, path: path), plaintext)
    }

    @Test("A connection dropped mid-file resumes with Range and If-Range; the file is byte-identical")
    func resumesAfterDrop() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-download")
            defer { work.remove() }
            let proxy = try FaultyProxy(upstreamPort: origin.port) { index, _ in index == 0 ? .cutAfter(3 << 20) : .forward }
            let (item, _) = try Self.publish(origin, size: 8 << 20, path: work.path + "/p.partial", port: proxy.port)
            let (events, task) = Downloader(retries: 3, baseDelay: 0.01).start([item])
            var seen: [DownloadEvent] = []
            for await event in events { seen.append(event) }
            let results = await task.value
            #expect(try results["p"]?.get() == item.size)
            #expect(try SHA256Hasher.hexDigest(ofFile: item.path) == item.sha256)
            let resumed = try #require(proxy.requests.dropFirst().first)
            let offset = resumed.split(separator: "\r\n").first { $0.hasPrefix("Range: bytes=") }.flatMap { Int64($0.dropFirst(13).dropLast()) }
            #expect((offset ?? 0) > 0 && offset! <= 3 << 20, "resumed from what arrived: \(resumed)")
            #expect(resumed.contains("If-Range: \"\(item.sha256)\""))
            #expect(seen.contains { if case .retrying(id: "p", attempt: 1, _) = $0 { true } else { false } })
            #expect(seen.last == .finished(id: "p", size: item.size))
            #expect(seen.contains { if case .progress(id: "p", let received, _) = $0 { received == item.size } else { false } })
        }
    }

    @Test("5xx is retried with backoff; 404 and a size mismatch fail at once")
    func retriesAndFailures() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-download")
            defer { work.remove() }
            let attempts = Atomic<Int>(0)
            let proxy = try FaultyProxy(upstreamPort: origin.port) { _, head in
                if head.contains("/missing") { return .forward }
                return attempts.add(1, ordering: .relaxed).newValue <= 2 ? .respond(503) : .forward
            }
            var (item, _) = try Self.publish(origin, size: 100_000, path: work.path + "/a", port: proxy.port)
            #expect(try await Downloader(retries: 3, baseDelay: 0.01).download([item])["p"]?.get() == item.size)
            #expect(try SHA256Hasher.hexDigest(ofFile: item.path) == item.sha256)
            #expect(attempts.load(ordering: .relaxed) == 3)

            var missing = item
            missing.url = URL(string: "http://127.0.0.1:\(proxy.port)/v1/apps/\(origin.app)/blobs/missing")!
            missing.path = work.path + "/b"
            let before = proxy.requests.count
            guard case .failure(let error) = await Downloader(retries: 3, baseDelay: 0.01).download([missing])["p"] else {
                Issue.record("a 400/404 must fail")
                return
            }
            #expect(error.kind == .http && proxy.requests.count == before + 1, "no retry: \(error)")

            item.path = work.path + "/c"
            item.size -= 1
            guard case .failure(let mismatch) = await Downloader(retries: 3, baseDelay: 0.01).download([item])["p"] else {
                Issue.record("a size mismatch must fail")
                return
            }
            #expect(mismatch.description.contains("the manifest says \(item.size) bytes, the server sent \(item.size + 1)"))
        }
    }

    /// Runs `body` with an item published on a real origin but served through a proxy that never answers.
    static func withStalledServer(_ body: (DownloadItem, FaultyProxy) async throws -> Void) async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-download")
            defer { work.remove() }
            let proxy = try FaultyProxy(upstreamPort: origin.port) { _, _ in .stall }
            defer { proxy.stop() }
            let (item, _) = try publish(origin, size: 1000, path: work.path + "/a", port: proxy.port)
            try await body(item, proxy)
        }
    }

    @Test("A server that stops answering times out, is retried, then the download fails with a timeout")
    func timeout() async throws {
        try await Self.withStalledServer { item, proxy in
            // A timeout a loaded machine can keep: long enough for each attempt's request to reach
            // the proxy before the attempt gives up (the proxy stalls for ever anyway).
            let (events, task) = Downloader(retries: 1, timeout: 1.5, baseDelay: 0.01).start([item])
            var retried = false
            for await event in events { if case .retrying(id: "p", attempt: 1, _) = event { retried = true } }
            guard case .failure(let error) = await task.value["p"] else {
                Issue.record("a stalled server cannot succeed")
                return
            }
            #expect(retried && error.kind == .transport && error.description.contains("timed out"), "\(error)")
            // The proxy records a request on its own thread: wait for that event.
            Eventually.wait { proxy.requests.count >= 2 }
            #expect(proxy.requests.count == 2)
        }
    }

    @Test("Cancelling stops a stalled download at once")
    func cancel() async throws {
        try await Self.withStalledServer { item, _ in
            let (_, task) = Downloader(timeout: 60).start([item])
            try await Task.sleep(for: .milliseconds(200))
            task.cancel()
            let result = await task.value
            // The cancellation ended it, not the 60 s timeout: the error says so (a timeout's
            // error says "timed out"), however long a loaded machine took to get here.
            guard case .failure(let error) = result["p"] else {
                Issue.record("a cancelled download cannot succeed")
                return
            }
            #expect(error.kind == .cancelled)
        }
    }
}
