import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// A root version added (`depot root add`, as Deploy/README's rotation of the online key does)
/// and at once a signed promotion: the origin's own re-sign for the new root may land before the
/// beta publish, between it and the promotion, or after the promotion.
@Suite("Protected channels: a signed promotion right after a root rotation", .blocking)
struct RootRotationPromotionTests {
    @Test("The re-sign for a new root lands between the beta publish and the signed promotion: the promotion goes through")
    func resignBetweenPublishAndPromotion() async throws {
        try await withServer(configure: { $0.refreshInterval = 3600 }) { origin in
            let lab = try ProtectedLab(origin, label: "depot-rotation", pack: "level", bytes: bytes(700, seed: 1))
            defer { lab.work.remove() }
            let (app, data, work, trust, first, common) = (origin.app, origin.data.path, lab.work, lab.trust, lab.root, lab.common)
            let depot = lab.depot
            for round in 2...4 {
                try FileSystem.writeAtomically(Array("level \(round)".utf8), to: work.path + "/level.bin")
                let beta = try depot(["publish", "level.bin", "--pack", "level", "--release", "--channel", "beta", "--quiet"] + common)
                #expect(beta.status == 0, "\(beta.stderr)")
                let release = try TrustFixture.manifest(ProtectedChannelTests.served(origin, channel: "beta").bytes).version
                let next = try trust.root(version: round, dataPath: data)
                _ = try RootAdmin(dataPath: data).add(next.encoded(), app: app)
                #expect(try Eventually.wait { try ProtectedChannelTests.served(origin).envelope.roots?.count == round })
                let servedBefore = try TrustFixture.manifest(ProtectedChannelTests.served(origin).bytes).version
                #expect(servedBefore > release, "the re-sign landed after the publish")
                let promoted = try lab.promote(release)
                #expect(promoted.status == 0, "round \(round): \(promoted.stdout)\(promoted.stderr)")
                let verified = try ProtectedChannelTests.verified(origin, root: first)
                #expect(verified.signedRelease == release && verified.manifest.packs.first?.plaintextSHA256 == Hex.encode(SHA256Hasher.hash(Array("level \(round)".utf8))))
            }
        }
    }
}

/// The same against the real `depot serve`, with blobs on disk and in an S3 bucket, with no
/// wait between the steps: the re-sign lands wherever it does, eight times over.
@Suite("Protected channels: rotations and signed promotions at once, on disk and in a bucket", .serialized, .blocking)
struct RootRotationRaceTests {
    static func rounds(_ environment: [String: String]) throws {
        let work = TemporaryDirectory("depot-rotation-race")
        defer { work.remove() }
        let data = work.path + "/data"
        let server = try ServeProcess(data: data, environment: environment)
        defer { server.process.terminate(); server.process.waitUntilExit() }
        let app = "com.example.dev"
        func depot(_ arguments: [String]) throws -> Processes.Result {
            try Processes.run(Processes.depotBinary, arguments, environment: ["DEPOT_TOKEN": server.token, "XDG_CACHE_HOME": work.path + "/cache"], cwd: work.path)
        }
        func served(_ channel: String) throws -> Envelope {
            let response = try #require(try RawHTTP.send(port: UInt16(server.port)!, "GET /v1/apps/\(app)/channels/\(channel)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
            return try Envelope.decode(response.body)
        }
        let common = ["--server", server.url, "--app", app]
        try FileSystem.writeAtomically(Array("level 1".utf8), to: work.path + "/level.bin")
        #expect(try depot(["publish", "level.bin", "--pack", "level", "--release", "--quiet"] + common).status == 0)
        let trust = TrustFixture(app: app)
        let first = try trust.addRoot(dataPath: data)
        #expect(try Eventually.wait { try served("production").roots == [first] })
        try FileSystem.writeAtomically(TrustFixture.keyFile(trust.releaseKeys[0]), to: work.path + "/release-key.json")
        let exported = try depot(["keys", "export", "--data", data, "--app", app])
        try FileSystem.writeAtomically(Array(exported.stdout.utf8), to: work.path + "/config.json")
        for round in 2...9 {
            try FileSystem.writeAtomically(Array("level \(round)".utf8), to: work.path + "/level.bin")
            _ = try RootAdmin(dataPath: data).add(trust.root(version: round, dataPath: data).encoded(), app: app)
            let beta = try depot(["publish", "level.bin", "--pack", "level", "--release", "--channel", "beta", "--quiet"] + common)
            #expect(beta.status == 0, "\(beta.stderr)")
            let release = try TrustFixture.manifest(served("beta").encoded()).version
            let promoted = try depot(["channels", "promote", "--channel", "production", "--release", "\(release)", "--sign", "release-key.json", "--config", "config.json", "--packs", "."] + common)
            #expect(promoted.status == 0, "round \(round): \(promoted.stdout)\(promoted.stderr)")
            let verified = try ManifestTrust.verify(envelope: served("production").encoded(), pinned: first, record: nil, app: app, channel: "production", now: Date())
            #expect(verified.signedRelease == release && verified.manifest.packs.first?.plaintextSHA256 == Hex.encode(SHA256Hasher.hash(Array("level \(round)".utf8))), "round \(round)")
        }
        #expect(try Eventually.wait { try served("production").roots?.count == 9 })
    }

    @Test("Blobs on disk")
    func onDisk() throws { try Self.rounds([:]) }

    @Test("Blobs in an S3 bucket", .enabled(if: HeavyTests.objectStore, "run after the others by Deploy/setup.sh test, with DEPOT_S3_TESTS=1"))
    func inABucket() throws {
        let engine = try S3Engine()
        defer { engine.remove() }
        _ = try ObjectStorageTests.bucket(engine, "rotation")
        try Self.rounds(ObjectStorageTests.environment(engine, bucket: "rotation"))
    }
}
