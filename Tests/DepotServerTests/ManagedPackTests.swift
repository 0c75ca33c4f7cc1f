import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Managed apps (iOS 26+): Apple Archives stored as uploaded, the download manifest
/// `AssetPackManager` reads, versions that only go up, and the Info.plist keys.
@Suite("Managed asset packs")
struct ManagedPackTests {
    static let group = "group.com.example.managed"

    /// The test origin, with a managed app of its own (and an admin token for it).
    static func withManagedApp(_ body: (TestOrigin) async throws -> Void) async throws {
        try await withServer { origin in
            let app = "com.example.managed"
            let token = try ArchiveFixture.createManagedApp(app, group: group, in: origin.data.path)
            try await body(TestOrigin(server: origin.server, data: origin.data, app: app, token: token))
        }
    }

    static func downloadManifest(_ origin: TestOrigin, channel: String? = nil) throws -> (DownloadManifest, RawHTTP.Response) {
        let path = channel.map { "/v1/apps/\(origin.app)/channels/\($0)/download-manifest" } ?? "/v1/apps/\(origin.app)/download-manifest"
        let response = try request(origin, "GET", path)
        #expect(response.status == 200, "\(response.bodyText)")
        return (try DownloadManifest.decode(response.body), response)
    }

    static func versions(_ origin: TestOrigin, channel: String? = nil) throws -> [String: Int] {
        Dictionary(uniqueKeysWithValues: try downloadManifest(origin, channel: channel).0.assetPacks.map { ($0.id, $0.version) })
    }

    static let levels = ArchiveFixture.uncompressed([("levels/1.bin", Array(repeating: 7, count: 100)), ("levels/2.bin", (0..<5000).map { UInt8($0 % 251) })])
    static let movies = ArchiveFixture.compressed((0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
    static let extras = ArchiveFixture.uncompressed([("extra.txt", Array("extra".utf8))])

    /// Publishes the three packs of these tests: essential, prefetch (first installation only), on-demand.
    static func publishAll(_ origin: TestOrigin) throws {
        let userInfo = Data(#"{"level":1,"title":"Movies"}"#.utf8).base64EncodedString()
        #expect(try upload(origin, pack: "levels", levels, query: "?policy=essential").status == 201)
        let movies = try upload(origin, pack: "movies", movies, query: "?policy=prefetch&events=firstInstallation&installSize=250000", headers: ["X-Depot-User-Info: \(userInfo)"])
        #expect(movies.status == 201, "\(movies.bodyText)")
        #expect(try upload(origin, pack: "extras", extras, query: "?policy=onDemand").status == 201)
    }

    @Test("The download manifest has ba-package's shape: each url serves exactly downloadSize bytes, the archive as uploaded, whose SHA-256 is in userInfo")
    func downloadManifestShape() async throws {
        try await Self.withManagedApp { origin in
            try Self.publishAll(origin)
            let (manifest, response) = try Self.downloadManifest(origin)
            #expect(response.header("Content-Type") == "application/json")
            #expect(manifest.assetPacks.map(\.id) == ["extras", "levels", "movies"])
            let text = response.bodyText
            #expect(text.hasPrefix(#"{"assetPacks":[{"#))
            #expect(text.contains(#""downloadPolicy":{"essential":{"installationEventTypes":["firstInstallation","subsequentUpdate"]}}"#), "\(text)")
            #expect(text.contains(#""downloadPolicy":{"prefetch":{"installationEventTypes":["firstInstallation"]}}"#))
            #expect(text.contains(#""downloadPolicy":{"onDemand":{}}"#))
            #expect(text.contains(#""host":{"thirdParty":{}}"#))
            for pack in manifest.assetPacks {
                let original = ["levels": Self.levels, "movies": Self.movies, "extras": Self.extras][pack.id]!
                #expect(pack.version == 1)
                #expect(pack.downloadSize == Int64(original.count))
                #expect(pack.url.hasPrefix("http://127.0.0.1:\(origin.port)/v1/apps/\(origin.app)/blobs/"))
                let blob = try request(origin, "GET", String(pack.url.dropFirst("http://127.0.0.1:\(origin.port)".count)))
                #expect(blob.status == 200 && blob.body == original, "stored as uploaded, not encrypted")
                #expect(Int64(blob.body.count) == pack.downloadSize)
                #expect(pack.sha256 == Hex.encode(SHA256Hasher.hash(blob.body)))
                #expect(blob.header("Cache-Control")?.contains("immutable") == true)
            }
            #expect(manifest.assetPacks.first { $0.id == "movies" }?.userInfo["title"] == .string("Movies"))
            #expect(manifest.assetPacks.first { $0.id == "movies" }?.userInfo["level"] == .integer(1))

            // Validators: 304 on the ETag; a query parameter the device adds is accepted.
            let etag = try #require(response.header("ETag"))
            #expect(response.header("Cache-Control")?.contains("max-age=") == true)
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)/download-manifest", headers: ["If-None-Match: \(etag)"]).status == 304)
            let withPlatform = try request(origin, "GET", "/v1/apps/\(origin.app)/download-manifest?platform=iOS")
            #expect(withPlatform.status == 200 && withPlatform.body == response.body)
            // The signed release lists the same packs.
            let signed = try request(origin, "GET", "/v1/apps/\(origin.app)/manifest")
            #expect(signed.status == 200)
        }
    }

    @Test("A body that is no Apple Archive gets 422 and nothing is stored, by PUT and by tus; a malformed AA01 and an undeclared compressed size too")
    func refusals() async throws {
        try await Self.withManagedApp { origin in
            let blobsBefore = Self.storedBlobs(origin)
            let zip = try upload(origin, pack: "levels", Array("PK\u{3}\u{4}not an archive".utf8))
            #expect(zip.status == 422 && zip.bodyText.contains("not_an_apple_archive"), "\(zip.bodyText)")
            var truncated = Self.levels
            truncated.removeLast(10)
            let cut = try upload(origin, pack: "levels", truncated)
            #expect(cut.status == 422 && cut.bodyText.contains("invalid_archive") && cut.bodyText.contains("past the end"), "\(cut.bodyText)")
            let undeclared = try upload(origin, pack: "movies", Self.movies)
            #expect(undeclared.status == 422 && undeclared.bodyText.contains("install_size_required"), "\(undeclared.bodyText)")
            #expect(try upload(origin, pack: "tiny", Array("AA0".utf8)).status == 422, "shorter than a magic")

            // tus: the PATCH that brings a non-archive is refused and the upload removed.
            let metadata = "pack \(Data("levels".utf8).base64EncodedString())"
            let created = try request(origin, "POST", "/v1/apps/\(origin.app)/uploads", headers: [
                "Authorization: Bearer \(origin.token)", "Tus-Resumable: 1.0.0", "Upload-Length: 12", "Upload-Metadata: \(metadata)", "Content-Length: 0",
            ])
            #expect(created.status == 201, "\(created.bodyText)")
            let location = try #require(created.header("Location"))
            let patch = try request(origin, "PATCH", location, headers: [
                "Authorization: Bearer \(origin.token)", "Tus-Resumable: 1.0.0", "Upload-Offset: 0", "Content-Type: application/offset+octet-stream",
            ], body: Array("hello world!".utf8))
            #expect(patch.status == 422 && patch.bodyText.contains("not_an_apple_archive"), "\(patch.bodyText)")
            #expect(try request(origin, "HEAD", location, headers: ["Authorization: Bearer \(origin.token)", "Tus-Resumable: 1.0.0"]).status == 404)

            #expect(Self.storedBlobs(origin) == blobsBefore, "no blob stored")
            #expect(FileSystem.contents(of: origin.data.path + "/uploads").filter { !$0.hasPrefix(".") }.isEmpty, "no upload or temporary file left")
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)/download-manifest").status == 404, "nothing published")
        }
    }

    @Test("An archive uploaded by tus in two PATCHes is stored as uploaded and listed with its exact size")
    func resumableArchive() async throws {
        try await Self.withManagedApp { origin in
            let archive = Self.levels
            let metadata = ["pack levels", "policy essential", "release true"].map { pair -> String in
                let parts = pair.split(separator: " ")
                return "\(parts[0]) \(Data(parts[1].utf8).base64EncodedString())"
            }.joined(separator: ",")
            let created = try request(origin, "POST", "/v1/apps/\(origin.app)/uploads", headers: [
                "Authorization: Bearer \(origin.token)", "Tus-Resumable: 1.0.0", "Upload-Length: \(archive.count)", "Upload-Metadata: \(metadata)", "Content-Length: 0",
            ])
            let location = try #require(created.header("Location"))
            for (offset, part) in [(0, Array(archive[..<2])), (2, Array(archive[2...]))] {
                let patch = try request(origin, "PATCH", location, headers: [
                    "Authorization: Bearer \(origin.token)", "Tus-Resumable: 1.0.0", "Upload-Offset: \(offset)", "Content-Type: application/offset+octet-stream",
                ], body: part)
                #expect(patch.status == 204, "\(patch.bodyText)")
            }
            let pack = try #require(try Self.downloadManifest(origin).0.assetPacks.first)
            #expect(pack.downloadSize == Int64(archive.count) && pack.sha256 == Hex.encode(SHA256Hasher.hash(archive)))
            let blob = try request(origin, "GET", String(pack.url.dropFirst("http://127.0.0.1:\(origin.port)".count)))
            #expect(blob.body == archive)
        }
    }

    @Test("Versions rise exactly when bytes change, never fall: republishing keeps it, a change raises it, a rollback raises the restored packs, a promotion that would hide a change is refused")
    func versionsOnlyGoUp() async throws {
        try await Self.withManagedApp { origin in
            try Self.publishAll(origin)
            #expect(try Self.versions(origin) == ["levels": 1, "movies": 1, "extras": 1])
            let again = try upload(origin, pack: "levels", Self.levels, query: "?policy=essential")
            #expect((200..<300).contains(again.status), "\(again.bodyText)")
            #expect(try Self.versions(origin)["levels"] == 1, "same bytes: same version")
            let changed = ArchiveFixture.uncompressed([("levels/1.bin", Array(repeating: 8, count: 100))])
            #expect(try upload(origin, pack: "levels", changed, query: "?policy=essential").status == 201)
            #expect(try Self.versions(origin) == ["levels": 2, "movies": 1, "extras": 1])
            let live = try liveManifest(origin).version

            // Rollback to release 3 (the three first packs): levels' old bytes come back under version 3.
            let rollback = try request(origin, "POST", "/v1/apps/\(origin.app)/rollback?to=3", headers: ["Authorization: Bearer \(origin.token)"])
            #expect(rollback.status == 201, "\(rollback.bodyText)")
            let afterRollback = try Self.downloadManifest(origin).0
            #expect(afterRollback.assetPacks.first { $0.id == "levels" }?.version == 3)
            #expect(afterRollback.assetPacks.first { $0.id == "levels" }?.sha256 == Hex.encode(SHA256Hasher.hash(Self.levels)))
            #expect(afterRollback.assetPacks.first { $0.id == "movies" }?.version == 1, "unchanged bytes keep their version")
            #expect(try liveManifest(origin).version == live + 1)

            // Beta gets new levels (version 4); production then changes movies, inheriting its own
            // older levels. Moving beta to that release would hide beta's levels under a lower
            // version: refused. Publishing on beta raises it instead.
            #expect(try upload(origin, pack: "levels", changed, query: "?policy=essential&channel=beta").status == 201)
            #expect(try Self.versions(origin, channel: "beta")["levels"] == 4)
            let movies2 = ArchiveFixture.compressed(Array(repeating: 1, count: 1000))
            #expect(try upload(origin, pack: "movies", movies2, query: "?policy=prefetch&installSize=9000").status == 201)
            let production = try liveManifest(origin).version
            let promote = try request(origin, "POST", "/v1/apps/\(origin.app)/channels/beta?release=\(production)", headers: ["Authorization: Bearer \(origin.token)"])
            #expect(promote.status == 409 && promote.bodyText.contains("version_not_raised"), "\(promote.bodyText)")
            #expect(try Self.versions(origin, channel: "beta")["levels"] == 4)
        }
    }

    @Test("Dropping a live pack needs confirmation: removal, rollback and promotion say devices delete it")
    func removalNeedsConfirmation() async throws {
        try await Self.withManagedApp { origin in
            #expect(try upload(origin, pack: "levels", Self.levels, query: "?policy=essential").status == 201)
            let first = try liveManifest(origin).version
            #expect(try upload(origin, pack: "extras", Self.extras, query: "?policy=onDemand").status == 201)
            let auth = ["Authorization: Bearer \(origin.token)"]
            let remove = try request(origin, "DELETE", "/v1/apps/\(origin.app)/packs/extras?release=true", headers: auth)
            #expect(remove.status == 409 && remove.bodyText.contains("delete"), "\(remove.bodyText)")
            let rollback = try request(origin, "POST", "/v1/apps/\(origin.app)/rollback?to=\(first)", headers: auth)
            #expect(rollback.status == 409 && rollback.bodyText.contains("live_pack_removed") && rollback.bodyText.contains("extras"), "\(rollback.bodyText)")
            #expect(try Self.versions(origin) == ["levels": 1, "extras": 1], "nothing published")
            let confirmed = try request(origin, "POST", "/v1/apps/\(origin.app)/rollback?to=\(first)&removeLive=true", headers: auth)
            #expect(confirmed.status == 201, "\(confirmed.bodyText)")
            #expect(try Self.versions(origin) == ["levels": 1])
        }
    }

    @Test("Info.plist keys for managed mode: the download manifest's URL, the app group, allowances from the essential and prefetch packs and the manifest's own size")
    func infoPlistKeys() async throws {
        try await Self.withManagedApp { origin in
            try Self.publishAll(origin)
            let plist = try request(origin, "GET", "/v1/apps/\(origin.app)/info-plist")
            #expect(plist.status == 200)
            let keys = try #require(try PropertyListSerialization.propertyList(from: Data(plist.body), format: nil) as? [String: Any])
            #expect(keys["BAHasManagedAssetPacks"] as? Bool == true)
            #expect(keys["BAUsesAppleHosting"] as? Bool == false)
            #expect(keys["BAAppGroupID"] as? String == Self.group)
            #expect(keys["BAManifestURL"] as? String == "http://127.0.0.1:\(origin.port)/v1/apps/\(origin.app)/download-manifest")
            let manifestSize = try Self.downloadManifest(origin).1.body.count
            let restrictions = try #require(keys["BAInitialDownloadRestrictions"] as? [String: Any])
            #expect((restrictions["BAEssentialDownloadAllowance"] as? Int) == manifestSize + Self.levels.count)
            #expect((restrictions["BADownloadAllowance"] as? Int) == Self.movies.count)
            #expect(restrictions["BADownloadDomainAllowList"] as? [String] == ["127.0.0.1"])
            #expect((keys["BAEssentialMaxInstallSize"] as? Int) == 5100, "the AA01 archive's file bytes")
            #expect((keys["BAMaxInstallSize"] as? Int) == 250_000, "the compressed archive's declared size")

            // The allowance guard applies: a recorded allowance below the next release refuses it.
            try AppStore(folder: DataFolder(origin.data.path)).setAllowances(origin.app, BuildAllowances(essentialDownloadAllowance: Int64(manifestSize + Self.levels.count)))
            let bigger = ArchiveFixture.uncompressed([("levels/1.bin", Array(repeating: 9, count: 9000))])
            let refused = try upload(origin, pack: "levels", bigger, query: "?policy=essential")
            #expect(refused.status == 409 && refused.bodyText.contains("BAEssentialDownloadAllowance"), "\(refused.bodyText)")
        }
    }

    @Test("An unmanaged app has no download manifest and refuses managed-only values")
    func unmanagedApp() async throws {
        try await withServer { origin in
            #expect(try upload(origin, pack: "a", [1, 2, 3]).status == 201)
            let none = try request(origin, "GET", "/v1/apps/\(origin.app)/download-manifest")
            #expect(none.status == 404 && none.bodyText.contains("unmanaged"))
            let refused = try upload(origin, pack: "b", [1], query: "?installSize=5")
            #expect(refused.status == 400 && refused.bodyText.contains("managed"))
        }
    }

    static func storedBlobs(_ origin: TestOrigin) -> [String] {
        FileSystem.contents(of: origin.data.path + "/blobs").flatMap { shard in FileSystem.contents(of: origin.data.path + "/blobs/" + shard) }.sorted()
    }
}
