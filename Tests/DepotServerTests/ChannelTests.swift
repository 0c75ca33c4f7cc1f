import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

@Suite("Channels")
struct ChannelTests {
    static func manifest(_ origin: TestOrigin, channel: String) throws -> Manifest? {
        let response = try request(origin, "GET", "/v1/apps/\(origin.app)/channels/\(channel)/manifest")
        guard response.status == 200 else { return nil }
        return try Envelope.decode(response.body).verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())
    }

    static func post(_ origin: TestOrigin, _ target: String, token: String? = nil) throws -> RawHTTP.Response {
        try request(origin, "POST", target, headers: ["Authorization: Bearer \(token ?? origin.token)"])
    }

    @Test("Beta gets a release first, production keeps its own; promotion moves production forward only")
    func betaThenProduction() async throws {
        try await withServer { origin in
            let app = origin.app
            #expect(try upload(origin, pack: "base", [1, 2, 3]).status == 201)
            let beta = try upload(origin, pack: "new-level", Array(repeating: 9, count: 5000), query: "?channel=beta")
            #expect(beta.status == 201, "\(beta.bodyText)")
            #expect(beta.bodyText.contains("\"manifestURL\" : \"http://127.0.0.1:\(origin.port)/v1/apps/\(app)/channels/beta/manifest\""))

            // Production still serves release 1; beta serves 2, which adds the new pack to production's packs.
            #expect(try liveManifest(origin).version == 1)
            let betaManifest = try #require(try Self.manifest(origin, channel: "beta"))
            #expect(betaManifest.version == 2)
            #expect(betaManifest.packs.map(\.id) == ["base", "new-level"])
            #expect(try Self.manifest(origin, channel: "production")?.version == 1)
            #expect(try request(origin, "GET", "/v1/apps/\(app)/channels/nightly/manifest").status == 404)

            let list = try request(origin, "GET", "/v1/apps/\(app)/channels")
            #expect(list.status == 200)
            #expect(list.bodyText.contains("{\"manifestURL\":\"http://127.0.0.1:\(origin.port)/v1/apps/\(app)/channels/beta/manifest\",\"name\":\"beta\",\"release\":2}"))
            let releases = try request(origin, "GET", "/v1/apps/\(app)/releases")
            #expect(releases.bodyText.contains("\"channels\":{\"beta\":2,\"production\":1}"))
            let plist = try request(origin, "GET", "/v1/apps/\(app)/info-plist?channel=beta")
            #expect(plist.bodyText.contains("/v1/apps/\(app)/channels/beta/manifest"))

            // Promote beta's release to production.
            #expect(try Self.post(origin, "/v1/apps/\(app)/channels/production?release=2").status == 201)
            #expect(try liveManifest(origin).version == 2)
            #expect(try Self.post(origin, "/v1/apps/\(app)/channels/production?release=2").status == 200, "already there: unchanged")
            let backwards = try Self.post(origin, "/v1/apps/\(app)/channels/production?release=1")
            #expect(backwards.status == 409 && backwards.bodyText.contains("channel_backwards"))
            #expect(try Self.post(origin, "/v1/apps/\(app)/channels/production?release=9").status == 404)

            // A hotfix on production, then a channel per shipped build pinned to an older release.
            #expect(try upload(origin, pack: "base", [4, 5, 6]).status == 201)
            #expect(try liveManifest(origin).version == 3)
            #expect(try Self.manifest(origin, channel: "beta")?.version == 2)
            #expect(try Self.post(origin, "/v1/apps/\(app)/channels/build-1.0?release=1").status == 201)
            #expect(try Self.manifest(origin, channel: "build-1.0")?.packs.map(\.id) == ["base"])

            // A base check is per channel.
            let stale = try upload(origin, pack: "other", [7], query: "?channel=beta&base=3")
            #expect(stale.status == 409)
            #expect(try upload(origin, pack: "other", [7], query: "?channel=beta&base=2").status == 201)
            #expect(try Self.manifest(origin, channel: "beta")?.version == 4)
            #expect(try Self.manifest(origin, channel: "beta")?.packs.map(\.id) == ["base", "new-level", "other"])
            #expect(try liveManifest(origin).version == 3)
        }
    }

    @Test("A release published on beta before the origin re-signed production's older content (a signing key rotated beside it; a root added, expiry alike) is promoted over it: published anew above the re-signed release with exactly its packs; an older release is still refused")
    func promotionOverAReSignedChannel() async throws {
        try await withServer { origin in
            let app = origin.app
            #expect(try upload(origin, pack: "base", [1, 2, 3]).status == 201)
            #expect(try upload(origin, pack: "base", [4, 5, 6], query: "?channel=beta").status == 201)
            let rotated = try Processes.run(Processes.depotBinary, ["keys", "rotate-signing", "--data", origin.data.path])
            #expect(rotated.status == 0, "\(rotated.stderr)")
            // The running origin re-signs every channel with both keys: production's release 1
            // packs become a release above beta's 2.
            #expect(try Eventually.wait { try liveManifest(origin).version > 2 })
            let resigned = try liveManifest(origin).version
            let promoted = try Self.post(origin, "/v1/apps/\(app)/channels/production?release=2")
            #expect(promoted.status == 201, "\(promoted.bodyText)")
            let live = try liveManifest(origin)
            #expect(promoted.bodyText.contains("\"release\" : \(live.version)"), "\(promoted.bodyText)")
            let beta = try #require(try Self.manifest(origin, channel: "beta"))
            func content(_ manifest: Manifest) -> [String] { manifest.packs.map { "\($0.id) \($0.revision) \($0.sha256)" } }
            #expect(live.version > resigned && content(live) == content(beta), "release 2's packs as they are, revisions too, above \(resigned)")
            #expect(try Self.post(origin, "/v1/apps/\(app)/channels/production?release=2").status == 200, "already there: unchanged")
            let backwards = try Self.post(origin, "/v1/apps/\(app)/channels/production?release=1")
            #expect(backwards.status == 409 && backwards.bodyText.contains("channel_backwards"), "\(backwards.bodyText)")
            #expect(try liveManifest(origin).version == live.version)
        }
    }

    @Test("A release published on beta before production removed a pack, production then re-signed: promoting it would bring the pack back, so it is still refused as backwards")
    func promotionAfterAChangeIsBackwards() async throws {
        try await withServer { origin in
            let app = origin.app
            #expect(try upload(origin, pack: "base", [1, 2, 3]).status == 201)
            #expect(try upload(origin, pack: "extra", [7]).status == 201)
            #expect(try upload(origin, pack: "base", [4, 5, 6], query: "?channel=beta").status == 201)  // release 3: base r2, extra r1
            let removed = try request(origin, "DELETE", "/v1/apps/\(app)/packs/extra?removeLive=true&release=true", headers: ["Authorization: Bearer \(origin.token)"])
            #expect(removed.status == 201, "\(removed.bodyText)")
            let changed = try liveManifest(origin).version
            #expect(try Processes.run(Processes.depotBinary, ["keys", "rotate-signing", "--data", origin.data.path]).status == 0)
            #expect(try Eventually.wait { try liveManifest(origin).version > changed })
            let backwards = try Self.post(origin, "/v1/apps/\(app)/channels/production?release=3")
            #expect(backwards.status == 409 && backwards.bodyText.contains("channel_backwards"), "\(backwards.bodyText)")
            #expect(try liveManifest(origin).packs.map(\.id) == ["base"])
        }
    }

    @Test("Rollback on a channel leaves the others; removing a channel needs an admin and spares production")
    func rollbackAndRemoval() async throws {
        try await withServer { origin in
            let app = origin.app
            let admin = try TokenStore(folder: DataFolder(origin.data.path)).create(app: app, role: .admin).token
            #expect(try upload(origin, pack: "a", [1]).status == 201)
            #expect(try upload(origin, pack: "b", [2], query: "?channel=beta").status == 201)
            let rollback = try Self.post(origin, "/v1/apps/\(app)/rollback?to=1&channel=beta", token: admin)
            #expect(rollback.status == 201, "\(rollback.bodyText)")
            #expect(try Self.manifest(origin, channel: "beta")?.version == 3)
            #expect(try Self.manifest(origin, channel: "beta")?.packs.map(\.id) == ["a"])
            #expect(try liveManifest(origin).version == 1)

            #expect(try request(origin, "DELETE", "/v1/apps/\(app)/channels/beta", headers: ["Authorization: Bearer \(origin.token)"]).status == 403)
            #expect(try request(origin, "DELETE", "/v1/apps/\(app)/channels/production", headers: ["Authorization: Bearer \(admin)"]).status == 409)
            #expect(try request(origin, "DELETE", "/v1/apps/\(app)/channels/beta", headers: ["Authorization: Bearer \(admin)"]).status == 204)
            #expect(try Self.manifest(origin, channel: "beta") == nil)
            // Its releases stay: listed, readable, promotable.
            #expect(try request(origin, "GET", "/v1/apps/\(app)/releases/3").status == 200)
            #expect(try request(origin, "GET", "/v1/apps/\(app)/channels/bad_name/manifest").status == 400)
        }
    }

    @Test("A restart keeps channel releases above production's, and the sweep keeps their blobs")
    func restartAndGarbageCollection() async throws {
        let data = TemporaryDirectory("depot-channels")
        defer { data.remove() }
        let app = "com.example.game"
        let token = try prepareDataFolder(data.path, app: app)
        var server = try startServer(dataPath: data.path)
        func call(_ method: String, _ target: String, body: [UInt8] = []) throws -> RawHTTP.Response {
            let head = "\(method) \(target) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
            return try #require(try RawHTTP.send(port: server.port, head, body: body).first)
        }
        #expect(try call("PUT", "/v1/apps/\(app)/packs/a?release=true", body: [1]).status == 201)
        #expect(try call("PUT", "/v1/apps/\(app)/packs/b?release=true&channel=beta", body: Array(repeating: 2, count: 100)).status == 201)
        server.stop()
        server = try startServer(dataPath: data.path)
        defer { server.stop() }
        let beta = try call("GET", "/v1/apps/\(app)/channels/beta/manifest")
        #expect(beta.status == 200)
        #expect(try call("GET", "/v1/apps/\(app)/releases/2").status == 200)
        #expect(try server.collectGarbage(retention: 0, grace: 0, dryRun: true).blobs.isEmpty)
        // The next release number goes past beta's.
        let next = try call("PUT", "/v1/apps/\(app)/packs/c?release=true", body: [3])
        #expect(next.status == 201 && next.bodyText.contains("\"release\" : 3"))
    }

    @Test("A release whose blobs garbage collection removed is never put on a channel: promoting it or rolling back to it is refused (409 blob_missing) and nothing changes")
    func collectedReleaseNotPromoted() async throws {
        let data = TemporaryDirectory("depot-channels")
        defer { data.remove() }
        let app = "com.example.game"
        let token = try prepareDataFolder(data.path, app: app)
        let admin = try TokenStore(folder: DataFolder(data.path)).create(app: app, role: .admin).token
        let server = try startServer(dataPath: data.path)
        defer { server.stop() }
        func call(_ method: String, _ target: String, body: [UInt8] = [], bearer: String? = nil) throws -> RawHTTP.Response {
            let head = "\(method) \(target) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(bearer ?? token)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
            return try #require(try RawHTTP.send(port: server.port, head, body: body).first)
        }
        #expect(try call("PUT", "/v1/apps/\(app)/packs/a?release=true", body: [1, 1]).status == 201)
        #expect(try call("PUT", "/v1/apps/\(app)/packs/a?release=true", body: [2, 2]).status == 201)
        // Release 1 is served by no channel: with no retention its blob goes.
        #expect(try server.collectGarbage(retention: 0, grace: 0, dryRun: false).blobs.count == 1)
        let promoted = try call("POST", "/v1/apps/\(app)/channels/beta?release=1")
        #expect(promoted.status == 409 && promoted.bodyText.contains("blob_missing"), "\(promoted.status) \(promoted.bodyText)")
        #expect(try call("GET", "/v1/apps/\(app)/channels/beta/manifest").status == 404, "no channel was made")
        let rolledBack = try call("POST", "/v1/apps/\(app)/rollback?to=1", bearer: admin)
        #expect(rolledBack.status == 409 && rolledBack.bodyText.contains("blob_missing"), "\(rolledBack.status) \(rolledBack.bodyText)")
        #expect(try call("GET", "/v1/apps/\(app)/releases/3").status == 404, "no release was made")
        #expect((200..<300).contains(try call("POST", "/v1/apps/\(app)/channels/beta?release=2").status), "a release whose blobs are stored is promoted")
    }
}
