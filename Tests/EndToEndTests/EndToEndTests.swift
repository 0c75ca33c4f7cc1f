import DepotClient
import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing

/// Publishes through the real HTTP upload path with the client's transport, as `depot publish` does.
func publish(_ origin: TestOrigin, file: String, pack: String) async throws {
    let url = URL(string: origin.baseURL.absoluteString + "/v1/apps/\(origin.app)/packs/\(pack)?release=true")!
    let response = try await HTTPTransport().upload(file: file, to: url, headers: ["Authorization": "Bearer \(origin.token)"])
    #expect(response.status == 201, "\(String(decoding: response.body, as: UTF8.self))")
}

@Suite("End to end: origin and client")
struct EndToEndTests {
    @Test("Three packs (empty, 5 MiB, 3 MiB + 1) sync byte-identical; a second sync downloads nothing; republishing one replaces exactly it")
    func foundationTour() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-e2e")
            defer { work.remove() }
            let files = [
                "empty": try work.file("empty", size: 0),
                "big": try work.file("big", size: 5 << 20, seed: 2),
                "odd": try work.file("odd", size: (3 << 20) + 1, seed: 3),
            ]
            for (pack, file) in files { try await publish(origin, file: file, pack: pack) }

            let sync = DepotSync(server: origin.baseURL, configuration: try origin.clientConfiguration(), destination: work.path + "/dest")
            let first = try await sync.run()
            #expect(first.manifestVersion == 3)
            #expect(Set(first.installed) == ["empty", "big", "odd"])
            for (pack, file) in files {
                #expect(try FileSystem.readFile(work.path + "/dest/packs/" + pack) == FileSystem.readFile(file), "\(pack)")
            }

            let second = try await sync.run()
            #expect(second.installed.isEmpty)
            #expect(second.bytesDownloaded == 0)
            #expect(Set(second.unchanged) == ["empty", "big", "odd"])

            let changed = try work.file("odd2", size: (3 << 20) + 1, seed: 4)
            try await publish(origin, file: changed, pack: "odd")
            let third = try await sync.run()
            #expect(third.installed == ["odd"])
            #expect(third.manifestVersion == 4)
            #expect(try FileSystem.readFile(work.path + "/dest/packs/odd") == FileSystem.readFile(changed))
            #expect(try FileSystem.readFile(work.path + "/dest/packs/big") == FileSystem.readFile(files["big"]!))
            #expect(FileSystem.contents(of: work.path + "/dest/packs") == ["big", "empty", "odd"])
            #expect(FileSystem.contents(of: work.path + "/dest/.depot/downloads").isEmpty)
        }
    }

    @Test("After a rollback, a device installs the older content and deletes the pack the older release lacked")
    func rollbackSync() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-e2e-rollback")
            defer { work.remove() }
            let (admin, _) = try TokenStore(folder: DataFolder(origin.data.path)).create(app: origin.app, role: .admin)
            let v1 = try work.file("v1", size: 300_000, seed: 11)
            try await publish(origin, file: v1, pack: "level")
            try await publish(origin, file: try work.file("v2", size: 300_001, seed: 12), pack: "level")
            try await publish(origin, file: try work.file("extra", size: 10, seed: 13), pack: "extra")
            let sync = DepotSync(server: origin.baseURL, configuration: try origin.clientConfiguration(), destination: work.path + "/dest")
            _ = try await sync.run()
            #expect(FileSystem.contents(of: work.path + "/dest/packs") == ["extra", "level"])

            let url = URL(string: "\(origin.baseURL.absoluteString)/v1/apps/\(origin.app)/rollback?to=1")!
            let response = try await HTTPTransport().send(method: "POST", to: url, headers: ["Authorization": "Bearer \(admin)"])
            #expect(response.status == 201)
            let report = try await sync.run()
            #expect(report.manifestVersion == 4)
            #expect(report.installed == ["level"] && report.removed == ["extra"])
            #expect(try FileSystem.readFile(work.path + "/dest/packs/level") == FileSystem.readFile(v1))
            #expect(FileSystem.contents(of: work.path + "/dest/packs") == ["level"])
        }
    }

    @Test("A client with the wrong manifest key refuses to sync and installs nothing")
    func untrusted() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-e2e-untrusted")
            defer { work.remove() }
            try await publish(origin, file: try work.file("a", size: 100), pack: "a")
            var configuration = try origin.clientConfiguration()
            configuration.manifestPublicKeys = [Data(Ed25519PrivateKey().publicKey.rawRepresentation).base64EncodedString()]
            await #expect(throws: ClientError.self) {
                try await DepotSync(server: origin.baseURL, configuration: configuration, destination: work.path + "/dest").run()
            }
            #expect(FileSystem.contents(of: work.path + "/dest/packs").isEmpty)
        }
    }
}

@Suite("End to end: the README tour with the real depot binary")
struct CommandLineTourTests {
    @Test("depot serve bootstraps a data folder; publish, keys export and sync work as printed")
    func tour() async throws {
        let work = TemporaryDirectory("depot-tour")
        defer { work.remove() }
        let depot = Processes.depotBinary
        let server = try ServeProcess(data: work.path + "/data", environment: [:])
        let (port, token, url) = (server.port, server.token, server.url)

        let file = try work.file("content.bin", size: 1_000_003)
        let published = try Processes.run(depot, ["publish", file, "--server", url, "--app", "com.example.dev", "--pack", "content", "--token", token, "--release"])
        #expect(published.status == 0, "\(published.stderr)")
        #expect(published.stdout.contains("published content revision 1"))

        let exported = try Processes.run(depot, ["keys", "export", "--data", work.path + "/data", "--app", "com.example.dev"])
        #expect(exported.status == 0)
        try FileSystem.writeAtomically(Array(exported.stdout.utf8), to: work.path + "/client.json")

        let synced = try Processes.run(depot, ["sync", "--server", url, "--app", "com.example.dev", "--config", work.path + "/client.json", "--dest", work.path + "/installed"])
        #expect(synced.status == 0, "\(synced.stderr)")
        #expect(synced.stdout.contains("1 installed"))
        #expect(try FileSystem.readFile(work.path + "/installed/packs/content") == FileSystem.readFile(file))

        let denied = try Processes.run(depot, ["publish", file, "--server", url, "--app", "com.example.dev", "--pack", "content", "--token", "dpt_wrong"])
        #expect(denied.status != 0)
        #expect(denied.stderr.contains("401"))
        #expect(denied.stderr.split(separator: "\n").count == 1)

        let bad = try Processes.run(depot, ["publish", file, "--server", url, "--app", "com.example.dev", "--pack", "bad_id", "--token", token])
        #expect(bad.status != 0)

        let token2 = try Processes.run(depot, ["tokens", "create", "--data", work.path + "/data", "--app", "com.example.dev", "--role", "publisher", "--expires", "30d"])
        #expect(token2.status == 0)
        let second = try #require(token2.stdout.split(separator: "\n").last.map(String.init))
        #expect(second.hasPrefix("dpt_"))
        let id = try #require(token2.stdout.split(separator: " ").dropFirst().first.map(String.init))
        #expect(try Processes.run(depot, ["publish", file, "--server", url, "--app", "com.example.dev", "--pack", "second", "--token", second, "--release"]).status == 0)
        #expect(try Processes.run(depot, ["tokens", "revoke", id, "--data", work.path + "/data"]).status == 0)
        let afterRevoke = try Processes.run(depot, ["publish", file, "--server", url, "--app", "com.example.dev", "--pack", "third", "--token", second, "--release"])
        #expect(afterRevoke.status != 0 && afterRevoke.stderr.contains("token_revoked"))
        let listed = try Processes.run(depot, ["tokens", "list", "--data", work.path + "/data"])
        #expect(listed.stdout.contains(id) && listed.stdout.contains("revoked") && !listed.stdout.contains(second))
        #expect(try Processes.run(depot, ["tokens", "create", "--data", work.path + "/data", "--app", "com.example.dev", "--expires", "yesterday"]).status != 0)

        // Rotating the pack key: the exported configuration then carries both keys.
        #expect(try Processes.run(depot, ["keys", "rotate", "--data", work.path + "/data", "--app", "com.example.dev"]).status == 0)
        let rotated = try ClientConfiguration.decode(Array(try Processes.run(depot, ["keys", "export", "--data", work.path + "/data", "--app", "com.example.dev"]).stdout.utf8))
        #expect(rotated.packKeys.count == 2)

        // Releases 1 (content) and 2 (content + second); roll back to 1 with an admin token.
        let adminToken = try #require(try Processes.run(depot, ["tokens", "create", "--data", work.path + "/data", "--app", "com.example.dev", "--role", "admin"])
            .stdout.split(separator: "\n").last.map(String.init))
        let denied2 = try Processes.run(depot, ["rollback", "--server", url, "--app", "com.example.dev", "--to", "1", "--token", token])
        #expect(denied2.status != 0 && denied2.stderr.contains("403"))
        let rolled = try Processes.run(depot, ["rollback", "--server", url, "--app", "com.example.dev", "--to", "1", "--token", adminToken])
        #expect(rolled.status == 0, "\(rolled.stderr)")
        #expect(rolled.stdout.contains("release 3 restores the content of release 1"))
        #expect(rolled.stdout.contains("removed (devices will delete them): second"))
        let releases = try Processes.run(depot, ["releases", "--server", url, "--app", "com.example.dev"])
        let versions: [String] = releases.stdout.split(separator: "\n").map { line in String(line.prefix { $0 != "\t" }) }
        #expect(versions == ["1", "2", "3"])
        #expect(releases.stdout.split(separator: "\n").last?.hasSuffix("production") == true)

        let page = try RawHTTP.send(port: UInt16(port)!, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        #expect(page?.status == 200)
        #expect(page?.bodyText.contains("AssetDepot") == true)
    }
}

@Suite("End to end: manifest expiry")
struct ManifestRefreshTests {
    @Test("A quiet app's live manifest is re-signed before it expires; devices keep syncing and download nothing")
    func refresh() async throws {
        try await withServer(configure: {
            $0.manifestLifetime = 3
            $0.refreshInterval = 0.2
        }) { origin in
            let work = TemporaryDirectory("depot-refresh")
            defer { work.remove() }
            try await publish(origin, file: try work.file("a", size: 1000), pack: "a")
            let sync = DepotSync(server: origin.baseURL, configuration: try origin.clientConfiguration(), destination: work.path + "/dest")
            let first = try await sync.run()
            try await Task.sleep(for: .seconds(4))
            // Past the first manifest's expiry: a refreshed one is live, and it is accepted.
            let later = try await sync.run()
            #expect(later.manifestVersion > first.manifestVersion)
            #expect(later.installed.isEmpty && later.unchanged == ["a"])
        }
    }
}

@Suite("End to end: manifest signing key rotation")
struct SigningRotationTests {
    @Test("During the grace period both keys sign and old and new builds sync; after it, only builds with the new key do")
    func rotation() async throws {
        try await withServer(configure: { $0.refreshInterval = 0.2 }) { origin in
            let work = TemporaryDirectory("depot-signing")
            defer { work.remove() }
            let apps = AppStore(folder: DataFolder(origin.data.path))
            try await publish(origin, file: try work.file("a", size: 500), pack: "a")
            let oldBuild = try origin.clientConfiguration()
            #expect(oldBuild.manifestPublicKeys.count == 1)

            let newID = try apps.rotateSigningKey(grace: 3600)
            let bothKeys = try origin.clientConfiguration()
            #expect(bothKeys.manifestPublicKeys.count == 2)
            var newOnly = bothKeys
            newOnly.manifestPublicKeys = [bothKeys.manifestPublicKeys[1]]
            // The running server re-signs the live manifest with both keys without a publish.
            func signers() async throws -> [String] {
                let response = try await HTTPTransport().get(URL(string: origin.baseURL.absoluteString + "/v1/apps/\(origin.app)/manifest")!)
                return try Envelope.decode(response.body).signatures.map(\.keyid)
            }
            try await Eventually.wait { try await signers().count >= 2 }
            #expect(try await signers().contains(newID))
            for (name, configuration) in [("old", oldBuild), ("both", bothKeys), ("new", newOnly)] {
                let report = try await DepotSync(server: origin.baseURL, configuration: configuration, destination: work.path + "/\(name)").run()
                #expect(report.installed == ["a"], "\(name)")
            }

            // The grace period ends: only the newest key signs; a build that knows only the old key is refused.
            _ = try apps.rotateSigningKey(grace: 0)
            try await Eventually.wait { try await signers().count == 1 }
            #expect(try await signers().count == 1)
            await #expect(throws: ClientError.self) {
                try await DepotSync(server: origin.baseURL, configuration: oldBuild, destination: work.path + "/old").run()
            }
            let latest = try origin.clientConfiguration()
            #expect(latest.manifestPublicKeys.count == 1)
            #expect(try await DepotSync(server: origin.baseURL, configuration: latest, destination: work.path + "/latest").run().installed == ["a"])
        }
    }
}
