import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// The listings against a store that pages (or misbehaves) as a script says: a small HTTP server
/// on loopback answering the S3 listing calls with fixed XML.
@Suite("S3 listings: paged, bounded, never endless (L12)")
struct S3ListingTests {
    static func store(_ server: HostileServer) throws -> S3BlobStore {
        let location = S3Location(endpoint: server.url, bucket: "b", accessKey: "k", secretKey: "s")
        return S3BlobStore(client: try S3Client(location, timeout: 10), spool: NSTemporaryDirectory())
    }

    static func answer(_ connection: HostileServer.Connection, _ xml: String, status: String = "200 OK") {
        connection.send("HTTP/1.1 \(status)\r\nContent-Type: application/xml\r\nContent-Length: \(xml.utf8.count)\r\nConnection: close\r\n\r\n" + xml)
    }

    static func object(_ sha: String) -> String {
        "<Contents><Key>blobs/\(sha)</Key><Size>5</Size><LastModified>2026-01-01T00:00:00.000Z</LastModified></Contents>"
    }

    @Test("A store that hands back the same continuation token ends the listing with an error, after two requests, not a loop")
    func repeatedToken() throws {
        let server = try HostileServer { connection in
            Self.answer(connection, "<ListBucketResult><IsTruncated>true</IsTruncated>\(Self.object(String(repeating: "a", count: 64)))<NextContinuationToken>same</NextContinuationToken></ListBucketResult>")
        }
        defer { server.stop() }
        let store = try Self.store(server)
        #expect(throws: S3Error.self) { try store.list(prefix: "blobs/") }
        #expect(server.requests.count == 2, "the first page, then the repeat is seen")
        #expect(store.enumerate().isEmpty, "garbage collection sees nothing rather than a listing that never ends")
    }

    @Test("A truncated page with no token is an error; tokens that change are followed to the last page")
    func followsPages() throws {
        let server = try HostileServer { connection in
            let head = connection.request.head
            if head.contains("prefix=bad") {
                Self.answer(connection, "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>")
            } else if head.contains("continuation-token=t2") {
                Self.answer(connection, "<ListBucketResult><IsTruncated>false</IsTruncated>\(Self.object(String(repeating: "c", count: 64)))</ListBucketResult>")
            } else if head.contains("continuation-token=t1") {
                Self.answer(connection, "<ListBucketResult><IsTruncated>true</IsTruncated>\(Self.object(String(repeating: "b", count: 64)))<NextContinuationToken>t2</NextContinuationToken></ListBucketResult>")
            } else {
                Self.answer(connection, "<ListBucketResult><IsTruncated>true</IsTruncated>\(Self.object(String(repeating: "a", count: 64)))<NextContinuationToken>t1</NextContinuationToken></ListBucketResult>")
            }
        }
        defer { server.stop() }
        let store = try Self.store(server)
        #expect(try store.list(prefix: "blobs/").map { $0.key.suffix(1) } == ["a", "b", "c"])
        #expect(throws: S3Error.self) { try store.list(prefix: "bad") }
    }

    @Test("Unfinished multipart uploads are listed page by page (key and upload-id markers) and every one is aborted; a repeated marker is an error")
    func unfinishedUploadsPaged() throws {
        let server = try HostileServer { connection in
            let head = connection.request.head
            let line = head.split(separator: "\r\n").first.map(String.init) ?? ""
            func upload(_ key: String, _ id: String) -> String { "<Upload><Key>blobs/\(key)</Key><UploadId>\(id)</UploadId></Upload>" }
            if line.hasPrefix("DELETE") {
                connection.send("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
            } else if line.contains("prefix=loop") || head.contains("upload-id-marker=loop") {
                Self.answer(connection, "<ListMultipartUploadsResult><IsTruncated>true</IsTruncated>\(upload("x", "1"))<NextKeyMarker>x</NextKeyMarker><NextUploadIdMarker>loop</NextUploadIdMarker></ListMultipartUploadsResult>")
            } else if head.contains("upload-id-marker=2") {
                Self.answer(connection, "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>\(upload("c", "3"))</ListMultipartUploadsResult>")
            } else {
                Self.answer(connection, "<ListMultipartUploadsResult><IsTruncated>true</IsTruncated>\(upload("a", "1"))\(upload("b", "2"))<NextKeyMarker>b</NextKeyMarker><NextUploadIdMarker>2</NextUploadIdMarker></ListMultipartUploadsResult>")
            }
        }
        defer { server.stop() }
        let store = try Self.store(server)
        #expect(try store.abortUnfinishedUploads() == 3)
        let deletes = server.requests.filter { $0.head.hasPrefix("DELETE") }.compactMap { $0.head.split(separator: " ").dropFirst().first }
        #expect(deletes.count == 3 && deletes.allSatisfy { $0.contains("uploadId=") }, "\(deletes)")
        #expect(deletes.contains { $0.contains("blobs/c?uploadId=3") }, "the second page's upload is aborted too: \(deletes)")

        let looping = try S3BlobStore(client: S3Client(S3Location(endpoint: server.url, bucket: "b", prefix: "loop", accessKey: "k", secretKey: "s"), timeout: 10), spool: NSTemporaryDirectory())
        #expect(throws: S3Error.self) { try looping.abortUnfinishedUploads() }
    }
}
