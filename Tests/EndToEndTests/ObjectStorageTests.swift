import DepotClient
import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// `depot serve --storage s3` against a real engine (OpenStack Swift's S3 API).
@Suite("End to end: blobs in an S3 bucket", .serialized, .enabled(if: HeavyTests.objectStore, "run after the others by Deploy/setup.sh test, with DEPOT_S3_TESTS=1"))
struct ObjectStorageTests {
    /// A bucket on `engine` (created), and the store the tests look into it through.
    static func bucket(_ engine: S3Engine, _ name: String, prefix: String = "") throws -> S3BlobStore {
        let location = S3Location(endpoint: engine.endpoint, bucket: name, region: engine.region, prefix: prefix, accessKey: engine.accessKey, secretKey: engine.secretKey)
        let store = S3BlobStore(client: try S3Client(location), spool: "/tmp")
        try S3Client.check(store.client.call("PUT", key: nil), "creating the bucket")
        return store
    }

    /// What `depot serve` needs to keep its blobs and releases in `engine`'s bucket `bucket`.
    static func environment(_ engine: S3Engine, bucket: String) -> [String: String] {
        [
            "DEPOT_STORAGE": "s3", "DEPOT_S3_ENDPOINT": engine.endpoint.absoluteString, "DEPOT_S3_BUCKET": bucket,
            "AWS_ACCESS_KEY_ID": engine.accessKey, "AWS_SECRET_ACCESS_KEY": engine.secretKey,
        ]
    }

    /// A read-only replica of the bucket on 127.0.0.2, on the writer's port and behind its
    /// public name (as behind one CDN), looking for new releases every second.
    static func replica(_ s3: [String: String], data: String, port: UInt16, publicURL: String) throws -> ServeProcess {
        try ServeProcess(data: data, environment: s3.merging([
            "DEPOT_READ_ONLY": "1", "DEPOT_REPLICA_INTERVAL": "1", "DEPOT_LISTEN": "127.0.0.2:\(port)", "DEPOT_PUBLIC_URL": publicURL,
        ]) { $1 }, bootstrap: false)
    }
    @Test("Packs published through the origin land in the bucket (a 70 MiB one in parts), none on its disk; a sync is byte-identical; with the store down reads get 503 and publishes fail clearly, and both recover")
    func publishSyncOutage() throws {
        let engine = try S3Engine()
        defer { engine.remove() }
        let store = try Self.bucket(engine, "depot", prefix: "origin-1/")

        // What a crash in the middle of a multipart upload leaves: an upload with a part, no object.
        let stale = try S3Client.check(store.client.call("POST", key: S3BlobStore.key(String(repeating: "a", count: 64)), query: [("uploads", "")]), "starting")
        let staleID = try #require(XMLText.first("UploadId", in: stale.text))
        try S3Client.check(store.client.call("PUT", key: S3BlobStore.key(String(repeating: "a", count: 64)), query: [("partNumber", "1"), ("uploadId", staleID)],
                                             body: .bytes([1, 2, 3]), payloadSHA256: Hex.encode(SHA256Hasher.hash([UInt8]([1, 2, 3])))), "a part")

        let work = TemporaryDirectory("depot-s3-serve")
        defer { work.remove() }
        let data = work.path + "/data"
        let server = try ServeProcess(data: data, environment: [
            "DEPOT_STORAGE": "s3", "DEPOT_S3_ENDPOINT": engine.endpoint.absoluteString, "DEPOT_S3_BUCKET": "depot", "DEPOT_S3_PREFIX": "origin-1/",
            "AWS_ACCESS_KEY_ID": engine.accessKey, "AWS_SECRET_ACCESS_KEY": engine.secretKey,
        ])
        defer { server.process.terminate(); server.process.waitUntilExit() }
        #expect(server.banner.contains("blobs in bucket depot under origin-1/"), "\(server.banner)")
        let unfinished = try S3Client.check(store.client.call("GET", key: nil, query: [("uploads", "")]), "listing uploads")
        #expect(XMLText.all("UploadId", in: unfinished.text).isEmpty, "the start aborted the crashed upload: \(unfinished.text)")
        let depot = Processes.depotBinary
        let environment = ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": server.token]
        let common = ["--server", server.url, "--app", "com.example.dev"]
        let big = try work.file("big.bin", size: 70 << 20, seed: 4)
        let small = try work.file("small.bin", size: 10_000, seed: 5)
        for (file, pack) in [(big, "big"), (small, "small")] {
            let run = try Processes.run(depot, ["publish", file, "--pack", pack, "--release", "--quiet"] + common, environment: environment)
            #expect(run.status == 0, "\(run.stderr)")
        }
        let blobFiles = FileSystem.contents(of: data + "/blobs").flatMap { FileSystem.contents(of: data + "/blobs/" + $0) }
        #expect(blobFiles.isEmpty, "no blob on the origin's disk: \(blobFiles)")
        let inBucket = store.enumerate()
        #expect(inBucket.count == 2 && inBucket.contains { $0.size > 70 << 20 }, "\(inBucket)")

        let keys = try Processes.run(depot, ["keys", "export", "--data", data, "--app", "com.example.dev"])
        try FileSystem.writeAtomically(Array(keys.stdout.utf8), to: work.path + "/client.json")
        let sync = try Processes.run(depot, ["sync", "--config", work.path + "/client.json", "--dest", work.path + "/device", "--quiet"] + common)
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(try SHA256Hasher.hexDigest(ofFile: work.path + "/device/packs/big") == SHA256Hasher.hexDigest(ofFile: big))
        #expect(try SHA256Hasher.hexDigest(ofFile: work.path + "/device/packs/small") == SHA256Hasher.hexDigest(ofFile: small))

        // Blobs stream from the bucket with the range passed through: a range is exactly those bytes.
        let blob = try #require(inBucket.first { $0.size < 1 << 20 }?.sha256)
        let port = UInt16(server.port)!
        let whole = try #require(try RawHTTP.send(port: port, "GET /v1/apps/com.example.dev/blobs/\(blob) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
        #expect(whole.status == 200 && whole.body.count == Int(inBucket.first { $0.sha256 == blob }!.size) && Hex.encode(SHA256Hasher.hash(whole.body)) == blob)
        let part = try #require(try RawHTTP.send(port: port, "GET /v1/apps/com.example.dev/blobs/\(blob) HTTP/1.1\r\nHost: x\r\nRange: bytes=100-4195\r\nConnection: close\r\n\r\n").first)
        #expect(part.status == 206 && part.body == Array(whole.body[100...4195]), "\(part.status) \(part.body.count)")
        #expect(part.header("Content-Range") == "bytes 100-4195/\(whole.body.count)")
        #expect(FileSystem.contents(of: data + "/uploads").allSatisfy { !$0.hasPrefix(".read-") }, "no spool file")

        // The store goes down: reads of blobs get 503, a publish fails and says why.
        engine.stop()
        let down = try RawHTTP.send(port: port, "GET /v1/apps/com.example.dev/blobs/\(blob) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        #expect(down?.status == 503 && down?.bodyText.contains("storage_unavailable") == true, "\(down?.bodyText ?? "")")
        let other = try work.file("other.bin", size: 5000, seed: 6)
        let uploadsBefore = FileSystem.contents(of: data + "/uploads").filter { $0.hasSuffix(".tus") }.count
        let failed = try Processes.run(depot, ["publish", other, "--pack", "other", "--release", "--quiet"] + common, environment: environment)
        #expect(failed.status != 0 && failed.stderr.contains("unavailable"), "\(failed.stderr)")
        #expect(FileSystem.contents(of: data + "/uploads").filter { $0.hasSuffix(".tus") }.count == uploadsBefore + 1, "the upload is kept for when the store is back")
        #expect(try RawHTTP.send(port: port, "GET /v1/apps/com.example.dev/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first?.status == 200,
                "the manifest is on the origin and still served")

        // Back: reads recover as soon as the store answers again (its servers start one by one).
        try engine.restart()
        var up: RawHTTP.Response?
        try Eventually.wait(every: .milliseconds(200)) {
            up = try RawHTTP.send(port: port, "GET /v1/apps/com.example.dev/blobs/\(blob) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
            return up?.status == 200
        }
        #expect(up?.status == 200 && up?.body.count == Int(inBucket.first { $0.sha256 == blob }!.size), "\(up?.status ?? 0) \(up?.bodyText.prefix(300) ?? "")")
        let again = try Processes.run(depot, ["publish", other, "--pack", "other", "--release"] + common, environment: environment)
        #expect(again.status == 0 && again.stderr.contains("resuming the upload of other"), "\(again.stderr)")
        #expect(again.stdout.contains("published other"), "\(again.stdout)")
    }

    @Test("depot storage migrate copies a data folder's blobs into the bucket (again: nothing copied twice), and the origin then serves the same bytes from it")
    func migrate() throws {
        let engine = try S3Engine()
        defer { engine.remove() }
        let store = try Self.bucket(engine, "moved")
        let work = TemporaryDirectory("depot-s3-migrate")
        defer { work.remove() }
        let data = work.path + "/data"
        let depot = Processes.depotBinary
        let files = [try work.file("a.bin", size: 300_000, seed: 7), try work.file("b.bin", size: 5_000, seed: 8)]
        var token = ""
        // Both origins on one address: the manifests name their blobs by absolute URL.
        let listen = "127.0.0.1:\(try NginxEdge.freePort())"
        do {
            let server = try ServeProcess(data: data, environment: ["DEPOT_LISTEN": listen])
            token = server.token
            for (index, file) in files.enumerated() {
                let run = try Processes.run(depot, ["publish", file, "--pack", "p\(index)", "--release", "--quiet", "--server", server.url, "--app", "com.example.dev"],
                                            environment: ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": token])
                #expect(run.status == 0, "\(run.stderr)")
            }
            server.process.terminate()
            server.process.waitUntilExit()
        }
        let s3 = ["--storage", "s3", "--s3-endpoint", engine.endpoint.absoluteString, "--s3-bucket", "moved"]
        let credentials = ["AWS_ACCESS_KEY_ID": engine.accessKey, "AWS_SECRET_ACCESS_KEY": engine.secretKey]
        // The first run takes its credentials from a file instead.
        try FileSystem.writeAtomically(Array("\(engine.accessKey)\n\(engine.secretKey)\n".utf8), to: work.path + "/s3-credentials", mode: 0o600)
        let first = try Processes.run(depot, ["storage", "migrate", "--data", data, "--s3-credentials", work.path + "/s3-credentials"] + s3)
        #expect(first.status == 0 && first.stdout.contains("2 blobs copied"), "\(first.stdout)\(first.stderr)")
        let again = try Processes.run(depot, ["storage", "migrate", "--data", data, "--remove-local"] + s3, environment: credentials)
        #expect(again.status == 0 && again.stdout.contains("0 blobs copied (0 bytes), 2 already there, 2 local copies removed"), "\(again.stdout)\(again.stderr)")
        #expect(FileSystem.contents(of: data + "/blobs").flatMap { FileSystem.contents(of: data + "/blobs/" + $0) }.isEmpty)
        #expect(store.enumerate().count == 2)

        let server = try ServeProcess(data: data, environment: [
            "DEPOT_STORAGE": "s3", "DEPOT_S3_ENDPOINT": engine.endpoint.absoluteString, "DEPOT_S3_BUCKET": "moved", "DEPOT_LISTEN": listen,
        ].merging(credentials) { $1 }, bootstrap: false)
        defer { server.process.terminate(); server.process.waitUntilExit() }
        let keys = try Processes.run(depot, ["keys", "export", "--data", data, "--app", "com.example.dev"])
        try FileSystem.writeAtomically(Array(keys.stdout.utf8), to: work.path + "/client.json")
        let sync = try Processes.run(depot, ["sync", "--config", work.path + "/client.json", "--dest", work.path + "/device", "--quiet", "--server", server.url, "--app", "com.example.dev"])
        #expect(sync.status == 0, "\(sync.stderr)")
        for (index, file) in files.enumerated() {
            #expect(try FileSystem.readFile(work.path + "/device/packs/p\(index)") == FileSystem.readFile(file))
        }
    }

    @Test("A read-only origin on the same bucket, holding no keys or tokens, serves the writer's manifest and packs (a sync through it is byte-identical), refuses writes, and picks up a new release within its interval")
    func readOnlyReplica() throws {
        let engine = try S3Engine()
        defer { engine.remove() }
        let store = try Self.bucket(engine, "shared")
        let work = TemporaryDirectory("depot-s3-replica")
        defer { work.remove() }
        let s3 = Self.environment(engine, bucket: "shared")
        // Writer and replica on one port of two loopback addresses, behind one public name (as
        // behind a CDN): a device reaches either with --resolve.
        let port = try NginxEdge.freePort()
        let publicURL = "http://assets.test:\(port)"
        let writer = try ServeProcess(data: work.path + "/writer", environment: s3.merging(["DEPOT_LISTEN": "127.0.0.1:\(port)", "DEPOT_PUBLIC_URL": publicURL]) { $1 })
        defer { if writer.process.isRunning { writer.process.terminate(); writer.process.waitUntilExit() } }
        let depot = Processes.depotBinary
        let environment = ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": writer.token]
        let first = try work.file("first.bin", size: 70 << 20, seed: 9)
        let published = try Processes.run(depot, ["publish", first, "--pack", "first", "--release", "--quiet", "--server", "http://127.0.0.1:\(port)", "--app", "com.example.dev"], environment: environment)
        #expect(published.status == 0, "\(published.stderr)")
        // The writer pushes the release to the bucket just after the publish.
        Eventually.wait { (try? store.list(prefix: "apps/com.example.dev/channels/").isEmpty == false) ?? false }

        let replica = try Self.replica(s3, data: work.path + "/replica", port: port, publicURL: publicURL)
        defer { replica.process.terminate(); replica.process.waitUntilExit() }
        guard replica.banner.contains("read-only replica") else {
            replica.process.terminate()
            replica.process.waitUntilExit()
            Issue.record("the replica did not start: \(replica.banner) \(replica.errorOutput())")
            return
        }
        func get(_ server: ServeProcess, _ path: String) throws -> RawHTTP.Response? {
            try RawHTTP.send(port: UInt16(port), host: server === replica ? "127.0.0.2" : "127.0.0.1", "GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        }
        let fromWriter = try #require(try get(writer, "/v1/apps/com.example.dev/manifest"))
        let fromReplica = try #require(try get(replica, "/v1/apps/com.example.dev/manifest"))
        #expect(fromReplica.status == 200 && fromReplica.body == fromWriter.body, "the same signed envelope")
        #expect(try get(replica, "/v1/apps/com.example.dev/info-plist")?.status == 200)
        #expect(FileSystem.contents(of: work.path + "/replica/keys").isEmpty && !FileSystem.exists(work.path + "/replica/tokens.json"), "no keys, no tokens on the replica")
        let bucketKeys = try store.list(prefix: "").map(\.key)
        #expect(!bucketKeys.contains { $0.hasPrefix("keys") || $0.contains("tokens") || $0.contains("staging") }, "no keys, tokens or drafts in the bucket: \(bucketKeys)")

        // A device syncs through the replica (the manifest's blob URLs are the writer's public
        // URL, as behind one CDN; here the sync reads the manifest from the replica and fetches
        // every blob from it too).
        let keys = try Processes.run(depot, ["keys", "export", "--data", work.path + "/writer", "--app", "com.example.dev"])
        try FileSystem.writeAtomically(Array(keys.stdout.utf8), to: work.path + "/client.json")
        let manifest = try Envelope.decode(fromReplica.body).verifiedManifest(trusting: ClientConfiguration.decode(Array(keys.stdout.utf8)).trustedKeys())
        let pack = try #require(manifest.packs.first)
        let blob = try #require(try get(replica, "/v1/apps/com.example.dev/blobs/\(pack.sha256)"))
        #expect(blob.status == 200 && Int64(blob.body.count) == pack.size && Hex.encode(SHA256Hasher.hash(blob.body)) == pack.sha256)
        #expect(FileSystem.contents(of: work.path + "/writer/blobs").flatMap { FileSystem.contents(of: work.path + "/writer/blobs/" + $0) }.isEmpty,
                "no blob on the writer's disk")

        let write = try RawHTTP.send(port: UInt16(port), host: "127.0.0.2", "PUT /v1/apps/com.example.dev/packs/x?release=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(writer.token)\r\nContent-Length: 1\r\nConnection: close\r\n\r\n", body: [1]).first
        #expect(write?.status == 403 && write?.bodyText.contains("read-only") == true, "\(write?.bodyText ?? "")")

        // A new release on the writer reaches the replica within its interval.
        let second = try work.file("second.bin", size: 3_000, seed: 10)
        let start = ContinuousClock.now
        let again = try Processes.run(depot, ["publish", second, "--pack", "second", "--release", "--quiet", "--server", "http://127.0.0.1:\(port)", "--app", "com.example.dev"], environment: environment)
        #expect(again.status == 0, "\(again.stderr)")
        let writerVersion = try Envelope.decode(#require(try get(writer, "/v1/apps/com.example.dev/manifest")).body).verifiedManifest(trusting: ClientConfiguration.decode(Array(keys.stdout.utf8)).trustedKeys()).version
        var seen = false
        while !seen && ContinuousClock.now - start < .seconds(15) {
            if let body = try get(replica, "/v1/apps/com.example.dev/manifest")?.body,
               let version = try? Envelope.decode(body).verifiedManifest(trusting: ClientConfiguration.decode(Array(keys.stdout.utf8)).trustedKeys()).version {
                seen = version == writerVersion
            }
            if !seen { Thread.sleep(forTimeInterval: 0.2) }
        }
        #expect(seen, "release \(writerVersion) on the replica")

        // With the writer gone, a device syncs every pack through the replica alone.
        writer.process.terminate()
        writer.process.waitUntilExit()
        let sync = try Processes.run(depot, [
            "sync", "--config", work.path + "/client.json", "--dest", work.path + "/device", "--quiet", "--server", publicURL, "--app", "com.example.dev",
            "--resolve", "assets.test:\(port):127.0.0.2",
        ])
        #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")
        #expect(try SHA256Hasher.hexDigest(ofFile: work.path + "/device/packs/first") == SHA256Hasher.hexDigest(ofFile: first), "the 70 MiB pack (multipart in the bucket)")
        #expect(try FileSystem.readFile(work.path + "/device/packs/second", limit: 1 << 20) == FileSystem.readFile(second, limit: 1 << 20))
        print("ObjectStorageTests: the replica served release \(writerVersion) \(ContinuousClock.now - start) after the publish began (interval 1 s)")
    }

    @Test("The writer killed while a pack goes to the bucket in parts: no release names a missing or partial object, the next start aborts the upload, and the same publish run again completes")
    func writerKilledMidUpload() throws {
        let engine = try S3Engine()
        defer { engine.remove() }
        let store = try Self.bucket(engine, "crash")
        let work = TemporaryDirectory("depot-s3-crash")
        defer { work.remove() }
        let data = work.path + "/data"
        let listen = "127.0.0.1:\(try NginxEdge.freePort())"
        let s3: [String: String] = [
            "DEPOT_STORAGE": "s3", "DEPOT_S3_ENDPOINT": engine.endpoint.absoluteString, "DEPOT_S3_BUCKET": "crash", "DEPOT_LISTEN": listen,
            "AWS_ACCESS_KEY_ID": engine.accessKey, "AWS_SECRET_ACCESS_KEY": engine.secretKey,
        ]
        let writer = try ServeProcess(data: data, environment: s3)
        let depot = Processes.depotBinary
        let environment = ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": writer.token]
        let arguments = ["publish", try work.file("big.bin", size: 200 << 20, seed: 11), "--pack", "big", "--release", "--quiet", "--server", "http://" + listen, "--app", "com.example.dev"]
        let publish = Process()
        publish.executableURL = URL(fileURLWithPath: depot)
        publish.arguments = arguments
        publish.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        publish.standardOutput = FileHandle.nullDevice
        publish.standardError = FileHandle.nullDevice
        try publish.run()
        // Kill the writer as soon as the bucket shows the pack's multipart upload in progress.
        var caught = false
        let start = ContinuousClock.now
        while !caught && ContinuousClock.now - start < .seconds(60) && publish.isRunning {
            if let listing = try? store.client.call("GET", key: nil, query: [("uploads", "")]), !XMLText.all("UploadId", in: listing.text).isEmpty { caught = true } else { usleep(10_000) }
        }
        kill(writer.process.processIdentifier, SIGKILL)
        writer.process.waitUntilExit()
        kill(publish.processIdentifier, SIGKILL)
        publish.waitUntilExit()
        #expect(caught, "the multipart upload was seen in progress")
        #expect(store.enumerate().isEmpty, "no object appeared for the cut upload")

        // The next start aborts it; no release names anything but whole objects; the same
        // command run again finishes the publish.
        let restarted = try ServeProcess(data: data, environment: s3, bootstrap: false)
        defer { restarted.process.terminate(); restarted.process.waitUntilExit() }
        let unfinished = try S3Client.check(store.client.call("GET", key: nil, query: [("uploads", "")]), "listing uploads")
        #expect(XMLText.all("UploadId", in: unfinished.text).isEmpty, "\(unfinished.text)")
        let again = try Processes.run(depot, arguments, environment: environment)
        #expect(again.status == 0, "\(again.stdout)\(again.stderr)")
        let keys = try Processes.run(depot, ["keys", "export", "--data", data, "--app", "com.example.dev"])
        let envelope = try #require(try RawHTTP.send(port: UInt16(restarted.port)!, "GET /v1/apps/com.example.dev/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
        let manifest = try Envelope.decode(envelope.body).verifiedManifest(trusting: ClientConfiguration.decode(Array(keys.stdout.utf8)).trustedKeys())
        #expect(manifest.packs.map(\.id) == ["big"])
        for pack in manifest.packs { #expect(try store.storedSize(pack.sha256) == pack.size, "\(pack.id) is whole in the bucket") }
    }

    @Test("Patches through the bucket: the writer makes a revision's patch from the blobs in the bucket, stores it there, and a device updates by it byte-identical")
    func patchesInBucket() throws {
        let engine = try S3Engine()
        defer { engine.remove() }
        let store = try Self.bucket(engine, "patches")
        let work = TemporaryDirectory("depot-s3-patches")
        defer { work.remove() }
        let data = work.path + "/data"
        let server = try ServeProcess(data: data, environment: [
            "DEPOT_STORAGE": "s3", "DEPOT_S3_ENDPOINT": engine.endpoint.absoluteString, "DEPOT_S3_BUCKET": "patches",
            "AWS_ACCESS_KEY_ID": engine.accessKey, "AWS_SECRET_ACCESS_KEY": engine.secretKey, "DEPOT_PATCH_DEPTH": "3",
        ])
        defer { server.process.terminate(); server.process.waitUntilExit() }
        let depot = Processes.depotBinary
        let environment = ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": server.token]
        let common = ["--server", server.url, "--app", "com.example.dev"]
        let v1 = try work.file("v1.bin", size: 12 << 20, seed: 21)
        #expect(try Processes.run(depot, ["publish", v1, "--pack", "level", "--release", "--quiet"] + common, environment: environment).status == 0)
        let keys = try Processes.run(depot, ["keys", "export", "--data", data, "--app", "com.example.dev"])
        try FileSystem.writeAtomically(Array(keys.stdout.utf8), to: work.path + "/client.json")
        let sync = ["sync", "--config", work.path + "/client.json", "--dest", work.path + "/device", "--quiet"] + common
        #expect(try Processes.run(depot, sync).status == 0)

        var bytes = try FileSystem.readFile(v1, limit: 64 << 20)
        bytes.insert(contentsOf: [UInt8](repeating: 7, count: 40_000), at: 1 << 20)
        for k in 0..<(16 << 10) { bytes[8 << 20 + k] ^= 0x33 }
        try FileSystem.writeAtomically(bytes, to: work.path + "/v2.bin")
        #expect(try Processes.run(depot, ["publish", work.path + "/v2.bin", "--pack", "level", "--release", "--quiet"] + common, environment: environment).status == 0)
        // The patch release comes a moment later: wait for it (the writer logs nothing a test can wait on).
        var patch: PackPatch?
        for _ in 0..<600 where patch == nil {
            if let body = try RawHTTP.send(port: UInt16(server.port)!, "GET /v1/apps/com.example.dev/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first?.body,
               let manifest = try? Envelope.decode(body).verifiedManifest(trusting: ClientConfiguration.decode(Array(keys.stdout.utf8)).trustedKeys()) {
                patch = manifest[pack: "level"]?.patches?.first
            }
            if patch == nil { Thread.sleep(forTimeInterval: 0.1) }
        }
        let made = try #require(patch, "the writer released a patch")
        #expect(try store.storedSize(made.sha256) == made.size, "the patch is in the bucket")
        let updated = try Processes.run(depot, sync.filter { $0 != "--quiet" })
        #expect(updated.status == 0 && updated.stdout.contains("1 patched"), "\(updated.stdout)\(updated.stderr)")
        #expect(try FileSystem.readFile(work.path + "/device/packs/level", limit: 64 << 20) == bytes)
    }
}
