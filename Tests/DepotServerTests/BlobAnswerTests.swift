import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Hot blobs are answered from responses made once (memory for small blobs, a kept descriptor
/// for larger ones). What a client sees must not change, and what the store removes must leave.
@Suite("Blob answers kept ready: the same bytes and headers, bounded, and gone with the blob")
struct BlobAnswerTests {
    /// Publishes pack `pack` with `size` bytes (seeded) and returns its blob's path and SHA-256.
    static func publish(_ origin: TestOrigin, _ pack: String, size: Int, seed: UInt8) throws -> (path: String, sha256: String) {
        let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }
        #expect(try upload(origin, pack: pack, bytes).status == 201)
        let entry = try #require(try liveManifest(origin)[pack: pack])
        return ("/v1/apps/\(origin.app)/blobs/\(entry.sha256)", entry.sha256)
    }

    /// Descriptors of this process open on a deleted file in the data folder's blobs.
    static func deletedBlobsHeldOpen(_ origin: TestOrigin) -> [String] {
        let blobs = origin.data.path + "/blobs/"
        return FileSystem.contents(of: "/proc/self/fd").compactMap { fd in
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + fd) else { return nil }
            return target.hasPrefix(blobs) && target.hasSuffix(" (deleted)") ? target : nil
        }
    }

    @Test("A blob the collector removes leaves the kept answers at once: its file's space comes back while the origin runs, and it is 404")
    func collectedBlobLeaves() async throws {
        try await withServer { origin in
            // 300 KB: kept as a descriptor (larger than the 16 KiB kept in memory).
            let (path, sha256) = try Self.publish(origin, "level", size: 300_000, seed: 1)
            for _ in 0..<3 {
                let answer = try request(origin, "GET", path)
                #expect(answer.status == 200 && Hex.encode(SHA256Hasher.hash(answer.body)) == sha256)
            }
            #expect(origin.server.blobAnswers.files == 1, "the answer is kept, its blob open")
            // A new revision; the old blob is needed by nothing once the retention is 0.
            _ = try Self.publish(origin, "level", size: 300_000, seed: 2)
            let swept = try origin.server.collectGarbage(retention: 0, grace: 0, dryRun: false)
            #expect(swept.blobs.contains(sha256))
            #expect(!FileManager.default.fileExists(atPath: origin.data.path + "/blobs/" + sha256.prefix(2) + "/" + sha256))
            #expect(origin.server.blobAnswers.answers == 0 && origin.server.blobAnswers.files == 0)
            // No descriptor keeps the deleted file (and its space): the last one closes when
            // libmicrohttpd is done with the response.
            let released = Eventually.wait { Self.deletedBlobsHeldOpen(origin).isEmpty }
            #expect(released, "still open: \(Self.deletedBlobsHeldOpen(origin))")
            #expect(try request(origin, "GET", path).status == 404)
        }
    }

    @Test("A blob removed by hand that nobody asks for again lets go of its kept descriptor within seconds: its space comes back")
    func removedByHandLetsGo() async throws {
        try await withServer { origin in
            let (path, sha256) = try Self.publish(origin, "level", size: 300_000, seed: 4)
            for _ in 0..<2 { #expect(try request(origin, "GET", path).status == 200) }
            #expect(origin.server.blobAnswers.files == 1, "kept as a descriptor")
            FileSystem.remove(origin.data.path + "/blobs/" + sha256.prefix(2) + "/" + sha256)
            #expect(!Self.deletedBlobsHeldOpen(origin).isEmpty, "held open by the kept answer, before the sweep")
            // No request: the writer thread's sweep (every 5 s) drops it.
            #expect(Eventually.wait(every: .milliseconds(200)) { Self.deletedBlobsHeldOpen(origin).isEmpty }, "\(Self.deletedBlobsHeldOpen(origin))")
            #expect(origin.server.blobAnswers.files == 0)
        }
    }

    @Test("A blob file replaced on disk is answered from the new file at once; a file removed by hand is 404, not the kept answer", arguments: [2_000, 300_000])
    func replacedOnDisk(size: Int) async throws {
        try await withServer { origin in
            let (path, sha256) = try Self.publish(origin, "level", size: size, seed: 3)
            let file = origin.data.path + "/blobs/" + sha256.prefix(2) + "/" + sha256
            let original = try request(origin, "GET", path)
            #expect(original.status == 200 && Hex.encode(SHA256Hasher.hash(original.body)) == sha256)
            var damaged = original.body
            damaged[size / 2] ^= 0xff
            try FileSystem.writeAtomically(damaged, to: file)
            #expect(try request(origin, "GET", path).body == damaged, "the new file, not the kept answer")
            try FileSystem.writeAtomically(original.body, to: file)
            #expect(try request(origin, "GET", path).body == original.body)
            try FileManager.default.removeItem(atPath: file)
            #expect(try request(origin, "GET", path).status == 404)
            #expect(origin.server.blobAnswers.answers == 0)
        }
    }

    @Test("Kept answers stay within their limits (memory and descriptors) while many blobs are served, each answer whole and right")
    func bounded() async throws {
        try await withServer(configure: { $0.blobCache = BlobCacheLimits(memoryBytes: 24 << 10, files: 2) }) { origin in
            var blobs: [(path: String, sha256: String)] = []
            for index in 0..<12 {
                // Small ones (kept in memory) and larger ones (kept open), alternately.
                blobs.append(try Self.publish(origin, "p\(index)", size: index % 2 == 0 ? 3_000 : 100_000, seed: UInt8(index)))
            }
            for round in 0..<3 {
                for blob in blobs {
                    let answer = try request(origin, "GET", blob.path)
                    #expect(answer.status == 200 && Hex.encode(SHA256Hasher.hash(answer.body)) == blob.sha256, "round \(round)")
                    let figures = origin.server.blobAnswers
                    #expect(figures.memory <= 24 << 10 && figures.files <= 2, "\(figures)")
                }
            }
            #expect(origin.server.blobAnswers.answers > 0)
        }
    }

    @Test("GET and HEAD of a blob send the same status line and headers with the answers kept and without", arguments: [1_000, 300_000])
    func sameHeaders(size: Int) async throws {
        func heads(_ limits: BlobCacheLimits) async throws -> [[String]] {
            try await withServer(configure: { $0.blobCache = limits }) { origin in
                let (path, sha256) = try Self.publish(origin, "level", size: size, seed: 9)
                var info = stat()
                #expect(stat(origin.data.path + "/blobs/" + sha256.prefix(2) + "/" + sha256, &info) == 0)
                let modified = "Last-Modified: " + HTTPDate.format(Date(timeIntervalSince1970: Double(info.st_mtim.tv_sec)))
                var seen: [[String]] = []
                for method in ["GET", "GET", "HEAD", "HEAD"] {
                    let text = try RawHTTP.exchange(port: origin.port, Array("\(method) \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8))
                    let head = String(decoding: text.prefix { $0 != 0 }, as: UTF8.self).components(separatedBy: "\r\n\r\n")[0]
                    let lines = head.components(separatedBy: "\r\n")
                    // The blob's own validators, exactly; they differ between the two servers (each
                    // encrypts anew), so every other byte but the date is what is compared.
                    #expect(lines.contains("ETag: \"\(sha256)\"") && lines.contains(modified), "\(lines)")
                    seen.append(lines.filter { !$0.hasPrefix("Date:") && !$0.hasPrefix("Last-Modified:") && !$0.hasPrefix("ETag:") })
                }
                return seen
            }
        }
        let kept = try await heads(BlobCacheLimits())
        let plain = try await heads(.none)
        #expect(kept == plain)
        #expect(kept[0].first == "HTTP/1.1 200 OK" && kept[0].contains("Connection: close") && kept[0].contains { $0.hasPrefix("Content-Length: ") })
    }
}
