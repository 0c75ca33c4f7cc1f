import BackgroundAssets
import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// The client says why a device lacks a pack: what each event scheduled and deferred, what each
/// install step installed, kept or dropped and why — through `DepotLog`, whose handler a test (or
/// an app) sets; on a device it is the unified log.
@Suite("What the client logs")
struct ClientLogTests {
    @Test("An event's deferral for the allowance and an install step's refusal are logged with the pack and the reason")
    func logsWhy() async throws {
        let lines = Locked<[String]>([])
        DepotLog.setHandler { level, category, message in
            lines.withLock { $0.append("\(level) \(category) \(message)") }
        }
        defer { DepotLog.setHandler(nil) }
        func said(_ part: String) -> [String] { lines.withLock { $0 }.filter { $0.contains(part) } }
        try await withServer(configure: { $0.publicURL = "https://cdn.example.com" }) { origin in
            let work = TemporaryDirectory("depot-log")
            defer { work.remove() }
            try put(origin, "logged-small", bytes(20_000, seed: 1))
            try put(origin, "logged-large", bytes(400_000, seed: 2))
            let response = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
            let manifestURL = URL(fileURLWithPath: work.path + "/manifest.json")
            try FileSystem.writeAtomically(response.body, to: manifestURL.path)
            let guide = GuideExtension(Assets: GuideAssets(configuration: try origin.clientConfiguration(), root: work.path + "/group/Library/Caches/assets"))

            // Room for the small pack only: the large one waits, and the log says so and by how much.
            let downloads = try guide.downloads(manifestURL: manifestURL, kind: .install, extensionInfo: BAAppExtensionInfo(restrictedDownloadSizeRemaining: 100_000))
            #expect(downloads.map(\.identifier) == ["logged-small@1"])
            #expect(said("logged-large@1 deferred: over the download allowance by").count == 1, "\(lines.withLock { $0 })")
            #expect(said("notice schedule logged-large@1").count == 1)
            #expect(said("scheduling logged-small@1").first?.hasPrefix("info schedule install event, channel production, manifest version") == true)

            // A delivery that fails its checks: dropped, and the reason is in the log.
            let download = try #require(downloads.first)
            let path = try #require(download.request.url?.path)
            var body = try #require(try RawHTTP.send(port: origin.port, "GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first).body
            body[body.count - 1] ^= 1
            try FileSystem.writeAtomically(body, to: work.path + "/delivered")
            try guide.backgroundDownload(download, finishedWithFileURL: URL(fileURLWithPath: work.path + "/delivered"))
            _ = try guide.Assets.flow().installArrived(languages: ["en"])
            let dropped = said("error install logged-small@1 dropped, planned again at the next event:")
            #expect(dropped.count == 1 && dropped.first?.contains("SHA-256") == true, "\(lines.withLock { $0 })")
        }
    }
}
