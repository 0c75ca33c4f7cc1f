import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Blobs are content-addressed in one store shared by every app, and a managed app's archives
/// are stored as uploaded, so two apps (or two uploads) can hold the very same blob. No removal
/// may take a blob anything still names, and an app's blob route answers only for its own.
@Suite("Shared blobs: no removal takes what anything names; blobs answer only for their app")
struct SharedBlobTests {
    static let archive = ArchiveFixture.uncompressed([("levels/1.bin", (0..<3000).map { UInt8($0 % 253) })])

    /// Two managed apps on `origin`; returns their ids and admin tokens.
    static func twoManagedApps(_ origin: TestOrigin) throws -> [(app: String, token: String)] {
        try ["com.example.first", "com.example.second"].map { app in
            (app, try ArchiveFixture.createManagedApp(app, group: "group." + app, in: origin.data.path))
        }
    }

    static func on(_ origin: TestOrigin, _ app: (app: String, token: String)) -> TestOrigin {
        TestOrigin(server: origin.server, data: origin.data, app: app.app, token: app.token)
    }

    static func blobStatus(_ origin: TestOrigin, _ sha256: String) throws -> Int {
        try request(origin, "GET", "/v1/apps/\(origin.app)/blobs/\(sha256)").status
    }

    /// The reproduction, in one app and across two, for whatever store `origin` uses.
    static func refusedPublishKeepsLiveBlob(_ origin: TestOrigin) throws {
        let apps = try twoManagedApps(origin)
        let (first, second) = (on(origin, apps[0]), on(origin, apps[1]))
        let sha = Hex.encode(SHA256Hasher.hash(archive))

        // One app: published (201, blob 200), then the same archive again with a stale base (409).
        #expect(try upload(first, pack: "levels", archive).status == 201)
        #expect(try blobStatus(first, sha) == 200)
        #expect(try upload(first, pack: "levels", [UInt8](archive), query: "?base=0").status == 409)
        #expect(try blobStatus(first, sha) == 200, "a refused publish of the same bytes must not delete the live blob")

        // Across apps: the second app's publisher uploads the first app's public archive with a
        // stale base, then stages it and drops the staged pack.
        #expect(try upload(second, pack: "copy", archive, query: "?base=7").status == 409)
        #expect(try blobStatus(first, sha) == 200)
        #expect(try blobStatus(second, sha) == 404, "the second app has no release naming it")
        #expect(try upload(second, pack: "copy", archive, release: false).status == 202)
        let dropped = try request(second, "DELETE", "/v1/apps/\(second.app)/packs/copy", headers: ["Authorization: Bearer \(second.token)"])
        #expect(dropped.status == 200, "\(dropped.bodyText)")
        #expect(try blobStatus(first, sha) == 200, "dropping another app's staged copy must not delete the live blob")

        // Both release it; the first drops it from its release and it stays for the second.
        #expect(try upload(second, pack: "copy", archive).status == 201)
        #expect(try blobStatus(second, sha) == 200)
        let other = ArchiveFixture.uncompressed([("levels/1.bin", Array(repeating: 1, count: 10))])
        #expect(try upload(first, pack: "levels", other).status == 201)
        _ = try origin.server.collectGarbage(retention: 0, grace: 0, dryRun: false)
        #expect(try blobStatus(second, sha) == 200, "garbage collection keeps what another app's live release names")
        #expect(try blobStatus(first, sha) == 200, "the first app's older release still names it, and it is still stored")
    }

    @Test("A refused publish, or a dropped staged pack, of bytes that are live (in this app or another) leaves the live blob answering 200")
    func refusedPublish() async throws {
        try await withServer { origin in try Self.refusedPublishKeepsLiveBlob(origin) }
    }

    @Test("A blob answers only under an app whose release names it: not another app's (with download credentials), not a draft's")
    func blobsBelongToTheirApp() async throws {
        try await withServer { origin in
            let gated = "com.example.gated"
            let folder = DataFolder(origin.data.path)
            try AppStore(folder: folder).create(gated)
            let login = try #require(try AppStore(folder: folder).setDownloadCredentials(gated, enabled: true))
            let gatedToken = try TokenStore(folder: folder).create(app: gated, role: .publisher).token
            let secret = TestOrigin(server: origin.server, data: origin.data, app: gated, token: gatedToken)
            #expect(try upload(secret, pack: "secret", Array("private content".utf8)).status == 201)
            let credentials = "Authorization: Basic " + Data("\(login.username):\(login.password)".utf8).base64EncodedString()
            let manifest = try request(secret, "GET", "/v1/apps/\(gated)/manifest", headers: [credentials])
            let entry = try #require(try Envelope.decode(manifest.body).verifiedManifest(trusting: secret.clientConfiguration().trustedKeys())[pack: "secret"])
            #expect(try request(secret, "GET", "/v1/apps/\(gated)/blobs/\(entry.sha256)", headers: [credentials]).status == 200)
            #expect(try request(secret, "GET", "/v1/apps/\(gated)/blobs/\(entry.sha256)").status == 401)
            let open = try request(origin, "GET", "/v1/apps/\(origin.app)/blobs/\(entry.sha256)")
            #expect(open.status == 404, "an open app's route must not serve a gated app's blob")
            #expect(open.header("Cache-Control")?.contains("immutable") != true)

            // A draft's blob is served by no app until a release names it.
            let staged = try upload(origin, pack: "draft", Array("not yet released".utf8), release: false)
            #expect(staged.status == 202)
            struct Staged: Decodable { var pack: PackEntry }
            let draft = try JSONDecoder().decode(Staged.self, from: Data(staged.body)).pack
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)/blobs/\(draft.sha256)").status == 404)
            #expect(try request(origin, "HEAD", "/v1/apps/\(origin.app)/blobs/\(draft.sha256)").status == 404)
            #expect(try request(origin, "POST", "/v1/apps/\(origin.app)/releases", headers: ["Authorization: Bearer \(origin.token)"]).status == 201)
            let released = try request(origin, "GET", "/v1/apps/\(origin.app)/blobs/\(draft.sha256)")
            #expect(released.status == 200 && Int64(released.body.count) == draft.size)
            // After a restart (the index is read back from the release files) the same holds.
            origin.server.stop()
            let restarted = try startServer(dataPath: origin.data.path)
            defer { restarted.stop() }
            let again = TestOrigin(server: restarted, data: origin.data, app: origin.app, token: origin.token)
            #expect(try request(again, "GET", "/v1/apps/\(origin.app)/blobs/\(draft.sha256)").status == 200)
            #expect(try request(again, "GET", "/v1/apps/\(origin.app)/blobs/\(entry.sha256)").status == 404)
        }
    }

    @Test("Property: random publishes, stale-base refusals, drafts dropped, rollbacks and garbage collection across three apps sharing bytes; every blob a live release names always answers 200")
    func property() async throws {
        try await withServer { origin in
            let apps = try ["com.example.a", "com.example.b", "com.example.c"].map { app in
                Self.on(origin, (app, try ArchiveFixture.createManagedApp(app, group: "group." + app, in: origin.data.path)))
            }
            let pool = (0..<4).map { seed in ArchiveFixture.uncompressed([("f.bin", (0..<(500 + seed * 37)).map { UInt8(truncatingIfNeeded: $0 &* (seed + 3)) })]) }
            var random = SeededRandom(seed: 0x5eed_b10b)
            var counts: [String: Int] = [:]
            for step in 0..<90 {
                let target = apps[random.next(3)]
                let pack = ["p", "q"][random.next(2)]
                let bytes = pool[random.next(pool.count)]
                let live = try Self.liveVersion(target)
                switch random.next(6) {
                case 0, 1:
                    let status = try upload(target, pack: pack, bytes, query: "?base=\(live)").status
                    #expect([200, 201].contains(status), "step \(step)")
                    counts["publish", default: 0] += 1
                case 2:
                    #expect(try upload(target, pack: pack, bytes, query: "?base=\(live + 1 + random.next(3))").status == 409)
                    counts["refused", default: 0] += 1
                case 3:
                    #expect(try upload(target, pack: pack, bytes, release: false).status == 202)
                    if random.next(2) == 0 {
                        let drop = try request(target, "DELETE", "/v1/apps/\(target.app)/packs/\(pack)", headers: ["Authorization: Bearer \(target.token)"])
                        #expect([200, 409].contains(drop.status), "step \(step): \(drop.bodyText)")
                        counts["dropped", default: 0] += 1
                    }
                case 4 where live > 1:
                    let to = 1 + random.next(live - 1)
                    let rollback = try request(target, "POST", "/v1/apps/\(target.app)/rollback?to=\(to)", headers: ["Authorization: Bearer \(target.token)"])
                    #expect([200, 201, 409].contains(rollback.status), "step \(step): \(rollback.bodyText)")
                    counts["rollback", default: 0] += 1
                default:
                    _ = try origin.server.collectGarbage(retention: 0, grace: 0, dryRun: false)
                    counts["gc", default: 0] += 1
                }
                for app in apps {
                    guard let manifest = try Self.live(app) else { continue }
                    for entry in manifest.packs {
                        let blob = try request(app, "GET", "/v1/apps/\(app.app)/blobs/\(entry.sha256)")
                        #expect(blob.status == 200 && Int64(blob.body.count) == entry.size, "step \(step): \(app.app) \(entry.id) answers \(blob.status)")
                    }
                }
            }
            #expect(counts["refused", default: 0] > 5 && counts["gc", default: 0] > 5 && counts["publish", default: 0] > 10, "\(counts)")
        }
    }

    static func live(_ origin: TestOrigin) throws -> Manifest? {
        let response = try request(origin, "GET", "/v1/apps/\(origin.app)/manifest")
        guard response.status == 200 else { return nil }
        return try Envelope.decode(response.body).verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())
    }

    static func liveVersion(_ origin: TestOrigin) throws -> Int { try live(origin)?.version ?? 0 }
}

/// A small deterministic generator (SplitMix64), so a failing sequence can be replayed.
struct SeededRandom {
    var state: UInt64
    init(seed: UInt64) { state = seed }

    mutating func next(_ bound: Int) -> Int {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return Int((z ^ (z >> 31)) % UInt64(bound))
    }
}
