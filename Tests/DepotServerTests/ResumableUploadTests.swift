import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// tus 1.0 over raw HTTP: what any tus client relies on, status by status.
@Suite("Resumable uploads (tus 1.0)")
struct ResumableUploadTests {
    static func metadata(_ pairs: [String: String]) -> String {
        pairs.sorted { $0.key < $1.key }.map { "\($0.key) \(Data($0.value.utf8).base64EncodedString())" }.joined(separator: ",")
    }

    /// Creates an upload; returns its path.
    static func create(_ origin: TestOrigin, length: Int, metadata: [String: String]) throws -> String {
        let response = try request(origin, "POST", "/v1/apps/\(origin.app)/uploads", headers: [
            "Authorization: Bearer \(origin.token)", "Tus-Resumable: 1.0.0", "Upload-Length: \(length)",
            "Upload-Metadata: \(Self.metadata(metadata))", "Content-Length: 0",
        ])
        #expect(response.status == 201, "\(response.bodyText)")
        #expect(response.header("Tus-Resumable") == "1.0.0")
        #expect(response.header("Upload-Expires") != nil)
        return try #require(response.header("Location"))
    }

    static func patch(_ origin: TestOrigin, _ path: String, offset: Int, _ body: [UInt8], extra: [String] = []) throws -> RawHTTP.Response {
        try request(origin, "PATCH", path, headers: [
            "Authorization: Bearer \(origin.token)", "Tus-Resumable: 1.0.0", "Upload-Offset: \(offset)",
            "Content-Type: application/offset+octet-stream",
        ] + extra, body: body)
    }

    static func offset(_ origin: TestOrigin, _ path: String) throws -> RawHTTP.Response {
        try request(origin, "HEAD", path, headers: ["Authorization: Bearer \(origin.token)", "Tus-Resumable: 1.0.0"])
    }

    @Test("OPTIONS announces tus 1.0.0, the extensions, the size limit and the checksum algorithms")
    func discovery() async throws {
        try await withServer { origin in
            let response = try request(origin, "OPTIONS", "/v1/apps/\(origin.app)/uploads")
            #expect(response.status == 204)
            #expect(response.header("Tus-Version") == "1.0.0")
            #expect(response.header("Tus-Extension") == "creation,checksum,termination,expiration")
            #expect(response.header("Tus-Max-Size") == String(16 << 30))
            #expect(response.header("Tus-Checksum-Algorithm") == "sha1,sha256,sha512")
        }
    }

    @Test("Chunks that split segments anywhere, a checksum per chunk: the pack stages and decrypts to the original")
    func chunkedUpload() async throws {
        try await withServer { origin in
            let plaintext = (0..<(3 << 20) + 777).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
            let digest = Hex.encode(SHA256Hasher.hash(plaintext))
            let path = try Self.create(origin, length: plaintext.count, metadata: [
                "pack": "movie", "policy": "essential", "tags": "intro, world-2", "sha256": digest, "filetype": "video/mp4",
            ])
            #expect(try Self.offset(origin, path).header("Upload-Offset") == "0")
            var offset = 0
            for size in [1, 1 << 20, (1 << 20) - 1, 5, 1_000_000, plaintext.count] {
                let end = min(plaintext.count, offset + size)
                let chunk = Array(plaintext[offset..<end])
                let sha1 = MessageDigest(.sha1)
                sha1.update(chunk)
                let response = try Self.patch(origin, path, offset: offset, chunk, extra: ["Upload-Checksum: sha1 \(Data(sha1.finalize()).base64EncodedString())"])
                #expect(response.status == 204, "\(response.bodyText)")
                offset = end
                #expect(response.header("Upload-Offset") == String(offset))
                if offset == plaintext.count { break }
            }
            let status = try request(origin, "GET", path, headers: ["Authorization: Bearer \(origin.token)", "Tus-Resumable: 1.0.0"])
            #expect(status.status == 200)
            struct Status: Decodable { var complete: Bool; var result: Result?; struct Result: Decodable { var staged: Bool; var pack: PackEntry? } }
            let decoded = try JSONDecoder().decode(Status.self, from: Data(status.body))
            #expect(decoded.complete && decoded.result?.staged == true)
            #expect(decoded.result?.pack?.plaintextSHA256 == digest)
            #expect(try Self.offset(origin, path).header("Upload-Offset") == String(plaintext.count))

            #expect(try request(origin, "POST", "/v1/apps/\(origin.app)/releases", headers: ["Authorization: Bearer \(origin.token)"]).status == 201)
            let entry = try #require(try liveManifest(origin)[pack: "movie"])
            #expect(entry.policy == .essential && entry.tags == ["intro", "world-2"] && entry.contentType == "video/mp4")
            let blob = try request(origin, "GET", "/v1/apps/\(origin.app)/blobs/\(entry.sha256)")
            #expect(Int64(blob.body.count) == entry.size)
            let ring = try origin.clientConfiguration().keyRing()
            #expect(try PackDecryptor.decrypt(blob.body, keyRing: ring) == plaintext)
            // Only the finished upload's record is left; its container became the blob.
            let left = FileSystem.contents(of: origin.data.path + "/uploads")
            #expect(left.count == 1 && FileSystem.contents(of: origin.data.path + "/uploads/" + left[0]) == ["state.json"])
        }
    }

    @Test("Protocol errors: version, offset, media type, checksum, length, method")
    func protocolErrors() async throws {
        try await withServer { origin in
            let path = try Self.create(origin, length: 10, metadata: ["pack": "p"])
            let auth = "Authorization: Bearer \(origin.token)"
            let noVersion = try request(origin, "HEAD", path, headers: [auth])
            #expect(noVersion.status == 412 && noVersion.header("Tus-Version") == "1.0.0")
            #expect(try Self.patch(origin, path, offset: 3, [1, 2]).status == 409)
            let wrongType = try request(origin, "PATCH", path, headers: [auth, "Tus-Resumable: 1.0.0", "Upload-Offset: 0", "Content-Type: text/plain"], body: [1])
            #expect(wrongType.status == 415)
            let badSum = try Self.patch(origin, path, offset: 0, [1, 2, 3], extra: ["Upload-Checksum: sha256 \(Data(SHA256Hasher.hash([9])).base64EncodedString())"])
            #expect(badSum.status == 460)
            #expect(try Self.offset(origin, path).header("Upload-Offset") == "0", "a chunk that failed its checksum is discarded")
            #expect(try Self.patch(origin, path, offset: 0, [1], extra: ["Upload-Checksum: md5 AAAA"]).status == 400)
            #expect(try Self.patch(origin, path, offset: 0, Array(repeating: 1, count: 11)).status == 400, "past Upload-Length")
            #expect(try Self.patch(origin, path, offset: 0, [1, 2, 3]).status == 204)
            #expect(try Self.offset(origin, path).header("Upload-Offset") == "3")

            let tooBig = try request(origin, "POST", "/v1/apps/\(origin.app)/uploads", headers: [
                auth, "Tus-Resumable: 1.0.0", "Upload-Length: \(Int64(17) << 30)", "Upload-Metadata: pack cA==",
            ])
            #expect(tooBig.status == 413)
            let noPack = try request(origin, "POST", "/v1/apps/\(origin.app)/uploads", headers: [auth, "Tus-Resumable: 1.0.0", "Upload-Length: 5"])
            #expect(noPack.status == 400)
            let badPack = try request(origin, "POST", "/v1/apps/\(origin.app)/uploads", headers: [
                auth, "Tus-Resumable: 1.0.0", "Upload-Length: 5", "Upload-Metadata: pack \(Data("a_b".utf8).base64EncodedString())",
            ])
            #expect(badPack.status == 400)
            let deferred = try request(origin, "POST", "/v1/apps/\(origin.app)/uploads", headers: [auth, "Tus-Resumable: 1.0.0", "Upload-Defer-Length: 1"])
            #expect(deferred.status == 400)
            #expect(try request(origin, "PUT", path, headers: [auth, "Tus-Resumable: 1.0.0"]).status == 405)
            #expect(try request(origin, "HEAD", "/v1/apps/\(origin.app)/uploads/0123456789abcdef0123456789abcdef", headers: [auth, "Tus-Resumable: 1.0.0"]).status == 404)
        }
    }

    @Test("Tokens: none, wrong and another app's are refused before anything is created")
    func tokens() async throws {
        try await withServer { origin in
            let folder = DataFolder(origin.data.path)
            try AppStore(folder: folder).create("com.example.other")
            let other = try TokenStore(folder: folder).create(app: "com.example.other", role: .publisher).token
            for (header, status) in [("", 401), ("Authorization: Bearer nope", 401), ("Authorization: Bearer \(other)", 403)] {
                let response = try request(origin, "POST", "/v1/apps/\(origin.app)/uploads", headers: [
                    header, "Tus-Resumable: 1.0.0", "Upload-Length: 5", "Upload-Metadata: pack cA==",
                ].filter { !$0.isEmpty })
                #expect(response.status == status)
            }
            let path = try Self.create(origin, length: 5, metadata: ["pack": "p"])
            #expect(try request(origin, "HEAD", path, headers: ["Authorization: Bearer \(other)", "Tus-Resumable: 1.0.0"]).status == 403)
            #expect(FileSystem.contents(of: origin.data.path + "/uploads").count == 1)
        }
    }

    @Test("Termination removes the upload; expiry answers 410 and the sweep removes what is left")
    func terminationAndExpiry() async throws {
        try await withServer(configure: { $0.uploadExpiry = 1 }) { origin in
            let auth = "Authorization: Bearer \(origin.token)"
            let first = try Self.create(origin, length: 100, metadata: ["pack": "p"])
            #expect(try Self.patch(origin, first, offset: 0, Array(repeating: 7, count: 40)).status == 204)
            #expect(try request(origin, "DELETE", first, headers: [auth, "Tus-Resumable: 1.0.0"]).status == 204)
            #expect(try Self.offset(origin, first).status == 404)
            #expect(FileSystem.contents(of: origin.data.path + "/uploads").isEmpty)

            let second = try Self.create(origin, length: 100, metadata: ["pack": "p"])
            let third = try Self.create(origin, length: 100, metadata: ["pack": "q"])
            try await Task.sleep(for: .milliseconds(1200))
            #expect(try Self.offset(origin, second).status == 410)
            #expect(FileSystem.contents(of: origin.data.path + "/uploads").count == 1)
            #expect(origin.server.removeExpiredUploads() == 1)
            #expect(try Self.offset(origin, third).status == 404)
            #expect(FileSystem.contents(of: origin.data.path + "/uploads").isEmpty)
        }
    }

    @Test("A zip pack's install size is the sum of its entries; an unsafe or broken zip stages nothing")
    func zipPacks() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-zip")
            defer { work.remove() }
            let script = """
            import sys, zipfile
            good, evil, link = sys.argv[1:4]
            with zipfile.ZipFile(good, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("levels/one.bin", b"a" * 100000)
                z.writestr("levels/", b"")
                z.writestr("readme.txt", b"hello")
            with zipfile.ZipFile(evil, "w") as z:
                z.writestr("../escape.txt", b"x")
            with zipfile.ZipFile(link, "w") as z:
                info = zipfile.ZipInfo("link")
                info.external_attr = 0o120777 << 16
                z.writestr(info, "/etc/passwd")
            """
            let good = work.path + "/good.zip", evil = work.path + "/evil.zip", link = work.path + "/link.zip"
            #expect(try Processes.run("/usr/bin/env", ["python3", "-c", script, good, evil, link]).status == 0)
            let zip = "Content-Type: application/zip"
            #expect(try upload(origin, pack: "levels", FileSystem.readFile(good), headers: [zip]).status == 201)
            let entry = try #require(try liveManifest(origin)[pack: "levels"])
            #expect(entry.installSize == 100_005)
            #expect(entry.contentType == "application/zip")
            for bad in [evil, link] {
                let response = try upload(origin, pack: "bad", FileSystem.readFile(bad), headers: [zip])
                #expect(response.status == 422, "\(response.bodyText)")
            }
            #expect(try upload(origin, pack: "bad", Array("not a zip".utf8), headers: [zip]).status == 422)
            // Through tus too: the refusal comes with the last chunk, and the upload is gone.
            let evilBytes = try FileSystem.readFile(evil)
            let path = try Self.create(origin, length: evilBytes.count, metadata: ["pack": "bad", "contentType": "application/zip"])
            #expect(try Self.patch(origin, path, offset: 0, evilBytes).status == 422)
            #expect(try Self.offset(origin, path).status == 404)
            #expect(try liveManifest(origin).packs.map(\.id) == ["levels"])
            #expect(FileSystem.contents(of: origin.data.path + "/uploads").isEmpty)
        }
    }
}

@Suite("Resumable uploads: interruptions")
struct ResumableInterruptionTests {
    @Test("A connection dropped in the middle of a PATCH keeps what arrived; one with a checksum keeps nothing")
    func droppedConnection() async throws {
        try await withServer { origin in
            let plaintext = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            for withChecksum in [false, true] {
                let path = try ResumableUploadTests.create(origin, length: plaintext.count, metadata: ["pack": "p"])
                let fd = try RawHTTP.connect(port: origin.port)
                var head = "PATCH \(path) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(origin.token)\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\n"
                    + "Content-Type: application/offset+octet-stream\r\nContent-Length: \(plaintext.count)\r\n"
                if withChecksum { head += "Upload-Checksum: sha256 \(Data(SHA256Hasher.hash(plaintext)).base64EncodedString())\r\n" }
                RawHTTP.sendAll(fd, Array((head + "\r\n").utf8) + plaintext[0..<1_500_000])
                try await Task.sleep(for: .milliseconds(200))
                close(fd)
                var offset = 0
                if withChecksum {
                    // Nothing to wait for: what must stay is nothing (a second for a wrong write to show).
                    try await Task.sleep(for: .seconds(1))
                    offset = try ResumableUploadTests.offset(origin, path).header("Upload-Offset").flatMap { Int($0) } ?? -1
                } else {
                    try Eventually.wait {
                        offset = try ResumableUploadTests.offset(origin, path).header("Upload-Offset").flatMap { Int($0) } ?? -1
                        return offset != 0
                    }
                }
                // Bytes in flight when the connection ends may be lost, never more than arrived.
                if withChecksum { #expect(offset == 0) } else { #expect(offset > 0 && offset <= 1_500_000, "\(offset)") }
            }
        }
    }
}

/// The whole upload's SHA-256 sent after the body, in a trailer of a chunked PATCH, so that a
/// client hashes the file while it sends it instead of reading it once before.
@Suite("Resumable uploads: the checksum trailer")
struct ResumableTrailerTests {
    /// A chunked PATCH of `body` in chunks of `chunk` bytes, with `trailer` fields after it.
    static func chunkedPatch(_ origin: TestOrigin, _ path: String, offset: Int, _ body: ArraySlice<UInt8>, chunk: Int = 100_000, trailer: [String]) throws -> RawHTTP.Response {
        var bytes = Array(("PATCH \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer \(origin.token)\r\nTus-Resumable: 1.0.0\r\n"
            + "Upload-Offset: \(offset)\r\nContent-Type: application/offset+octet-stream\r\nTransfer-Encoding: chunked\r\n"
            + "Trailer: Depot-Content-SHA256\r\n\r\n").utf8)
        var start = body.startIndex
        while start < body.endIndex {
            let end = min(body.endIndex, start + chunk)
            bytes += Array((String(end - start, radix: 16) + "\r\n").utf8) + body[start..<end] + Array("\r\n".utf8)
            start = end
        }
        bytes += Array(("0\r\n" + trailer.map { $0 + "\r\n" }.joined() + "\r\n").utf8)
        let responses = RawHTTP.parse(try RawHTTP.exchange(port: origin.port, bytes, timeout: 10))
        return try #require(responses.first)
    }

    static func status(_ origin: TestOrigin, _ path: String) throws -> (complete: Bool, plaintextSHA256: String?) {
        let response = try request(origin, "GET", path, headers: ["Authorization: Bearer \(origin.token)", "Tus-Resumable: 1.0.0"])
        struct Status: Decodable { var complete: Bool; var result: Result?; struct Result: Decodable { var pack: PackEntry? } }
        let decoded = try JSONDecoder().decode(Status.self, from: Data(response.body))
        return (decoded.complete, decoded.result?.pack?.plaintextSHA256)
    }

    @Test("The right digest publishes; a wrong one refuses the pack and removes the upload; a malformed one discards the request")
    func trailer() async throws {
        try await withServer { origin in
            let plaintext = (0..<(2 << 20) + 5).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) }
            let digest = Hex.encode(SHA256Hasher.hash(plaintext))

            let good = try ResumableUploadTests.create(origin, length: plaintext.count, metadata: ["pack": "good"])
            let done = try Self.chunkedPatch(origin, good, offset: 0, plaintext[...], trailer: ["Depot-Content-SHA256: \(digest.uppercased())"])
            #expect(done.status == 204, "\(done.bodyText)")
            #expect(done.header("Upload-Offset") == String(plaintext.count))
            #expect(try Self.status(origin, good) == (true, digest))

            let wrong = try ResumableUploadTests.create(origin, length: plaintext.count, metadata: ["pack": "wrong"])
            let refused = try Self.chunkedPatch(origin, wrong, offset: 0, plaintext[...], trailer: ["Depot-Content-SHA256: \(String(repeating: "0", count: 64))"])
            #expect(refused.status == 422 || refused.status == 400, "\(refused.status)")
            #expect(refused.bodyText.contains("checksum_mismatch"))
            #expect(try ResumableUploadTests.offset(origin, wrong).status == 404)

            let malformed = try ResumableUploadTests.create(origin, length: plaintext.count, metadata: ["pack": "malformed"])
            let discarded = try Self.chunkedPatch(origin, malformed, offset: 0, plaintext[..<1000], trailer: ["Depot-Content-SHA256: xyz"])
            #expect(discarded.status == 400 && discarded.bodyText.contains("Depot-Content-SHA256"))
            #expect(try ResumableUploadTests.offset(origin, malformed).header("Upload-Offset") == "0")

            #expect(try request(origin, "POST", "/v1/apps/\(origin.app)/releases", headers: ["Authorization: Bearer \(origin.token)"]).status == 201)
            let manifest = try liveManifest(origin)
            #expect(manifest[pack: "good"]?.plaintextSHA256 == digest)
            #expect(manifest[pack: "wrong"] == nil && manifest[pack: "malformed"] == nil)
        }
    }

    @Test("A PATCH that does not complete the upload leaves its trailer aside; the completing one is checked, against the metadata too")
    func partial() async throws {
        try await withServer { origin in
            let plaintext = (0..<(1 << 20) + 99).map { UInt8(truncatingIfNeeded: $0 &* 5) }
            let digest = Hex.encode(SHA256Hasher.hash(plaintext))
            let path = try ResumableUploadTests.create(origin, length: plaintext.count, metadata: ["pack": "p"])
            let first = try Self.chunkedPatch(origin, path, offset: 0, plaintext[..<500_000], trailer: ["Depot-Content-SHA256: \(String(repeating: "1", count: 64))"])
            #expect(first.status == 204 && first.header("Upload-Offset") == "500000")
            let last = try Self.chunkedPatch(origin, path, offset: 500_000, plaintext[500_000...], trailer: ["Depot-Content-SHA256: \(digest)"])
            #expect(last.status == 204, "\(last.bodyText)")
            #expect(try Self.status(origin, path) == (true, digest))

            // Metadata and trailer must agree.
            let both = try ResumableUploadTests.create(origin, length: plaintext.count, metadata: ["pack": "q", "sha256": digest])
            let disagree = try Self.chunkedPatch(origin, both, offset: 0, plaintext[...], trailer: ["Depot-Content-SHA256: \(String(repeating: "2", count: 64))"])
            #expect(disagree.status == 400 && disagree.bodyText.contains("differs from the sha256 metadata"))
        }
    }

    @Test("An announced trailer that does not arrive leaves the upload where it was; a header can carry the digest instead")
    func dropped() async throws {
        try await withServer { origin in
            let plaintext = (0..<(1 << 20) + 3).map { UInt8(truncatingIfNeeded: $0 &* 11) }
            let digest = Hex.encode(SHA256Hasher.hash(plaintext))
            let path = try ResumableUploadTests.create(origin, length: plaintext.count, metadata: ["pack": "p"])
            let lost = try Self.chunkedPatch(origin, path, offset: 0, plaintext[...], trailer: [])
            #expect(lost.status == 400 && lost.bodyText.contains("trailer_missing"), "\(lost.bodyText)")
            #expect(try ResumableUploadTests.offset(origin, path).header("Upload-Offset") == "0")
            let done = try ResumableUploadTests.patch(origin, path, offset: 0, plaintext, extra: ["Depot-Content-SHA256: \(digest)"])
            #expect(done.status == 204, "\(done.bodyText)")
            #expect(try Self.status(origin, path) == (true, digest))

            let wrong = try ResumableUploadTests.create(origin, length: plaintext.count, metadata: ["pack": "q"])
            let refused = try ResumableUploadTests.patch(origin, wrong, offset: 0, plaintext, extra: ["Depot-Content-SHA256: \(String(repeating: "e", count: 64))"])
            #expect(refused.status == 400 && refused.bodyText.contains("checksum_mismatch"))
            #expect(try ResumableUploadTests.offset(origin, wrong).status == 404)
            let third = try ResumableUploadTests.create(origin, length: plaintext.count, metadata: ["pack": "r"])
            let malformed = try ResumableUploadTests.patch(origin, third, offset: 0, [1], extra: ["Depot-Content-SHA256: 12"])
            #expect(malformed.status == 400 && malformed.bodyText.contains("64 hex digits"))
        }
    }
}
