import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Synchronization
import Testing

/// One request over a raw socket to the origin, closing the connection afterwards.
func request(_ origin: TestOrigin, _ method: String, _ target: String, headers: [String] = [], body: [UInt8] = []) throws -> RawHTTP.Response {
    var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    for header in headers { head += header + "\r\n" }
    if method == "PUT" || !body.isEmpty { head += "Content-Length: \(body.count)\r\n" }
    let responses = try RawHTTP.send(port: origin.port, head + "\r\n", body: body)
    guard let first = responses.first else { throw POSIXError(.ECONNRESET) }
    return first
}

/// Uploads a pack and, unless `release` is false, publishes it at once (`?release=true`).
func upload(_ origin: TestOrigin, pack: String, _ body: [UInt8], query: String = "", headers: [String] = [], release: Bool = true) throws -> RawHTTP.Response {
    let target = "/v1/apps/\(origin.app)/packs/\(pack)" + query + (release ? (query.isEmpty ? "?" : "&") + "release=true" : "")
    return try request(origin, "PUT", target, headers: ["Authorization: Bearer \(origin.token)"] + headers, body: body)
}

func liveManifest(_ origin: TestOrigin) throws -> Manifest {
    let response = try request(origin, "GET", "/v1/apps/\(origin.app)/manifest")
    #expect(response.status == 200)
    return try Envelope.decode(response.body).verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())
}

@Suite("Origin: publish and read")
struct OriginTests {
    @Test("PUT encrypts, stores and publishes; the manifest is signed and the blob is exactly what it states")
    func publishAndRead() async throws {
        try await withServer { origin in
            let plaintext = (0..<(1 << 20) + 3).map { UInt8(truncatingIfNeeded: $0 &* 13) }
            let digest = Hex.encode(SHA256Hasher.hash(plaintext))
            let response = try upload(origin, pack: "level-1", plaintext, query: "?policy=essential&tag=intro&tag=world-1",
                                      headers: ["X-Depot-SHA256: \(digest)", "Content-Type: video/mp4"])
            #expect(response.status == 201, "\(response.bodyText)")

            let manifest = try liveManifest(origin)
            #expect(manifest.version == 1)
            let entry = try #require(manifest[pack: "level-1"])
            #expect(entry.policy == .essential)
            #expect(entry.tags == ["intro", "world-1"])
            #expect(entry.contentType == "video/mp4")
            #expect(entry.installSize == Int64(plaintext.count))
            #expect(entry.plaintextSHA256 == digest)
            #expect(entry.url == "http://127.0.0.1:\(origin.port)/v1/apps/\(origin.app)/blobs/\(entry.sha256)")

            let blob = try request(origin, "GET", "/v1/apps/\(origin.app)/blobs/\(entry.sha256)")
            #expect(blob.status == 200)
            #expect(blob.header("Content-Length") == String(entry.size))
            #expect(Int64(blob.body.count) == entry.size)
            #expect(Hex.encode(SHA256Hasher.hash(blob.body)) == entry.sha256)
            #expect(blob.header("ETag") == "\"\(entry.sha256)\"")
            #expect(blob.header("Cache-Control") == "public, max-age=31536000, immutable")
            #expect(try PackDecryptor.decrypt(blob.body, keyRing: origin.clientConfiguration().keyRing()) == plaintext)

            let head = try request(origin, "HEAD", "/v1/apps/\(origin.app)/blobs/\(entry.sha256)")
            #expect(head.status == 200 && head.body.isEmpty && head.header("Content-Length") == String(entry.size))
        }
    }

    @Test("Republishing: new content gets the next revision and release; identical content changes nothing")
    func republish() async throws {
        try await withServer { origin in
            #expect(try upload(origin, pack: "a", [1, 2, 3]).status == 201)
            #expect(try upload(origin, pack: "b", [4]).status == 201)
            let first = try liveManifest(origin)
            let same = try upload(origin, pack: "a", [1, 2, 3])
            #expect(same.status == 200)
            #expect(same.bodyText.contains("\"changed\" : false"))
            #expect(try liveManifest(origin) == first)
            #expect(try upload(origin, pack: "a", [1, 2, 3, 4]).status == 201)
            let third = try liveManifest(origin)
            #expect(third.version == 3)
            #expect(third[pack: "a"]?.revision == 2)
            #expect(third[pack: "b"] == first[pack: "b"])
            // Only the blobs the releases reference are stored: the duplicate upload was dropped.
            let blobs = FileSystem.contents(of: origin.data.path + "/blobs").flatMap { FileSystem.contents(of: origin.data.path + "/blobs/" + $0) }
            #expect(Set(blobs) == Set([first[pack: "a"]!.sha256, first[pack: "b"]!.sha256, third[pack: "a"]!.sha256]))
        }
    }

    @Test("The live manifest answers If-None-Match with 304")
    func conditionalManifest() async throws {
        try await withServer { origin in
            _ = try upload(origin, pack: "a", [1])
            let first = try request(origin, "GET", "/v1/apps/\(origin.app)/manifest")
            let etag = try #require(first.header("ETag"))
            #expect(first.header("Cache-Control")?.contains("must-revalidate") == true)
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)/manifest", headers: ["If-None-Match: \(etag)"]).status == 304)
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)/manifest", headers: ["If-None-Match: \"other\""]).status == 200)
        }
    }

    @Test("A plaintext checksum mismatch stores and publishes nothing")
    func checksumMismatch() async throws {
        try await withServer { origin in
            let response = try upload(origin, pack: "a", [1, 2, 3], headers: ["X-Depot-SHA256: " + String(repeating: "0", count: 64)])
            #expect(response.status == 400)
            #expect(response.bodyText.contains("\"code\":\"checksum_mismatch\""))
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)/manifest").status == 404)
            #expect(FileSystem.contents(of: origin.data.path + "/blobs").isEmpty)
            #expect(FileSystem.contents(of: origin.data.path + "/uploads").isEmpty)
        }
    }

    @Test("A body over the size limit gets 413 before anything is stored")
    func sizeLimit() async throws {
        try await withServer(configure: { $0.maximumPackSize = 1000 }) { origin in
            let response = try upload(origin, pack: "a", [UInt8](repeating: 1, count: 1001))
            #expect(response.status == 413)
            #expect(response.bodyText.contains("\"code\":\"too_large\""))
            #expect(FileSystem.contents(of: origin.data.path + "/uploads").isEmpty)
            #expect(try upload(origin, pack: "a", [UInt8](repeating: 1, count: 1000)).status == 201)
        }
    }

    @Test("Temporary files left by a crash are removed at start-up")
    func crashLeftovers() async throws {
        let data = TemporaryDirectory("depot-crash")
        defer { data.remove() }
        try prepareDataFolder(data.path, app: "com.example.crash")
        try FileSystem.writeAtomically([1], to: data.path + "/uploads/abc.upload")
        try FileSystem.writeAtomically([1], to: data.path + "/apps/com.example.crash/releases/x")
        FileSystem.remove(data.path + "/apps/com.example.crash/releases/x")
        let stray = data.path + "/apps/com.example.crash/releases/.tmp-000001.json-1234"
        try FileSystem.writeAtomically([1], to: stray)
        let server = try startServer(dataPath: data.path)
        server.stop()
        #expect(!FileSystem.exists(stray))
        #expect(FileSystem.contents(of: data.path + "/uploads").isEmpty)
    }
}

@Suite("Origin: bad input gets a JSON 4xx")
struct OriginBadInputTests {
    @Test("Token matrix on upload: none, malformed, wrong, revoked, expired, another app's, admin")
    func tokens() async throws {
        try await withServer { origin in
            let folder = DataFolder(origin.data.path)
            let store = TokenStore(folder: folder)
            try AppStore(folder: folder).create("com.example.other")
            let (other, _) = try store.create(app: "com.example.other", role: .publisher)
            let (revoked, record) = try store.create(app: origin.app, role: .publisher)
            #expect(try upload(origin, pack: "before", [1], headers: []).status == 201)
            #expect(try request(origin, "PUT", "/v1/apps/\(origin.app)/packs/r?release=true", headers: ["Authorization: Bearer \(revoked)"], body: [1]).status == 201)
            #expect(try store.revoke(id: record.id))
            let (expired, _) = try store.create(app: origin.app, role: .publisher, expiresAt: Date().addingTimeInterval(-1))
            let (admin, _) = try store.create(app: origin.app, role: .admin, expiresAt: Date().addingTimeInterval(3600))
            let path = "/v1/apps/\(origin.app)/packs/a"
            let cases: [([String], Int, String)] = [
                ([], 401, "unauthorized"), (["Authorization: Basic dXNlcjpwYXNz"], 401, "unauthorized"), (["Authorization: Bearer"], 401, "unauthorized"),
                (["Authorization: Bearer dpt_wrong"], 401, "unauthorized"), (["Authorization: Bearer \(revoked)"], 401, "token_revoked"),
                (["Authorization: Bearer \(expired)"], 401, "token_expired"), (["Authorization: Bearer \(other)"], 403, "forbidden"),
            ]
            for (headers, status, code) in cases {
                let response = try request(origin, "PUT", path, headers: headers, body: [1, 2, 3])
                #expect(response.status == status, "\(headers)")
                #expect(response.bodyText.contains("\"code\":\"\(code)\""), "\(headers)")
                #expect(response.header("Content-Type") == "application/json")
                #expect(response.bodyText.contains("\"error\""))
                if status == 401 { #expect(response.header("WWW-Authenticate")?.hasPrefix("Bearer") == true) }
            }
            #expect(try liveManifest(origin).packs.map(\.id) == ["before", "r"])
            #expect(try request(origin, "PUT", path + "?release=true", headers: ["Authorization: Bearer \(admin)"], body: [1]).status == 201)
            let states = try store.list().map { ($0.revokedAt != nil, $0.expiresAt != nil) }
            #expect(states.filter(\.0).count == 1 && states.filter(\.1).count == 2)
        }
    }

    @Test("Hostile app and pack ids on the three endpoints", arguments: [
        ("PUT", "/v1/apps/com.example.game/packs/..", 400),
        ("PUT", "/v1/apps/com.example.game/packs/%2e%2e", 400),
        ("PUT", "/v1/apps/com.example.game/packs/a%00b", 400),
        ("PUT", "/v1/apps/com.example.game/packs/a%2fb", 400),
        ("PUT", "/v1/apps/com.example.game/packs/a/b", 404),
        ("PUT", "/v1/apps/com.example.game/packs/level_1", 400),
        ("PUT", "/v1/apps/com.example.game/packs/" + String(repeating: "a", count: 65), 400),
        ("PUT", "/v1/apps/com.example.game/packs/" + String(repeating: "a", count: 3000), 414),
        ("PUT", "/v1/apps/../packs/a", 400),
        ("PUT", "/v1/apps/com..example/packs/a", 400),
        ("GET", "/v1/apps/%2e%2e/manifest", 400),
        ("GET", "/v1/apps/a%00/manifest", 400),
        ("GET", "/v1/apps/" + String(repeating: "a", count: 129) + "/manifest", 400),
        ("GET", "/v1/apps/com.example.nope/manifest", 404),
        ("GET", "/v1/apps/com.example.game/manifest", 404),
        ("GET", "/v1/apps/com.example.game/blobs/abc", 400),
        ("GET", "/v1/apps/com.example.game/blobs/" + String(repeating: "A", count: 64), 400),
        ("GET", "/v1/apps/com.example.game/blobs/" + String(repeating: "g", count: 64), 400),
        ("GET", "/v1/apps/com.example.game/blobs/" + String(repeating: "a", count: 65), 400),
        ("GET", "/v1/apps/com.example.game/blobs/" + String(repeating: "a", count: 64), 404),
        ("GET", "/v1/apps/com.example.game/blobs/..%2f..%2fkeys", 400),
        ("DELETE", "/v1/apps/com.example.game/manifest", 405),
        ("GET", "/v1/apps/com.example.game/packs/a", 405),
        ("GET", "/v1/nothing", 404),
    ])
    func hostile(method: String, target: String, status: Int) async throws {
        try await withServer { origin in
            let response = try request(origin, method, target, headers: ["Authorization: Bearer \(origin.token)"],
                                       body: method == "PUT" ? [1, 2, 3] : [])
            #expect(response.status == status)
            #expect(response.header("Content-Type") == "application/json")
            #expect(response.bodyText.hasPrefix("{\"error\":{\"code\":"))
            // Nothing was stored, and the server still works.
            #expect(FileSystem.contents(of: origin.data.path + "/blobs").isEmpty)
            #expect(try upload(origin, pack: "ok", [1]).status == 201)
        }
    }
}

@Suite("Token store")
struct TokenStoreTests {
    @Test("Eight creators at once: no token is lost; only hashes are stored, file mode 0600")
    func concurrentCreation() throws {
        let data = TemporaryDirectory("depot-tokens")
        defer { data.remove() }
        let folder = DataFolder(data.path)
        try folder.prepare()
        let created = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            let (token, _) = try! TokenStore(folder: folder).create(app: "com.example.x", role: .publisher)
            created.withLock { $0.append(token) }
        }
        let store = TokenStore(folder: folder)
        #expect(try store.list().count == 8)
        for token in created.withLock({ $0 }) {
            guard case .valid = store.check(token) else { Issue.record("token lost"); continue }
        }
        let text = String(decoding: try FileSystem.readFile(data.path + "/tokens.json"), as: UTF8.self)
        #expect(!created.withLock { $0 }.contains { text.contains($0) })
        var info = stat()
        stat(data.path + "/tokens.json", &info)
        #expect(info.st_mode & 0o777 == 0o600)
    }
}

@Suite("Rollback")
struct RollbackTests {
    @Test("Rollback publishes a new release with an older content set; revisions go up for changed packs")
    func rollback() async throws {
        try await withServer { origin in
            let folder = DataFolder(origin.data.path)
            let (admin, _) = try TokenStore(folder: folder).create(app: origin.app, role: .admin)
            #expect(try upload(origin, pack: "a", [1]).status == 201)           // release 1: a r1
            #expect(try upload(origin, pack: "keep", [7]).status == 201)        // release 2: a r1, keep r1
            let two = try liveManifest(origin)
            #expect(try upload(origin, pack: "a", [2]).status == 201)           // release 3: a r2, keep r1
            #expect(try upload(origin, pack: "b", [3]).status == 201)           // release 4: + b

            let refused = try request(origin, "POST", "/v1/apps/\(origin.app)/rollback?to=2", headers: ["Authorization: Bearer \(origin.token)"])
            #expect(refused.status == 403)
            for (query, status) in [("", 400), ("?to=0", 400), ("?to=x", 400), ("?to=99", 404)] {
                #expect(try request(origin, "POST", "/v1/apps/\(origin.app)/rollback\(query)", headers: ["Authorization: Bearer \(admin)"]).status == status, "\(query)")
            }

            let response = try request(origin, "POST", "/v1/apps/\(origin.app)/rollback?to=2", headers: ["Authorization: Bearer \(admin)"])
            #expect(response.status == 201)
            #expect(response.bodyText.contains("\"removed\" : [\n    \"b\"\n  ]"))
            let five = try liveManifest(origin)
            #expect(five.version == 5)
            #expect(five.packs.map(\.id) == ["a", "keep"])
            #expect(five[pack: "a"]?.sha256 == two[pack: "a"]?.sha256)
            #expect(five[pack: "a"]?.revision == 3)
            #expect(five[pack: "keep"] == two[pack: "keep"])

            let again = try request(origin, "POST", "/v1/apps/\(origin.app)/rollback?to=2", headers: ["Authorization: Bearer \(admin)"])
            #expect(again.status == 200 && again.bodyText.contains("\"changed\" : false"))
            #expect(try liveManifest(origin).version == 5)
        }
    }
}

@Suite("Pack key rotation")
struct KeyRotationTests {
    @Test("After a rotation (the next key staged) and the retirement of the current key, new packs use the new key, old packs keep theirs, and the exported ring opens both")
    func rotate() async throws {
        try await withServer { origin in
            let apps = AppStore(folder: DataFolder(origin.data.path))
            let before = try origin.clientConfiguration()
            #expect(try upload(origin, pack: "old", [1, 2, 3]).status == 201)
            let newKey = try apps.rotatePackKey(origin.app)
            #expect(try upload(origin, pack: "staged", [7, 8]).status == 201)
            #expect(try liveManifest(origin)[pack: "staged"]?.keyID != newKey, "a staged key encrypts nothing")
            let retired = try apps.retirePackKey(origin.app, keyID: try #require(before.packKeys.keys.first), allowFresh: false)
            #expect(retired.current == newKey && !retired.fresh && !retired.wasStaged)
            #expect(try upload(origin, pack: "new", [4, 5, 6]).status == 201)
            let manifest = try liveManifest(origin)
            #expect(manifest[pack: "new"]?.keyID == newKey)
            #expect(manifest[pack: "old"]?.keyID != newKey)
            #expect(before.packKeys[newKey] == nil)
            let after = try origin.clientConfiguration()
            #expect(Set(after.packKeys.keys) == Set(before.packKeys.keys).union([newKey]))
            let ring = try after.keyRing()
            for (id, plaintext) in [("old", [UInt8]([1, 2, 3])), ("new", [4, 5, 6])] {
                let blob = try request(origin, "GET", "/v1/apps/\(origin.app)/blobs/\(manifest[pack: id]!.sha256)").body
                #expect(try PackDecryptor.decrypt(blob, keyRing: ring) == plaintext)
            }
            // An app built before the rotation cannot open the new pack, and says why.
            let newBlob = try request(origin, "GET", "/v1/apps/\(origin.app)/blobs/\(manifest[pack: "new"]!.sha256)").body
            #expect(throws: PackError.unknownKeyID(newKey)) { try PackDecryptor.decrypt(newBlob, keyRing: before.keyRing()) }
        }
    }

    @Test("Expect: 100-continue is answered before the body is sent")
    func expectContinue() async throws {
        try await withServer { origin in
            let fd = try RawHTTP.connect(port: origin.port)
            defer { close(fd) }
            let head = "PUT /v1/apps/\(origin.app)/packs/c?release=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(origin.token)\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"
            _ = head.withCString { send(fd, $0, strlen($0), 0) }
            var buffer = [UInt8](repeating: 0, count: 256)
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            #expect(String(decoding: buffer[0..<max(0, n)], as: UTF8.self).hasPrefix("HTTP/1.1 100 Continue"))
            _ = "abc".withCString { send(fd, $0, 3, 0) }
            var rest: [UInt8] = []
            while true {
                let m = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if m <= 0 { break }
                rest += buffer[0..<m]
                if String(decoding: rest, as: UTF8.self).contains("\"changed\"") { break }
            }
            #expect(String(decoding: rest, as: UTF8.self).hasPrefix("HTTP/1.1 201"))
        }
    }
}
