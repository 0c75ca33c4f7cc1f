import DepotTransport
import DepotCore
import DepotHTTP
import Foundation

/// Blobs in an S3 bucket (`<prefix>blobs/<sha256>`), keeping ``BlobStore``'s contract on a store
/// that has no rename: an object becomes visible only when complete (a single PUT, or a
/// multipart upload's completion), each request's body is checked by the store against its
/// signed SHA-256, and after the upload the stored size and the SHA-256 recorded with the
/// object (`x-amz-meta-sha256`) are read back and compared. A multipart upload that fails is
/// aborted. Packs up to ``singlePutLimit`` go in one PUT; larger ones in ``partSize`` parts,
/// streamed from the verified temporary file, never held in memory.
///
/// Blob responses stream from the bucket (``stat`` and ``reader``, one ranged GET for the bytes a
/// response carries); `open`, the protocol's descriptor, fetches the object into a spool file in
/// the data folder that is unlinked at once (the descriptor is all that remains).
final class S3BlobStore: BlobStore {
    static let singlePutLimit: Int64 = 64 << 20
    static let partSize: Int64 = 16 << 20
    let client: S3Client
    /// Where reads spool (the data folder's `uploads/`).
    let spool: String

    init(client: S3Client, spool: String) {
        self.client = client
        self.spool = spool
    }

    static func key(_ sha256: String) -> String { "blobs/" + sha256 }

    func put(temporaryFile path: String, sha256: String) throws {
        try store(file: path, sha256: sha256)
        FileSystem.remove(path)
    }

    /// Uploads the file at `path` as blob `sha256` and checks what was stored; the file stays.
    func store(file path: String, sha256: String) throws {
        guard Hex.isSHA256(sha256) else { throw S3Error(status: 0, description: "not a blob name: \(sha256)") }
        let file = try FileDescriptor.openForReading(path)
        defer { try? file.close() }
        let size = try file.size()
        let metadata = ["x-amz-meta-sha256": sha256, "content-type": "application/octet-stream"]
        if size <= Self.singlePutLimit {
            try S3Client.check(client.call("PUT", key: Self.key(sha256), headers: metadata, body: .file(file, offset: 0, count: size), payloadSHA256: sha256), "storing blob \(sha256)")
        } else {
            try multipartUpload(file, size: size, key: Self.key(sha256), metadata: metadata)
        }
        let head = try S3Client.check(client.call("HEAD", key: Self.key(sha256)), "checking blob \(sha256)")
        guard head.head.header("Content-Length") == String(size), head.head.header("x-amz-meta-sha256") == sha256 else {
            throw S3Error(status: head.status, description: "blob \(sha256) was stored with \(head.head.header("Content-Length") ?? "?") bytes, not \(size)")
        }
    }

    /// The size of blob `sha256` in the bucket, if it is there whole (its recorded SHA-256 is its name).
    func storedSize(_ sha256: String) throws -> Int64? {
        let head = try client.call("HEAD", key: Self.key(sha256))
        if head.status == 404 { return nil }
        try S3Client.check(head, "checking blob \(sha256)")
        guard head.head.header("x-amz-meta-sha256") == sha256 else { return nil }
        return head.head.header("Content-Length").flatMap { Int64($0) }
    }

    private func multipartUpload(_ file: FileDescriptor, size: Int64, key: String, metadata: [String: String]) throws {
        let created = try S3Client.check(client.call("POST", key: key, query: [("uploads", "")], headers: metadata), "starting a multipart upload")
        guard let id = XMLText.first("UploadId", in: created.text) else { throw S3Error(status: created.status, description: "no UploadId in \(created.text)") }
        do {
            var parts: [(Int, String)] = []
            var offset: Int64 = 0
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            while offset < size {
                let count = min(Self.partSize, size - offset)
                // The part's SHA-256, which the store checks the part against.
                let hasher = SHA256Hasher()
                var read: Int64 = 0
                while read < count {
                    let n = try buffer.withUnsafeMutableBytes { try file.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<Int(min(Int64($0.count), count - read))]), at: offset + read) }
                    guard n > 0 else { throw S3Error(status: 0, description: "the temporary file ended early") }
                    buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
                    read += Int64(n)
                }
                let number = parts.count + 1
                let sent = try S3Client.check(client.call(
                    "PUT", key: key, query: [("partNumber", String(number)), ("uploadId", id)], body: .file(file, offset: offset, count: count),
                    payloadSHA256: Hex.encode(hasher.finalize())
                ), "uploading part \(number)")
                guard let etag = sent.head.header("ETag") else { throw S3Error(status: sent.status, description: "part \(number) has no ETag") }
                parts.append((number, etag))
                offset += count
            }
            let xml = "<CompleteMultipartUpload>" + parts.map { "<Part><PartNumber>\($0.0)</PartNumber><ETag>\($0.1)</ETag></Part>" }.joined() + "</CompleteMultipartUpload>"
            let body = Array(xml.utf8)
            let done = try S3Client.check(client.call(
                "POST", key: key, query: [("uploadId", id)], body: .bytes(body), payloadSHA256: Hex.encode(SHA256Hasher.hash(body))
            ), "completing the multipart upload")
            // S3 may answer 200 and report the failure in the body.
            if done.text.contains("<Error>") { throw S3Error(status: done.status, description: "completing the multipart upload: \(done.text)") }
        } catch {
            _ = try? client.call("DELETE", key: key, query: [("uploadId", id)])
            throw error
        }
    }

    func open(_ sha256: String) throws -> StoredBlob? {
        guard Hex.isSHA256(sha256) else { return nil }
        let path = spool + "/.read-" + Hex.encode(SecureRandom.bytes(8))
        let file = try FileDescriptor(path: path, flags: O_RDWR | O_CREAT | O_EXCL, mode: 0o600)
        // Unlinked at once: only the descriptor remains, and it goes with the response.
        FileSystem.remove(path)
        do {
            var size: Int64 = 0
            let response = try client.call("GET", key: Self.key(sha256)) { bytes in
                try file.write(bytes)
                size += Int64(bytes.count)
            }
            if response.status == 404 {
                try? file.close()
                return nil
            }
            try S3Client.check(response, "reading blob \(sha256)")
            let modified = response.head.header("Last-Modified").flatMap(HTTPDate.parse) ?? Date()
            return StoredBlob(file: file, size: size, modified: modified)
        } catch {
            try? file.close()
            throw error
        }
    }

    /// The blob's size and time, from one HEAD, or nil if there is none: what a streamed
    /// response needs before its first byte.
    func stat(_ sha256: String) throws -> BlobInfo? {
        guard Hex.isSHA256(sha256) else { return nil }
        let head = try client.call("HEAD", key: Self.key(sha256))
        if head.status == 404 { return nil }
        try S3Client.check(head, "reading blob \(sha256)")
        guard let size = head.head.contentLength else { throw S3Error(status: head.status, description: "no size for blob \(sha256)") }
        return BlobInfo(sha256: sha256, size: size, modified: head.head.header("Last-Modified").flatMap(HTTPDate.parse) ?? Date())
    }

    /// `length` bytes of the blob from `start`, read from the bucket as they are sent.
    func reader(_ sha256: String, start: Int64, length: Int64) -> any HTTPBodySource {
        S3BlobReader(client: client, key: Self.key(sha256), start: start, length: length)
    }

    func contains(_ sha256: String) -> Bool {
        guard Hex.isSHA256(sha256) else { return false }
        return (try? client.call("HEAD", key: Self.key(sha256)).status) == 200
    }

    /// Only a 404 says so: a store that is down or a credential refresh failing says nothing.
    func isMissing(_ sha256: String) -> Bool {
        guard Hex.isSHA256(sha256) else { return true }
        return (try? client.call("HEAD", key: Self.key(sha256)).status) == 404
    }

    func enumerate() -> [BlobInfo] {
        (try? list(prefix: "blobs/").compactMap { object -> BlobInfo? in
            let name = String(object.key.dropFirst("blobs/".count))
            return Hex.isSHA256(name) ? BlobInfo(sha256: name, size: object.size, modified: object.modified) : nil
        }) ?? []
    }

    func remove(_ sha256: String) {
        guard Hex.isSHA256(sha256) else { return }
        _ = try? client.call("DELETE", key: Self.key(sha256))
    }

    /// Crash recovery, at start-up: aborts the multipart uploads of blobs that a previous run
    /// left unfinished (the origin is the bucket's one writer, so none is in progress now),
    /// following the listing's markers page by page. Returns how many.
    @discardableResult
    func abortUnfinishedUploads() throws -> Int {
        let base = client.location.prefix
        var aborted = 0
        var pages = ListingPages("unfinished uploads")
        var marker: (key: String, id: String)?
        repeat {
            var query = [("uploads", ""), ("prefix", base + "blobs/")]
            if let marker { query += [("key-marker", marker.key), ("upload-id-marker", marker.id)] }
            let page = try S3Client.check(client.call("GET", key: nil, query: query, limit: 16 << 20), "listing unfinished uploads")
            for upload in XMLText.all("Upload", in: page.text) {
                guard let key = XMLText.first("Key", in: upload), key.hasPrefix(base), let id = XMLText.first("UploadId", in: upload) else { continue }
                try S3Client.check(client.call("DELETE", key: String(key.dropFirst(base.count)), query: [("uploadId", id)]), "aborting upload \(id)")
                aborted += 1
            }
            marker = nil
            if XMLText.first("IsTruncated", in: page.text) == "true" {
                let key = XMLText.first("NextKeyMarker", in: page.text) ?? ""
                let id = XMLText.first("NextUploadIdMarker", in: page.text) ?? ""
                try pages.next(key + "\u{0}" + id)
                marker = (key, id)
            }
        } while marker != nil
        return aborted
    }

    struct Object { var key: String; var size: Int64; var modified: Date }

    /// Every object under `prefix` (below the location's own prefix), following continuation tokens.
    func list(prefix: String) throws -> [Object] {
        var objects: [Object] = []
        var token: String?
        var pages = ListingPages("the listing of \(prefix)")
        let base = client.location.prefix
        repeat {
            var query = [("list-type", "2"), ("prefix", base + prefix)]
            if let token { query.append(("continuation-token", token)) }
            let page = try S3Client.check(client.call("GET", key: nil, query: query, limit: 16 << 20), "listing \(prefix)")
            for entry in XMLText.all("Contents", in: page.text) {
                guard let key = XMLText.first("Key", in: entry), let size = XMLText.first("Size", in: entry).flatMap({ Int64($0) }) else { continue }
                let modified = XMLText.first("LastModified", in: entry).flatMap(Self.parseISO8601) ?? Date()
                objects.append(Object(key: String(key.dropFirst(base.count)), size: size, modified: modified))
            }
            token = nil
            if XMLText.first("IsTruncated", in: page.text) == "true" {
                let next = XMLText.first("NextContinuationToken", in: page.text) ?? ""
                try pages.next(next)
                token = next
            }
        } while token != nil
        return objects
    }

    static func parseISO8601(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }
}

/// A blob streamed from the bucket while the response is sent: one ranged GET for exactly the
/// bytes the response carries, opened at the first read, read as libmicrohttpd asks for them.
/// Reads come in order; anything else, or the store's body ending early, aborts the response.
final class S3BlobReader: HTTPBodySource, @unchecked Sendable {
    // @unchecked: libmicrohttpd calls read and close on one connection's thread, one at a time.
    private let client: S3Client
    private let key: String
    private let start: Int64
    private let length: Int64
    private var connection: HTTPConnection?
    private var delivered: Int64 = 0

    init(client: S3Client, key: String, start: Int64, length: Int64) {
        (self.client, self.key, self.start, self.length) = (client, key, start, length)
    }

    func read(into buffer: UnsafeMutableRawBufferPointer, at position: Int64) throws -> Int {
        guard position == delivered, position < length else { throw S3Error(status: 0, description: "out-of-order read at \(position)") }
        if connection == nil {
            var opened: HTTPConnection?
            let head = try client.call("GET", key: key, headers: ["range": "bytes=\(start)-\(start + length - 1)"], keepOpen: true) { opened = $0 }
            guard let opened else { throw S3Error(status: head.status, description: "no connection for \(key)") }
            guard head.status == 206 || (head.status == 200 && start == 0), head.head.contentLength == length else {
                opened.close()
                throw S3Error(status: head.status, description: "the store answered \(head.status) with \(head.head.contentLength ?? -1) bytes for \(length)")
            }
            connection = opened
        }
        let room = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<Int(min(Int64(buffer.count), length - delivered))])
        let n = try connection!.readBodyBytes(into: room)
        guard n > 0 else { throw S3Error(status: 0, description: "the store's body for \(key) ended at \(delivered) of \(length)") }
        delivered += Int64(n)
        return n
    }

    func close() {
        connection?.close()
        connection = nil
    }
}

/// The pages of one listing: a store that hands back a token (or marker) it gave before, an empty
/// one on a truncated page, or more pages than any bucket of ours holds, ends the listing with an
/// error instead of looping for ever.
struct ListingPages {
    /// 100,000 pages of up to 1,000 keys: far past any data folder's blobs and releases.
    static let limit = 100_000
    private let what: String
    private var seen: Set<String> = []

    init(_ what: String) { self.what = what }

    mutating func next(_ token: String) throws {
        guard !token.isEmpty && token != "\u{0}" else { throw S3Error(status: 0, description: "\(what): the store said more follows but gave no marker") }
        guard seen.insert(token).inserted else { throw S3Error(status: 0, description: "\(what): the store repeated a continuation marker") }
        guard seen.count < Self.limit else { throw S3Error(status: 0, description: "\(what): more than \(Self.limit) pages") }
    }
}
