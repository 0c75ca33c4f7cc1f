import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// The S3 blob store against a real engine (OpenStack Swift's S3 API, started by
/// `Deploy/s3/swift-s3.sh`): SigV4, single and multipart uploads checked after the fact, reads,
/// listings, removal, refusals, and the engine stopped.
@Suite("S3 blob store (OpenStack Swift s3api)", .serialized, .enabled(if: HeavyTests.objectStore, "run after the others by Deploy/setup.sh test, with DEPOT_S3_TESTS=1"))
struct S3BlobStoreTests {
    static func store(_ engine: S3Engine, bucket: String, secret: String? = nil, spool: String) throws -> S3BlobStore {
        let location = S3Location(
            endpoint: engine.endpoint, bucket: bucket, region: engine.region, prefix: "depot/", accessKey: engine.accessKey, secretKey: secret ?? engine.secretKey
        )
        return S3BlobStore(client: try S3Client(location, timeout: 5), spool: spool)
    }

    static func createBucket(_ store: S3BlobStore) throws {
        try S3Client.check(store.client.call("PUT", key: nil), "creating the bucket")
    }

    /// An engine, a scratch folder and a store on a new bucket "packs", for `body`; all removed after.
    static func withBucket(_ body: (S3Engine, TemporaryDirectory, S3BlobStore) throws -> Void) throws {
        let engine = try S3Engine()
        defer { engine.remove() }
        let work = TemporaryDirectory("depot-s3-work")
        defer { work.remove() }
        let store = try Self.store(engine, bucket: "packs", spool: work.path)
        try Self.createBucket(store)
        try body(engine, work, store)
    }

    static func blobFile(_ folder: TemporaryDirectory, size: Int, seed: UInt8) throws -> (String, [UInt8], String) {
        let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }
        let path = folder.path + "/blob-\(seed)"
        try FileSystem.writeAtomically(bytes, to: path)
        return (path, bytes, Hex.encode(SHA256Hasher.hash(bytes)))
    }

    static func read(_ blob: StoredBlob) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: Int(blob.size))
        _ = try bytes.withUnsafeMutableBytes { try blob.file.read(into: $0, at: 0) }
        try blob.file.close()
        return bytes
    }

    @Test("A small blob in one PUT and a 70 MiB one in 16 MiB parts: stored, read back byte for byte, listed with their sizes, removed; nothing left on disk")
    func roundTrip() throws {
        try Self.withBucket { engine, work, store in
            let (smallPath, small, smallName) = try Self.blobFile(work, size: 100_003, seed: 1)
            let (bigPath, big, bigName) = try Self.blobFile(work, size: 70 << 20, seed: 2)
            try store.put(temporaryFile: smallPath, sha256: smallName)
            try store.put(temporaryFile: bigPath, sha256: bigName)
            #expect(!FileSystem.exists(smallPath) && !FileSystem.exists(bigPath), "the store took the temporary files")
            #expect(store.contains(smallName) && store.contains(bigName))
            #expect(!store.contains(String(repeating: "0", count: 64)))
            #expect(try Self.read(#require(try store.open(smallName))) == small)
            #expect(try Self.read(#require(try store.open(bigName))) == big)
            #expect(try store.open(String(repeating: "0", count: 64)) == nil)
            #expect(FileSystem.contents(of: work.path).isEmpty, "reads spool into unlinked files only")
            let listed = store.enumerate()
            #expect(Set(listed.map(\.sha256)) == [smallName, bigName])
            #expect(listed.first { $0.sha256 == bigName }?.size == Int64(70 << 20))
            // The multipart upload left no upload behind.
            let uploads = try S3Client.check(store.client.call("GET", key: nil, query: [("uploads", "")]), "listing uploads")
            #expect(XMLText.all("UploadId", in: uploads.text).isEmpty, "\(uploads.text)")
            store.remove(smallName)
            store.remove(smallName)
            #expect(!store.contains(smallName) && store.contains(bigName))
            #expect(store.enumerate().map(\.sha256) == [bigName])
        }
    }

    @Test("Refused: a wrong secret, a body that is not what was signed; with the engine stopped, a clear error, and it works again once back")
    func refusalsAndOutage() throws {
        try Self.withBucket { engine, work, store in
            let (path, _, name) = try Self.blobFile(work, size: 5000, seed: 3)

            let wrong = try Self.store(engine, bucket: "packs", secret: "not-the-secret", spool: work.path)
            #expect { try wrong.put(temporaryFile: path, sha256: name) } throws: { "\($0)".contains("SignatureDoesNotMatch") || "\($0)".contains("AccessDenied") }
            #expect(FileSystem.exists(path), "a failed put leaves the temporary file to the caller")
            #expect(!store.contains(name))

            // A body other than the one signed: the store refuses it, nothing is stored.
            let other = Array(repeating: UInt8(7), count: 5000)
            let tampered = try store.client.call("PUT", key: S3BlobStore.key(name), body: .bytes(other), payloadSHA256: name)
            #expect(tampered.status == 400, "\(tampered.text)")
            #expect(!store.contains(name))

            engine.stop()
            #expect { try store.put(temporaryFile: path, sha256: name) } throws: { ($0 as? S3Error)?.status == 0 && "\($0)".contains("object store") }
            #expect(FileSystem.exists(path))
            #expect(throws: S3Error.self) { try store.open(name) }
            try engine.restart()
            try store.put(temporaryFile: path, sha256: name)
            #expect(store.contains(name))
        }
    }

    @Test("In a bucket too: a refused publish, or a dropped staged pack, of bytes live in this app or another leaves the live blob answering 200")
    func refusedPublishKeepsLiveBlob() async throws {
        let engine = try S3Engine()
        defer { engine.remove() }
        let location = S3Location(
            endpoint: engine.endpoint, bucket: "shared", region: engine.region, prefix: "depot/", accessKey: engine.accessKey, secretKey: engine.secretKey
        )
        try Self.createBucket(S3BlobStore(client: try S3Client(location), spool: "/tmp"))
        try await withServer(configure: { $0.objectStore = location }) { origin in
            try SharedBlobTests.refusedPublishKeepsLiveBlob(origin)
        }
    }
}
