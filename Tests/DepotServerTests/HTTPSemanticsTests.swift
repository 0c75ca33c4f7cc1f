import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Publishes one pack and returns the blob's bytes and path.
func publishedBlob(_ origin: TestOrigin, size: Int = 1000) throws -> (bytes: [UInt8], path: String, etag: String) {
    #expect(try upload(origin, pack: "p", (0..<size).map { UInt8(truncatingIfNeeded: $0) }).status == 201)
    let entry = try #require(try liveManifest(origin)[pack: "p"])
    let path = "/v1/apps/\(origin.app)/blobs/\(entry.sha256)"
    let blob = try request(origin, "GET", path)
    return (blob.body, path, "\"\(entry.sha256)\"")
}

@Suite("Origin: ranges, validators and caching")
struct HTTPSemanticsTests {
    @Test("Range matrix on a blob: each status, Content-Range, Content-Length and body byte")
    func rangeMatrix() async throws {
        try await withServer { origin in
            let (blob, path, _) = try publishedBlob(origin)
            let n = blob.count
            // (Range header, expected status, expected first…last or nil)
            let cases: [(String, Int, ClosedRange<Int>?)] = [
                ("bytes=0-0", 206, 0...0),
                ("bytes=\(n - 1)-\(n - 1)", 206, (n - 1)...(n - 1)),
                ("bytes=0-", 206, 0...(n - 1)),
                ("bytes=10-19", 206, 10...19),
                ("bytes=-10", 206, (n - 10)...(n - 1)),
                ("bytes=-\(n + 100)", 206, 0...(n - 1)),
                ("bytes=100-99999999999", 206, 100...(n - 1)),
                ("BYTES=1-2", 206, 1...2),
                ("bytes= 3-4 ", 206, 3...4),
                ("bytes=\(n)-", 416, nil),
                ("bytes=\(n + 5)-\(n + 10)", 416, nil),
                ("bytes=-0", 416, nil),
                ("bytes=5-2", 200, nil),
                ("bytes=abc", 200, nil),
                ("bytes=", 200, nil),
                ("bytes=--1", 200, nil),
                ("bytes=1-2-3", 200, nil),
                ("items=0-1", 200, nil),
                ("0-10", 200, nil),
                ("bytes=0-1,5-6", 200, nil),
                ("bytes=0-1,", 200, nil),
                ("bytes=99999999999999999999-", 200, nil),
            ]
            for (range, status, span) in cases {
                let response = try request(origin, "GET", path, headers: ["Range: \(range)"])
                #expect(response.status == status, "\(range)")
                #expect(response.header("Accept-Ranges") == (status == 416 ? nil : "bytes"), "\(range)")
                switch status {
                case 206:
                    let span = span!
                    #expect(response.header("Content-Range") == "bytes \(span.lowerBound)-\(span.upperBound)/\(n)", "\(range)")
                    #expect(response.header("Content-Length") == String(span.count), "\(range)")
                    #expect(response.body == Array(blob[span]), "\(range)")
                case 416:
                    #expect(response.header("Content-Range") == "bytes */\(n)", "\(range)")
                    #expect(response.bodyText.contains("\"code\":\"range_not_satisfiable\""), "\(range)")
                default:
                    #expect(response.header("Content-Range") == nil, "\(range)")
                    #expect(response.body == blob, "\(range)")
                }
            }
            // HEAD ignores Range: the whole length, no body.
            let head = try request(origin, "HEAD", path, headers: ["Range: bytes=0-9"])
            #expect(head.status == 200 && head.header("Content-Length") == String(n) && head.body.isEmpty)
        }
    }

    @Test("A zero-length file: no range is satisfiable; without one, an empty 200")
    func zeroLength() async throws {
        let publicDir = TemporaryDirectory("depot-public")
        defer { publicDir.remove() }
        _ = try publicDir.file("empty.txt", size: 0)
        try await withServer(configure: { $0.publicDirectory = publicDir.path }) { origin in
            for range in ["bytes=0-0", "bytes=0-", "bytes=-1"] {
                let response = try request(origin, "GET", "/empty.txt", headers: ["Range: \(range)"])
                #expect(response.status == 416, "\(range)")
                #expect(response.header("Content-Range") == "bytes */0")
            }
            let whole = try request(origin, "GET", "/empty.txt")
            #expect(whole.status == 200 && whole.header("Content-Length") == "0" && whole.body.isEmpty)
        }
    }

    @Test("Conditional matrix: If-None-Match, If-Match, If-Modified-Since, If-Range")
    func conditionals() async throws {
        try await withServer { origin in
            let (blob, path, etag) = try publishedBlob(origin)
            let lastModified = try #require(try request(origin, "GET", path).header("Last-Modified"))
            let inOneHour = HTTPDateText.format(Date().addingTimeInterval(3600))
            let longAgo = "Sun, 06 Nov 1994 08:49:37 GMT"
            let cases: [([String], Int)] = [
                (["If-None-Match: \(etag)"], 304),
                (["If-None-Match: W/\(etag)"], 304),
                (["If-None-Match: \"other\", \(etag)"], 304),
                (["If-None-Match: *"], 304),
                (["If-None-Match: \"other\""], 200),
                (["If-Match: \(etag)"], 200),
                (["If-Match: \"other\""], 412),
                (["If-Match: W/\(etag)"], 412),
                (["If-Modified-Since: \(inOneHour)"], 304),
                (["If-Modified-Since: \(lastModified)"], 304),
                (["If-Modified-Since: \(longAgo)"], 200),
                (["If-Modified-Since: yesterday"], 200),
                (["If-None-Match: \"other\"", "If-Modified-Since: \(inOneHour)"], 200),
                (["If-Unmodified-Since: \(longAgo)"], 412),
                (["Range: bytes=0-9", "If-Range: \(etag)"], 206),
                (["Range: bytes=0-9", "If-Range: \"stale\""], 200),
                (["Range: bytes=0-9", "If-Range: W/\(etag)"], 200),
                (["Range: bytes=0-9", "If-Range: \(lastModified)"], 206),
                (["Range: bytes=0-9", "If-Range: \(longAgo)"], 200),
            ]
            for (headers, status) in cases {
                let response = try request(origin, "GET", path, headers: headers)
                #expect(response.status == status, "\(headers)")
                switch status {
                case 304:
                    #expect(response.body.isEmpty && response.header("ETag") == etag, "\(headers)")
                    #expect(response.header("Cache-Control") == "public, max-age=31536000, immutable")
                case 206: #expect(response.body == Array(blob[0...9]), "\(headers)")
                case 200: #expect(response.body == blob, "\(headers)")
                default: #expect(response.bodyText.contains("precondition_failed"), "\(headers)")
                }
            }
        }
    }

    @Test("Headers of each read endpoint; HEAD sends the same headers and no body")
    func headers() async throws {
        try await withServer(configure: { $0.manifestMaxAge = 17 }) { origin in
            let (blob, path, etag) = try publishedBlob(origin)
            let get = try request(origin, "GET", path)
            #expect(get.header("Content-Type") == "application/octet-stream")
            #expect(get.header("Content-Length") == String(blob.count))
            #expect(get.header("ETag") == etag)
            #expect(get.header("Cache-Control") == "public, max-age=31536000, immutable")
            #expect(get.header("Accept-Ranges") == "bytes")
            #expect(get.header("Last-Modified")?.hasSuffix(" GMT") == true)
            let head = try request(origin, "HEAD", path)
            #expect(head.body.isEmpty)
            for name in ["Content-Type", "Content-Length", "ETag", "Cache-Control", "Accept-Ranges", "Last-Modified"] {
                #expect(head.header(name) == get.header(name), "\(name)")
            }

            let manifest = try request(origin, "GET", "/v1/apps/\(origin.app)/manifest")
            #expect(manifest.header("Cache-Control") == "public, max-age=17, must-revalidate")
            #expect(manifest.header("Content-Type") == "application/json")
            #expect(manifest.header("ETag")?.count == 66)
            let partial = try request(origin, "GET", "/v1/apps/\(origin.app)/manifest", headers: ["Range: bytes=0-4"])
            #expect(partial.status == 206 && partial.bodyText == "{\"pay")
        }
    }

    @Test("Older releases by number are immutable; the list marks the live one")
    func releases() async throws {
        try await withServer { origin in
            #expect(try upload(origin, pack: "a", [1]).status == 201)
            #expect(try upload(origin, pack: "a", [2]).status == 201)
            let live = try request(origin, "GET", "/v1/apps/\(origin.app)/manifest")
            let second = try request(origin, "GET", "/v1/apps/\(origin.app)/releases/2")
            #expect(second.status == 200 && second.body == live.body)
            #expect(second.header("Cache-Control") == "public, max-age=31536000, immutable")
            #expect(second.header("ETag") == live.header("ETag"))
            let first = try request(origin, "GET", "/v1/apps/\(origin.app)/releases/1")
            let keys = try origin.clientConfiguration().trustedKeys()
            #expect(try Envelope.decode(first.body).verifiedManifest(trusting: keys).version == 1)
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)/releases/3").status == 404)
            // Ten digits is a release number (a restored origin's continue from the Unix time):
            // one this origin never made is 404; sixteen digits (2^53 and up) is no number at all.
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)/releases/1795812928").status == 404)
            for bad in ["0", "-1", "abc", "1a", "9999999999999999"] {
                let response = try request(origin, "GET", "/v1/apps/\(origin.app)/releases/\(bad)")
                #expect(response.status == 400, "\(bad)")
                #expect(response.bodyText.contains("invalid_release"))
            }
            struct List: Decodable { struct R: Decodable { var version: Int; var live: Bool; var url: String }; var live: Int; var releases: [R] }
            let list = try JSONDecoder().decode(List.self, from: Data(try request(origin, "GET", "/v1/apps/\(origin.app)/releases").body))
            #expect(list.live == 2)
            #expect(list.releases.map(\.version) == [1, 2])
            #expect(list.releases.map(\.live) == [false, true])
            #expect(list.releases[0].url.hasSuffix("/v1/apps/\(origin.app)/releases/1"))
            // A release file above `head` is a publish in progress: not served, even after its
            // neighbours were (what is visible is known from the stamps, kept between requests).
            let releases = origin.data.path + "/apps/\(origin.app)/releases/"
            let names = try FileManager.default.contentsOfDirectory(atPath: releases).sorted()
            #expect(names.count == 2)
            let third = names[1].replacingOccurrences(of: "2", with: "3")
            try FileSystem.writeAtomically(second.body, to: releases + third)
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)/releases/3").status == 404)
            #expect(try upload(origin, pack: "a", [3]).status == 201)
            let newLive = try request(origin, "GET", "/v1/apps/\(origin.app)/manifest")
            // (numbered past every file: 4)
            let number = try Envelope.decode(newLive.body).verifiedManifest(trusting: keys).version
            let third3 = try request(origin, "GET", "/v1/apps/\(origin.app)/releases/\(number)")
            #expect(number == 4 && third3.status == 200 && third3.body == newLive.body && third3.body != second.body)
            // Served from memory: release 1's bytes are kept after its first answer, counted once.
            let kept = origin.server.origin.releases.reading.bodies.withLock { ($0.bytes, $0.byPath[releases + names[0]]?.body.count) }
            #expect(kept.1 == first.body.count && kept.0 >= first.body.count)
            // A release file replaced by hand: the bytes sent are the new ones, with their ETag.
            try FileSystem.writeAtomically(third3.body, to: releases + names[0])
            let replaced = try request(origin, "GET", "/v1/apps/\(origin.app)/releases/1")
            #expect(replaced.body == third3.body && replaced.header("ETag") == third3.header("ETag"))
            // …and they took the old bytes' place in the count, not a second share.
            let after = origin.server.origin.releases.reading.bodies.withLock { ($0.bytes, $0.byPath[releases + names[0]]?.body.count) }
            #expect(after.1 == third3.body.count && after.0 == kept.0 - first.body.count + third3.body.count)
        }
    }

    @Test("Info.plist keys parse as a plist and match the live release")
    func infoPlist() async throws {
        try await withServer(configure: { $0.publicURL = "https://cdn.example.com/assets" }) { origin in
            #expect(try upload(origin, pack: "e1", [UInt8](repeating: 1, count: 3000), query: "?policy=essential").status == 201)
            #expect(try upload(origin, pack: "e2", [UInt8](repeating: 2, count: 10), query: "?policy=essential").status == 201)
            #expect(try upload(origin, pack: "p1", [UInt8](repeating: 3, count: 5000), query: "?policy=prefetch").status == 201)
            #expect(try upload(origin, pack: "o1", [UInt8](repeating: 4, count: 7000), query: "?policy=onDemand").status == 201)
            let envelope = try request(origin, "GET", "/v1/apps/\(origin.app)/manifest").body
            let manifest = try liveManifest(origin)
            let response = try request(origin, "GET", "/v1/apps/\(origin.app)/info-plist")
            #expect(response.status == 200)
            #expect(response.header("Content-Type") == "application/xml; charset=utf-8")
            let plist = try #require(try PropertyListSerialization.propertyList(from: Data(response.body), format: nil) as? [String: Any])
            let restrictions = try #require(plist["BAInitialDownloadRestrictions"] as? [String: Any])
            func size(_ ids: [String]) -> Int { ids.reduce(0) { $0 + Int(manifest[pack: $1]!.size) } }
            #expect(plist["BAManifestURL"] as? String == "https://cdn.example.com/assets/v1/apps/\(origin.app)/manifest")
            #expect(restrictions["BADownloadDomainAllowList"] as? [String] == ["cdn.example.com"])
            #expect(restrictions["BAEssentialDownloadAllowance"] as? Int == envelope.count + size(["e1", "e2"]))
            #expect(restrictions["BADownloadAllowance"] as? Int == size(["p1"]))
            #expect(plist["BAEssentialMaxInstallSize"] as? Int == 3010)
            #expect(plist["BAMaxInstallSize"] as? Int == 5000)
        }
    }
}

/// The test's own IMF-fixdate formatter (independent of the server's).
enum HTTPDateText {
    static func format(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }
}
