import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Synchronization
import Testing

private func post(_ origin: TestOrigin, _ target: String, token: String? = nil) throws -> RawHTTP.Response {
    try request(origin, "POST", target, headers: ["Authorization: Bearer \(token ?? origin.token)"])
}

private func blobCount(_ origin: TestOrigin) -> Int {
    FileSystem.contents(of: origin.data.path + "/blobs").reduce(0) { $0 + FileSystem.contents(of: origin.data.path + "/blobs/" + $1).count }
}

@Suite("Staging and releases")
struct StagingTests {
    @Test("Uploads are staged; POST /releases publishes them together in one release")
    func stageThenRelease() async throws {
        try await withServer { origin in
            let first = try upload(origin, pack: "a", [1], release: false)
            #expect(first.status == 202 && first.bodyText.contains("\"staged\" : true"))
            #expect(try upload(origin, pack: "b", [2], query: "?policy=essential", release: false).status == 202)
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)/manifest").status == 404)

            let draft = try request(origin, "GET", "/v1/apps/\(origin.app)/staging", headers: ["Authorization: Bearer \(origin.token)"])
            #expect(draft.status == 200 && draft.bodyText.contains("\"changed\" : [\n    \"a\",\n    \"b\"\n  ]"))
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)/staging").status == 401)

            let released = try post(origin, "/v1/apps/\(origin.app)/releases")
            #expect(released.status == 201, "\(released.bodyText)")
            let manifest = try liveManifest(origin)
            #expect(manifest.version == 1 && manifest.packs.map(\.id) == ["a", "b"])
            #expect(manifest[pack: "b"]?.policy == .essential)
            #expect(FileSystem.contents(of: origin.data.path + "/apps/\(origin.app)/staging").isEmpty, "the draft is spent")

            let empty = try post(origin, "/v1/apps/\(origin.app)/releases")
            #expect(empty.status == 409 && empty.bodyText.contains("nothing_staged"))
        }
    }

    @Test("Removing a live pack needs ?removeLive=true and says devices will delete it; a staged upload can be dropped")
    func removal() async throws {
        try await withServer { origin in
            #expect(try upload(origin, pack: "a", [1]).status == 201)
            #expect(try upload(origin, pack: "b", [2]).status == 201)
            let auth = ["Authorization: Bearer \(origin.token)"]
            let refused = try request(origin, "DELETE", "/v1/apps/\(origin.app)/packs/a", headers: auth)
            #expect(refused.status == 409 && refused.bodyText.contains("live_pack"))
            #expect(try request(origin, "DELETE", "/v1/apps/\(origin.app)/packs/nope", headers: auth).status == 404)
            #expect(try request(origin, "DELETE", "/v1/apps/\(origin.app)/packs/a?removeLive=true").status == 401)
            let staged = try request(origin, "DELETE", "/v1/apps/\(origin.app)/packs/a?removeLive=true", headers: auth)
            #expect(staged.status == 200 && staged.bodyText.contains("will delete it"))
            #expect(try liveManifest(origin).packs.map(\.id) == ["a", "b"])

            // A staged upload dropped again leaves no blob behind.
            let before = blobCount(origin)
            #expect(try upload(origin, pack: "c", [3], release: false).status == 202)
            #expect(blobCount(origin) == before + 1)
            let dropped = try request(origin, "DELETE", "/v1/apps/\(origin.app)/packs/c", headers: auth)
            #expect(dropped.status == 200 && dropped.bodyText.contains("dropped"))
            #expect(blobCount(origin) == before)

            #expect(try post(origin, "/v1/apps/\(origin.app)/releases").status == 201)
            #expect(try liveManifest(origin).packs.map(\.id) == ["b"])
        }
    }

    @Test("A publish based on a stale release gets 409 and changes nothing")
    func staleBase() async throws {
        try await withServer { origin in
            #expect(try upload(origin, pack: "a", [1]).status == 201)
            let before = blobCount(origin)
            let stale = try upload(origin, pack: "b", [2], query: "?base=0")
            #expect(stale.status == 409 && stale.bodyText.contains("\"code\":\"conflict\""))
            #expect(blobCount(origin) == before)
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)/staging", headers: ["Authorization: Bearer \(origin.token)"]).bodyText.contains("\"changed\" : [\n\n  ]"))
            #expect(try liveManifest(origin).version == 1)
            #expect(try upload(origin, pack: "b", [2], query: "?base=1").status == 201)
        }
    }

    @Test("Eight publishers racing from the same base: contiguous versions, nothing lost, losers get 409")
    func racingPublishers() async throws {
        try await withServer { origin in
            let conflicts = Atomic<Int>(0)
            let arrived = Atomic<Int>(0)
            let published = Mutex<[Int]>([])
            let done = DispatchGroup()
            for index in 0..<8 {
                done.enter()
                Thread.detachNewThread {
                    defer { done.leave() }
                    var first = true
                    while true {
                        let envelope = try? request(origin, "GET", "/v1/apps/\(origin.app)/manifest")
                        let base = envelope.flatMap { $0.status == 200 ? try? Envelope.decode($0.body) : nil }
                            .flatMap { Data(base64Encoded: $0.payload) }.flatMap { try? Manifest.decode(Array($0)) }?.version ?? 0
                        if first {
                            // A barrier: all eight read the same base before anyone publishes.
                            first = false
                            arrived.add(1, ordering: .relaxed)
                            while arrived.load(ordering: .relaxed) < 8 { usleep(1000) }
                        }
                        let body = [UInt8](repeating: UInt8(index), count: 1000 + index)
                        guard let response = try? upload(origin, pack: "pack-\(index)", body, query: "?base=\(base)") else { continue }
                        if response.status == 409 {
                            conflicts.add(1, ordering: .relaxed)
                            continue
                        }
                        #expect(response.status == 201, "\(response.bodyText)")
                        let release = (try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])?["release"] as? Int ?? -1
                        published.withLock { $0.append(release) }
                        return
                    }
                }
            }
            done.wait()
            let manifest = try liveManifest(origin)
            #expect(manifest.version == 8)
            #expect(manifest.packs.map(\.id).sorted() == (0..<8).map { "pack-\($0)" })
            #expect(published.withLock { $0 }.sorted() == Array(1...8))
            #expect(blobCount(origin) == 8)
            for version in 1...8 {
                let release = try request(origin, "GET", "/v1/apps/\(origin.app)/releases/\(version)")
                #expect(release.status == 200)
                #expect(try Envelope.decode(release.body).verifiedManifest(trusting: origin.clientConfiguration().trustedKeys()).packs.count == version)
            }
            // All eight raced on base 0: exactly one won, so at least seven lost, and published nothing.
            #expect(conflicts.load(ordering: .relaxed) >= 7)
        }
    }
}

@Suite("Crash recovery of releases and drafts")
struct CrashRecoveryTests {
    @Test("A draft left by a crash after its release went live does not delete the live blob when released again (either draft format)",
          arguments: [false, true])
    func staleDraft(legacyFormat: Bool) async throws {
        try await withServer { first in
            #expect(try upload(first, pack: "a", [1, 2, 3]).status == 201)
            let live = try liveManifest(first)
            first.server.stop()
            // The crash: the draft still names the pack that is now live.
            let entry = String(decoding: try JSONEncoder().encode(live[pack: "a"]!), as: UTF8.self)
            let app = first.data.path + "/apps/\(first.app)"
            if legacyFormat {
                try FileSystem.writeAtomically(Array("{\"removals\":[],\"upserts\":{\"a\":\(entry)}}".utf8), to: app + "/staging.json")
            } else {
                try FileSystem.createDirectory(app + "/staging")
                try FileSystem.writeAtomically(Array("{\"upsert\":\(entry)}".utf8), to: app + "/staging/a.json")
            }
            let server = try startServer(dataPath: first.data.path)
            defer { server.stop() }
            let origin = TestOrigin(server: server, data: first.data, app: first.app, token: first.token)
            let draft = try request(origin, "GET", "/v1/apps/\(origin.app)/staging", headers: ["Authorization: Bearer \(origin.token)"])
            #expect(draft.bodyText.contains("\"changed\" : [\n    \"a\"\n  ]"), "the draft is read back: \(draft.bodyText)")
            #expect(!FileSystem.exists(app + "/staging.json"), "the first format is converted")
            let response = try post(origin, "/v1/apps/\(origin.app)/releases")
            #expect(response.status == 200 && response.bodyText.contains("\"changed\" : false"))
            let blob = try request(origin, "GET", "/v1/apps/\(origin.app)/blobs/\(live[pack: "a"]!.sha256)")
            #expect(blob.status == 200 && Int64(blob.body.count) == live[pack: "a"]!.size)
        }
    }

    @Test("A release written but never made live is removed at start-up and never served")
    func unpublishedRelease() async throws {
        let data = TemporaryDirectory("depot-unpublished")
        defer { data.remove() }
        let token = try prepareDataFolder(data.path, app: "com.example.u")
        var server = try startServer(dataPath: data.path)
        let put = "PUT /v1/apps/com.example.u/packs/a?release=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nContent-Length: 1\r\nConnection: close\r\n\r\nz"
        #expect(try RawHTTP.send(port: server.port, put).first?.status == 201)
        server.stop()
        // The crash: release 2's file is written, `current` still says 1.
        let one = try FileSystem.readFile(data.path + "/apps/com.example.u/releases/000001.json")
        try FileSystem.writeAtomically(one, to: data.path + "/apps/com.example.u/releases/000002.json")
        server = try startServer(dataPath: data.path)
        defer { server.stop() }
        #expect(!FileSystem.exists(data.path + "/apps/com.example.u/releases/000002.json"))
        #expect(try RawHTTP.send(port: server.port, "GET /v1/apps/com.example.u/releases/2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first?.status == 404)
        #expect(try RawHTTP.send(port: server.port, put.replacingOccurrences(of: "\r\n\r\nz", with: "\r\n\r\ny")).first?.status == 201)
        #expect(FileSystem.exists(data.path + "/apps/com.example.u/releases/000002.json"))
    }
}

@Suite("Allowance guard")
struct AllowanceGuardTests {
    @Test("A release over the shipped builds' allowances is refused with the numbers, unless forced")
    func guardAllowances() async throws {
        try await withServer { origin in
            let apps = AppStore(folder: DataFolder(origin.data.path))
            #expect(try upload(origin, pack: "e", [UInt8](repeating: 1, count: 1000), query: "?policy=essential").status == 201)
            let keys = try request(origin, "GET", "/v1/apps/\(origin.app)/info-plist").body
            let plist = try #require(try PropertyListSerialization.propertyList(from: Data(keys), format: nil) as? [String: Any])
            let essential = Int64(try #require((plist["BAInitialDownloadRestrictions"] as? [String: Any])?["BAEssentialDownloadAllowance"] as? Int))
            try apps.setAllowances(origin.app, BuildAllowances(essentialDownloadAllowance: essential + 4000, essentialMaxInstallSize: 1200))

            // 300 more installed bytes of essential content: over both limits.
            let over = try upload(origin, pack: "e2", [UInt8](repeating: 2, count: 300), query: "?policy=essential")
            #expect(over.status == 409)
            #expect(over.bodyText.contains("allowance_exceeded"))
            #expect(over.bodyText.contains("BAEssentialMaxInstallSize: the release needs 1300 installed bytes, the shipped builds allow 1200, 100 over"))
            #expect(try liveManifest(origin).version == 1)

            // Prefetch content is not limited by the essential install size (the envelope grows, within the 4000-byte margin).
            #expect(try upload(origin, pack: "p", [UInt8](repeating: 3, count: 5000)).status == 201)

            // Staged, then released: refused; forced: published.
            #expect(try upload(origin, pack: "e2", [UInt8](repeating: 2, count: 300), query: "?policy=essential", release: false).status == 202)
            #expect(try request(origin, "POST", "/v1/apps/\(origin.app)/releases", headers: ["Authorization: Bearer \(origin.token)"]).status == 409)
            #expect(try request(origin, "POST", "/v1/apps/\(origin.app)/releases?force=true", headers: ["Authorization: Bearer \(origin.token)"]).status == 201)
            #expect(try liveManifest(origin)[pack: "e2"] != nil)
        }
    }
}

@Suite("Garbage collection")
struct GarbageCollectionTests {
    @Test("Sweeping keeps live, recent and staged blobs, removes the rest; a rollback to a swept release gets 409")
    func sweep() async throws {
        let data = TemporaryDirectory("depot-gc")
        defer { data.remove() }
        let admin = try prepareDataFolder(data.path, app: "com.example.gc", role: .admin)
        var server: DepotServer? = try startServer(dataPath: data.path)
        let port = server!.port
        func put(_ pack: String, _ byte: UInt8, release: Bool = true) throws -> Int {
            let head = "PUT /v1/apps/com.example.gc/packs/\(pack)\(release ? "?release=true" : "") HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(admin)\r\nContent-Length: 100\r\nConnection: close\r\n\r\n"
            return try RawHTTP.send(port: port, head, body: [UInt8](repeating: byte, count: 100)).first?.status ?? 0
        }
        #expect(try put("a", 1) == 201)                 // release 1: a(1)
        #expect(try put("a", 2) == 201)                 // release 2: a(2); a(1) only in release 1
        #expect(try put("b", 3, release: false) == 202) // staged
        #expect(throws: DepotError.self) { try OfflineMaintenance(dataPath: data.path) }
        server?.stop()
        server = nil

        let all = { FileSystem.contents(of: data.path + "/blobs").flatMap { FileSystem.contents(of: data.path + "/blobs/" + $0) } }
        #expect(all().count == 3)
        do {
            // Offline maintenance holds the folder while it runs.
            let maintenance = try OfflineMaintenance(dataPath: data.path)
            // Everything is recent: nothing goes.
            #expect(try maintenance.collectGarbage(retention: 86_400, grace: 0, dryRun: false).blobs.isEmpty)
            try await Task.sleep(for: .milliseconds(1100))
            let dry = try maintenance.collectGarbage(retention: 0.5, grace: 0.5, dryRun: true)
            #expect(dry.blobs.count == 1 && all().count == 3)
            let swept = try maintenance.collectGarbage(retention: 0.5, grace: 0.5, dryRun: false)
            #expect(swept.blobs == dry.blobs && swept.bytes > 100)
            #expect(all().count == 2)
        }

        server = try startServer(dataPath: data.path)
        defer { server?.stop() }
        let live = try RawHTTP.send(port: server!.port, "GET /v1/apps/com.example.gc/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        #expect(live?.status == 200)
        let rollback = try RawHTTP.send(port: server!.port, "POST /v1/apps/com.example.gc/rollback?to=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(admin)\r\nConnection: close\r\n\r\n").first
        #expect(rollback?.status == 409 && rollback?.bodyText.contains("blob_missing") == true)
    }

    @Test("Two servers never share a data folder")
    func exclusiveFolder() async throws {
        try await withServer { origin in
            #expect(throws: DepotError.self) {
                try DepotServer(configuration: OriginConfiguration(dataPath: origin.data.path, http: .init(host: "127.0.0.1", port: 0, threads: 1)))
            }
        }
    }
}

@Suite("A publish cut short by a crash")
struct InterruptedPublishTests {
    /// The state a crash leaves between `head` and the live pointer: release 2 is written and
    /// listed (promotable), production still serves release 1, and the draft that became
    /// release 2 is still there.
    @Test("A blob that a written-but-not-live release names is never deleted as superseded, unused or dropped", arguments: ["replace", "same", "drop"])
    func keepsBlobsOfUnservedReleases(next: String) async throws {
        let data = TemporaryDirectory("depot-interrupted")
        defer { data.remove() }
        let app = "com.example.crash"
        let token = try prepareDataFolder(data.path, app: app)
        func put(_ port: UInt16, _ pack: String, _ byte: UInt8, query: String) throws -> Int {
            let head = "PUT /v1/apps/\(app)/packs/\(pack)\(query) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nContent-Length: 100\r\nConnection: close\r\n\r\n"
            return try RawHTTP.send(port: port, head, body: [UInt8](repeating: byte, count: 100)).first?.status ?? 0
        }
        var server = try startServer(dataPath: data.path)
        #expect(try put(server.port, "a", 1, query: "?release=true") == 201)
        #expect(try put(server.port, "b", 2, query: "") == 202)
        let draftFile = data.path + "/apps/\(app)/staging/b.json"
        let draft = try FileSystem.readFile(draftFile)
        let release = "POST /v1/apps/\(app)/releases HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nConnection: close\r\n\r\n"
        #expect(try RawHTTP.send(port: server.port, release).first?.status == 201)
        server.stop()

        // Back to what the crash left: the pointer at 1, the draft of release 2 still there.
        try FileSystem.writeAtomically(Array("1\n".utf8), to: data.path + "/apps/\(app)/current")
        try FileSystem.writeAtomically(draft, to: draftFile)
        let manifest = try Envelope.decode(FileSystem.readFile(data.path + "/apps/\(app)/releases/000002.json"))
            .verifiedManifest(trusting: AppStore(folder: DataFolder(data.path)).clientConfiguration(app).trustedKeys())
        let blob = try #require(manifest[pack: "b"]).sha256
        let blobPath = data.path + "/blobs/\(blob.prefix(2))/\(blob)"

        server = try startServer(dataPath: data.path)
        defer { server.stop() }
        switch next {
        case "replace":
            // Another upload of b supersedes the draft's: its blob is in release 2, so it stays.
            #expect(try put(server.port, "b", 3, query: "?release=true") == 201)
        case "same":
            // The draft published again: identical to nothing live, so b is added once more.
            #expect(try RawHTTP.send(port: server.port, release).first?.status == 201)
        default:
            let drop = "DELETE /v1/apps/\(app)/packs/b HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nConnection: close\r\n\r\n"
            #expect(try RawHTTP.send(port: server.port, drop).first?.status == 200)
        }
        #expect(FileSystem.fileSize(blobPath) == manifest[pack: "b"]?.size, "release 2 names a blob that was deleted")
        // Release 2 can still be promoted and served.
        let promote = "POST /v1/apps/\(app)/channels/beta?release=2 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nConnection: close\r\n\r\n"
        #expect(try RawHTTP.send(port: server.port, promote).first?.status == 201)
    }
}
