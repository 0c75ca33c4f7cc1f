import DepotClient
import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// A signed manifest names its channel: one channel's envelope cannot stand in for another's.
@Suite("Manifests name their channel")
struct ChannelBindingTests {
    static func promote(_ origin: TestOrigin, _ channel: String, to release: Int) throws -> Int {
        let head = "POST /v1/apps/\(origin.app)/channels/\(channel)?release=\(release) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(origin.token)\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        return try #require(try RawHTTP.send(port: origin.port, head).first).status
    }

    static func envelope(_ origin: TestOrigin, _ path: String) throws -> [UInt8] {
        let response = try #require(try RawHTTP.send(port: origin.port, "GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
        #expect(response.status == 200)
        return response.body
    }

    @Test("Beta's envelope (a higher version) served at the production URL is refused and raises no floor; a promoted release is signed again for production under the same version")
    func betaAtProductionURL() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-channel")
            defer { work.remove() }
            try put(origin, "a", bytes(10_000, seed: 1))
            try put(origin, "b", bytes(20_000, seed: 2), query: "&channel=beta")
            let beta = ManifestSource.url(server: origin.baseURL, app: origin.app, channel: "beta")

            var device = DepotSync(server: origin.baseURL, configuration: try origin.clientConfiguration(), destination: work.path + "/dest")
            #expect(try await device.run().manifestVersion == 1)
            // A poisoned cache answers the production URL with beta's envelope.
            device.manifestURL = beta
            await #expect { try await device.run() } throws: { ($0 as? ClientError)?.kind == .wrongChannel }
            #expect(!FileSystem.exists(work.path + "/dest/packs/b"), "nothing of beta's was installed")
            #expect(try StateStore(destination: work.path + "/dest").read(app: origin.app).floor(channel: "production") == 1)
            device.manifestURL = nil
            #expect(try await device.run().manifestVersion == 1, "the real production manifest is still accepted (no raised floor)")

            // Promotion keeps the number; production's copy names production, beta's still beta.
            #expect(try Self.promote(origin, "production", to: 2) == 201)
            let keys = try origin.clientConfiguration().trustedKeys()
            let production = try Envelope.decode(Self.envelope(origin, "/v1/apps/\(origin.app)/manifest")).verifiedManifest(trusting: keys)
            #expect(production.version == 2 && production.channel == "production" && production.packs.map(\.id) == ["a", "b"])
            let betaManifest = try Envelope.decode(Self.envelope(origin, beta.path)).verifiedManifest(trusting: keys)
            #expect(betaManifest.version == 2 && betaManifest.channel == "beta")
            #expect(try await device.run().manifestVersion == 2)
            #expect(try FileSystem.readFile(work.path + "/dest/packs/b") == bytes(20_000, seed: 2))

            // And the other way: a beta device is not handed production's envelope.
            var tester = DepotSync(server: origin.baseURL, configuration: try origin.clientConfiguration(), destination: work.path + "/beta")
            tester.channel = "beta"
            #expect(try await tester.run().manifestVersion == 2)
            tester.manifestURL = ManifestSource.url(server: origin.baseURL, app: origin.app)
            await #expect { try await tester.run() } throws: { ($0 as? ClientError)?.kind == .wrongChannel }
        }
    }

    @Test("A live release signed before manifests named their channel is signed again for its channel by the maintenance pass; such a manifest is taken as production's only")
    func unlabelledReleases() throws {
        let data = TemporaryDirectory("depot-unlabelled")
        defer { data.remove() }
        let app = "com.example.old"
        try prepareDataFolder(data.path, app: app)
        let folder = DataFolder(data.path)
        let apps = AppStore(folder: folder)
        // Written as the origin wrote them before: no channel in the payload.
        let manifest = Manifest(app: app, version: 1, publishedAt: Date(), expiresAt: Date().addingTimeInterval(86_400 * 90), packs: [])
        let envelope = try Envelope.sign(manifest, with: apps.signingKeys()).encoded()
        try FileSystem.createDirectory(folder.releases(app))
        try FileSystem.writeAtomically(envelope, to: folder.release(app, 1))
        try FileSystem.writeAtomically(Array("1\n".utf8), to: folder.head(app))
        try FileSystem.createDirectory(folder.channels(app))
        try FileSystem.writeAtomically(Array("1\n".utf8), to: folder.channels(app) + "/beta")
        try FileSystem.writeAtomically(Array("1\n".utf8), to: folder.currentPointer(app))

        let keys = try apps.clientConfiguration(app).trustedKeys()
        let url = URL(string: "http://127.0.0.1/")!
        #expect(try ManifestSource(url: url, app: app, trustedKeys: keys).verify(envelope, floor: 0, now: Date()).version == 1)
        #expect(throws: ClientError.self) { try ManifestSource(url: url, app: app, channel: "beta", trustedKeys: keys).verify(envelope, floor: 0, now: Date()) }

        let releases = ReleaseStore(folder: folder, apps: apps, manifestLifetime: 86_400 * 90)
        #expect(try releases.refreshExpiring().sorted() == [app, app + " (beta)"])
        for channel in ["production", "beta"] {
            let live = try #require(try releases.current(app, channel: channel))
            #expect(live.version == 1 && live.channel == channel)
            #expect(try ManifestSource(url: url, app: app, channel: channel, trustedKeys: keys).verify(live.envelope, floor: 0, now: Date()).version == 1)
        }
        #expect(try releases.refreshExpiring().isEmpty, "signed once")
        // A new store (a restart) reads the copies back.
        let again = ReleaseStore(folder: folder, apps: apps, manifestLifetime: 86_400 * 90)
        #expect(try again.current(app, channel: "beta")?.channel == "beta")
    }
}
