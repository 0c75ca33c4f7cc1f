import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Synchronization
import Testing

/// The listings an app's history feeds: paged, kept per change, bounded by limits an operator sets.
@Suite("History: paged release lists, kept channel lists, a channel limit, listings evicted one at a time")
struct HistoryTests {
    struct Page: Decodable {
        struct Summary: Decodable {
            var version: Int
            var live: Bool
            var channels: [String]
        }
        var app: String
        var live: Int?
        var channels: [String: Int]
        var releases: [Summary]
        var total: Int
        var next: String?
    }

    static func page(_ origin: TestOrigin, _ target: String) throws -> Page {
        let response = try request(origin, "GET", target)
        #expect(response.status == 200, "\(target): \(response.bodyText)")
        return try JSONDecoder().decode(Page.self, from: Data(response.body))
    }

    @Test("GET …/releases pages: the newest first page, `next` to older ones, `total`; bad limits are 400")
    func pages() async throws {
        try await withServer { origin in
            for version in 1...7 { #expect(try upload(origin, pack: "level", Array("content \(version)".utf8)).status == 201) }
            let base = "/v1/apps/\(origin.app)/releases"
            let all = try Self.page(origin, base)
            #expect(all.releases.map(\.version) == Array(1...7) && all.total == 7 && all.next == nil && all.live == 7)
            #expect(all.releases.last?.live == true && all.releases.last?.channels == ["production"])
            var seen: [Int] = []
            var target: String? = base + "?limit=3"
            while let next = target {
                let page = try Self.page(origin, next)
                #expect(page.total == 7 && page.releases.count <= 3)
                seen = page.releases.map(\.version) + seen
                target = page.next
            }
            #expect(seen == Array(1...7), "the pages hold every release once, in order")
            #expect(try Self.page(origin, base + "?before=3").releases.map(\.version) == [1, 2])
            #expect(try Self.page(origin, base + "?before=1").releases.isEmpty)
            for bad in ["?limit=0", "?limit=501", "?limit=x", "?before=0", "?before=-2"] {
                #expect(try request(origin, "GET", base + bad).status == 400, "\(bad)")
            }
            // The kept first page is revalidated while nothing changes, and changes with a publish.
            let first = try request(origin, "GET", base)
            let etag = try #require(first.header("ETag"))
            #expect(try request(origin, "GET", base, headers: ["If-None-Match: \(etag)"]).status == 304)
            #expect(try upload(origin, pack: "level", Array("content 8".utf8)).status == 201)
            let after = try request(origin, "GET", base)
            #expect(after.status == 200 && after.header("ETag") != etag)
            #expect(try JSONDecoder().decode(Page.self, from: Data(after.body)).releases.last?.version == 8)
        }
    }

    @Test("A channel written underneath (a replica's pull, a hand) shows in the kept lists; one this origin moves shows at once")
    func keptLists() async throws {
        try await withServer { origin in
            #expect(try upload(origin, pack: "a", [1, 2, 3]).status == 201)
            #expect(try upload(origin, pack: "b", [4, 5, 6], query: "?channel=beta").status == 201)
            #expect(try Self.page(origin, "/v1/apps/\(origin.app)/releases").channels == ["production": 1, "beta": 2])
            let folder = DataFolder(origin.data.path)
            try FileSystem.writeAtomically(Array("1\n".utf8), to: folder.channels(origin.app) + "/byhand")
            let channels = try request(origin, "GET", "/v1/apps/\(origin.app)/channels")
            #expect(channels.bodyText.contains("\"name\":\"byhand\",\"release\":1"), "\(channels.bodyText)")
            #expect(try Self.page(origin, "/v1/apps/\(origin.app)/releases").releases.first?.channels == ["byhand", "production"])
            #expect(try ChannelTests.post(origin, "/v1/apps/\(origin.app)/channels/qa?release=2").status == 201)
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)/channels").bodyText.contains("\"name\":\"qa\",\"release\":2"))
        }
    }

    @Test("Past --max-channels a new channel is refused (409 too_many_channels), by a publish or a promotion; existing ones still move")
    func channelLimit() async throws {
        try await withServer(configure: { $0.maximumChannels = 2 }) { origin in
            #expect(try upload(origin, pack: "a", [1]).status == 201)
            #expect(try upload(origin, pack: "a", [2], query: "?channel=beta").status == 201)
            #expect(try upload(origin, pack: "a", [3], query: "?channel=qa").status == 201)
            let third = try upload(origin, pack: "a", [4], query: "?channel=nightly")
            #expect(third.status == 409 && third.bodyText.contains("too_many_channels") && third.bodyText.contains("--max-channels"), "\(third.bodyText)")
            let promoted = try ChannelTests.post(origin, "/v1/apps/\(origin.app)/channels/nightly?release=1")
            #expect(promoted.status == 409 && promoted.bodyText.contains("too_many_channels"))
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)/channels/nightly/manifest").status == 404)
            #expect(try upload(origin, pack: "a", [5], query: "?channel=beta").status == 201, "an existing channel still moves")
        }
    }

    @Test("A large live manifest is answered from a file: the same bytes, HEAD, 304 and ranges; a new release replaces it")
    func largeManifest() async throws {
        try await withServer { origin in
            for index in 0..<40 { #expect(try upload(origin, pack: "level\(index)", Array("content \(index)".utf8), release: false).status == 202) }
            #expect(try ChannelTests.post(origin, "/v1/apps/\(origin.app)/releases").status == 201)
            let path = "/v1/apps/\(origin.app)/manifest"
            let whole = try request(origin, "GET", path)
            #expect(whole.status == 200 && whole.body.count >= LargeManifestAnswers.threshold)
            let file = try FileSystem.readFile(DataFolder(origin.data.path).release(origin.app, 1))
            #expect(whole.body == file, "the envelope as published")
            #expect(try liveManifest(origin).packs.count == 40)
            let head = try request(origin, "HEAD", path)
            #expect(head.status == 200 && head.header("Content-Length") == String(file.count) && head.body.isEmpty)
            let etag = try #require(whole.header("ETag"))
            #expect(try request(origin, "GET", path, headers: ["If-None-Match: \(etag)"]).status == 304)
            let range = try request(origin, "GET", path, headers: ["Range: bytes=10-19"])
            #expect(range.status == 206 && range.body == Array(file[10...19]))
            #expect(try upload(origin, pack: "level0", Array("changed".utf8)).status == 201)
            let next = try request(origin, "GET", path)
            let second = try FileSystem.readFile(DataFolder(origin.data.path).release(origin.app, 2))
            #expect(next.status == 200 && next.header("ETag") != etag && next.body == second)
        }
    }

    @Test("Release listings: the least recently used one goes when full, never all; the loader reads a release once, off the caller's thread")
    func listings() throws {
        @Sendable func manifest(_ version: Int, packs: Int) -> Manifest {
            let entries = (0..<packs).map { index in
                PackEntry(
                    id: "p\(index)", revision: version, url: "http://x/b", size: 100, sha256: String(repeating: "a", count: 64), installSize: 90,
                    plaintextSHA256: String(repeating: "b", count: 64), policy: .onDemand, tags: [], keyID: "k", contentType: "application/octet-stream"
                )
            }
            return Manifest(app: "com.example.x", version: version, publishedAt: Date(), expiresAt: Date(), packs: entries)
        }
        let loads = Mutex(0)
        let listings = ReleaseListings(entryLimit: 10) { _, version in
            loads.withLock { $0 += 1 }
            return manifest(version, packs: 4)
        }
        listings.keep("a", manifest(1, packs: 4))
        listings.keep("a", manifest(2, packs: 4))
        #expect(listings.kept("a", 1)?.most("p3", 1) == 100, "1 is used: 2 is now the least recently used")
        #expect(listings.kept("a", 1)?.most("p3", 2) == nil && listings.kept("a", 1)?.most("p9", 1) == nil)
        listings.keep("a", manifest(3, packs: 4))
        #expect(listings.kept("a", 1) != nil && listings.kept("a", 3) != nil && listings.kept("a", 2) == nil)
        #expect(listings.request("a", 7) == true)
        #expect(listings.request("a", 7) == false, "asked for once")
        #expect(Eventually.wait { listings.kept("a", 7) != nil })
        #expect(loads.withLock { $0 } == 1)
    }

    @Test("A busy app keeps the listings its channels' reports can name: after 80 releases, those outside every window are gone, beta's old live release and production's window stay")
    func listingsFollowTheWindows() async throws {
        try await withServer { origin in
            #expect(try upload(origin, pack: "a", [1]).status == 201)
            let promote = try request(origin, "POST", "/v1/apps/\(origin.app)/channels/beta?release=1", headers: ["Authorization: Bearer \(origin.token)"])
            #expect((200..<300).contains(promote.status))
            for round in 2...80 { #expect(try upload(origin, pack: "a", [UInt8(round)]).status == 201) }
            let live = try #require(origin.server.origin.releases.channels(origin.app)["production"])
            #expect(live >= 80)
            let listings = origin.server.origin.reports.listings
            let kept = (1...live).filter { listings.kept(origin.app, $0) != nil }
            #expect(kept.contains(1) && kept.contains(live), "\(kept)")
            #expect(kept.allSatisfy { $0 == 1 || $0 >= live - ReportBook.servedWindow }, "\(kept)")
            #expect(kept.count < live - 10, "\(kept)")
        }
    }
}
