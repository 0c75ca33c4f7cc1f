import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// `depot serve --storage s3` with each of AWS's credential sources, against the real S3 engine:
/// the keys come from fake STS, container and metadata endpoints on loopback that hand out the
/// engine's own keys.
@Suite("End to end: S3 keys from AWS's credential chain", .serialized, .enabled(if: HeavyTests.objectStore, "run after the others by Deploy/setup.sh test, with DEPOT_S3_TESTS=1"))
struct CredentialChainTests {
    /// Publishes `size` bytes through an origin started with `environment`, syncs, and checks the bytes.
    static func publishAndSync(_ engine: S3Engine, prefix: String, environment: [String: String], size: Int, work: TemporaryDirectory) throws -> String {
        let data = work.path + "/data-" + prefix
        let server = try ServeProcess(data: data, environment: [
            "DEPOT_STORAGE": "s3", "DEPOT_S3_ENDPOINT": engine.endpoint.absoluteString, "DEPOT_S3_BUCKET": "depot", "DEPOT_S3_PREFIX": prefix + "/",
        ].merging(environment) { $1 })
        defer { server.process.terminate(); server.process.waitUntilExit() }
        let common = ["--server", server.url, "--app", "com.example.dev"]
        let file = try work.file(prefix + ".bin", size: size, seed: UInt64(size % 251))
        let published = try Processes.run(Processes.depotBinary, ["publish", file, "--pack", "p", "--release", "--quiet"] + common,
                                          environment: ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": server.token])
        #expect(published.status == 0, "\(published.stderr)")
        let keys = try Processes.run(Processes.depotBinary, ["keys", "export", "--data", data, "--app", "com.example.dev"])
        try FileSystem.writeAtomically(Array(keys.stdout.utf8), to: work.path + "/client-\(prefix).json")
        let device = work.path + "/device-" + prefix
        let synced = try Processes.run(Processes.depotBinary, ["sync", "--config", work.path + "/client-\(prefix).json", "--dest", device, "--quiet"] + common)
        #expect(synced.status == 0, "\(synced.stderr)")
        #expect(try SHA256Hasher.hexDigest(ofFile: device + "/packs/p") == SHA256Hasher.hexDigest(ofFile: file))
        return server.banner
    }

    @Test("Each source — keys with a session token in the environment, web identity through STS, the container endpoint, IMDSv2 — publishes to the bucket and serves a byte-identical sync; the banner names the source, never a secret")
    func everySource() throws {
        let engine = try S3Engine()
        defer { engine.remove() }
        _ = try ObjectStorageTests.bucket(engine, "depot")
        let fake = try FakeAWSCredentials(keys: [.init(engine.accessKey, engine.secretKey)], lifetime: 3600)
        defer { fake.stop() }
        let work = TemporaryDirectory("depot-s3-credentials")
        defer { work.remove() }
        try FileSystem.writeAtomically(Array(FakeAWSCredentials.webToken.utf8), to: work.path + "/token")
        let sources: [(String, [String: String], String)] = [
            ("environment", ["AWS_ACCESS_KEY_ID": engine.accessKey, "AWS_SECRET_ACCESS_KEY": engine.secretKey, "AWS_SESSION_TOKEN": "a-session-token"],
             "keys from the environment (AWS_ACCESS_KEY_ID) with a session token"),
            ("sts", fake.environment(for: "sts", tokenFile: work.path + "/token"), "keys from web identity (token file"),
            ("container", fake.environment(for: "container", tokenFile: ""), "keys from the container credentials endpoint"),
            ("imds", fake.environment(for: "imds", tokenFile: ""), "keys from the instance metadata service (IMDSv2)"),
        ]
        for (name, environment, named) in sources {
            let banner = try Self.publishAndSync(engine, prefix: name, environment: environment, size: 300_000, work: work)
            #expect(banner.contains(named), "\(name): \(banner)")
            #expect(!banner.contains(engine.secretKey) && !banner.contains("a-session-token"), "\(name): no secret printed")
        }
        #expect(Set(fake.issued.map { String($0.split(separator: " ")[0]) }) == ["sts", "container", "imds"], "\(fake.issued)")
        #expect(fake.refusedWithoutToken == 0)
    }

    @Test("Keys that are due for refresh at every call, handed out in turn from two key pairs: a 200 MiB pack goes up in 16 MiB parts signed with both, and syncs byte-identical")
    func rotationDuringLargeUpload() throws {
        let engine = try S3Engine()
        defer { engine.remove() }
        _ = try ObjectStorageTests.bucket(engine, "depot")
        // 200 s to live: inside the 5-minute refresh window (so every call fetches again) and
        // more than the minute a signature must have left (so each is used).
        let fake = try FakeAWSCredentials(keys: [.init(engine.accessKey, engine.secretKey), .init(engine.accessKey2, engine.secretKey2)], lifetime: 200)
        defer { fake.stop() }
        let work = TemporaryDirectory("depot-s3-rotation")
        defer { work.remove() }
        _ = try Self.publishAndSync(engine, prefix: "rotation", environment: fake.environment(for: "imds", tokenFile: ""), size: 200 << 20, work: work)
        let issued = fake.issued
        #expect(issued.count >= 13, "at least one fetch per 16 MiB part: \(issued.count)")
        #expect(issued.contains("imds \(engine.accessKey)") && issued.contains("imds \(engine.accessKey2)"), "both key pairs were used")
    }
}
