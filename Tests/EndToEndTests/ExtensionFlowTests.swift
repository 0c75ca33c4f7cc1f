import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing

// Stand-ins with the shapes of the BackgroundAssets API that the integration guide uses, which
// Linux lacks, so that the guide's own lines (between the `guide:` markers) compile and run here.
struct BADownloaderPriority: Hashable { static let `default` = BADownloaderPriority() }
struct BAURLDownload: Hashable {
    let identifier: String
    let request: URLRequest
    let isEssential: Bool
    let fileSize: Int
    let applicationGroupIdentifier: String
    init(identifier: String, request: URLRequest, essential: Bool, fileSize: Int, applicationGroupIdentifier: String, priority: BADownloaderPriority) {
        (self.identifier, self.request, isEssential, self.fileSize, self.applicationGroupIdentifier) =
            (identifier, request, essential, fileSize, applicationGroupIdentifier)
    }
}
struct BAAppExtensionInfo {
    var restrictedDownloadSizeRemaining: NSNumber?
    var restrictedEssentialDownloadSizeRemaining: NSNumber?
}

/// The guide's `Assets`, for one test origin.
struct GuideAssets {
    let group = "group.com.example.game"
    let configuration: ClientConfiguration
    let root: String
    func flow() throws -> ExtensionFlow { try ExtensionFlow(configuration: configuration, destination: root) }
}

/// The guide's extension, its lines verbatim.
struct GuideExtension {
    let Assets: GuideAssets

    func downloads(manifestURL: URL, kind: RequestKind, extensionInfo: BAAppExtensionInfo) throws -> Set<BAURLDownload> {
        // guide: schedule
        let scheduled = try Assets.flow().schedule(
            manifestFile: manifestURL.path, kind: kind,
            allowance: extensionInfo.restrictedDownloadSizeRemaining?.int64Value,
            essentialAllowance: extensionInfo.restrictedEssentialDownloadSizeRemaining?.int64Value
        )
        return Set(scheduled.map { download in
            BAURLDownload(
                identifier: download.identifier, request: URLRequest(url: download.url), essential: download.isEssential,
                fileSize: download.fileSize, applicationGroupIdentifier: Assets.group, priority: .default
            )
        })
        // guide: end
    }

    func backgroundDownload(_ download: BAURLDownload, finishedWithFileURL fileURL: URL) throws {
        // guide: install
        try Assets.flow().install(identifier: download.identifier, file: fileURL.path)
        // guide: end
    }
}

@Suite("The Background Assets extension's flow, as the integration guide writes it")
struct ExtensionFlowTests {
    @Test("Verify the delivered manifest, raise the floor, plan the install, schedule exact downloads, install what the system delivers")
    func extensionFlow() async throws {
        try await withServer(configure: { $0.publicURL = "https://cdn.example.com" }) { origin in
            let work = TemporaryDirectory("depot-extension")
            defer { work.remove() }
            let contents = ["core": bytes(300_000, seed: 1), "tutorial": bytes(40_000, seed: 2), "world": bytes(900_000, seed: 3), "extras": bytes(10_000, seed: 4)]
            try put(origin, "core", contents["core"]!, policy: "essential")
            try put(origin, "tutorial", contents["tutorial"]!, policy: "essential")
            try put(origin, "world", contents["world"]!)
            try put(origin, "extras", contents["extras"]!, policy: "onDemand")
            // What the system fetched from BAManifestURL and hands the extension: a local file.
            func envelope(_ path: String) throws -> URL {
                let response = try #require(try RawHTTP.send(port: origin.port, "GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
                #expect(response.status == 200)
                let file = URL(fileURLWithPath: work.path + "/manifest-\(response.body.count).json")
                try FileSystem.writeAtomically(response.body, to: file.path)
                return file
            }
            let manifestURL = try envelope("/v1/apps/\(origin.app)/manifest")
            let manifest = try Envelope.decode(FileSystem.readFile(manifestURL.path)).verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())
            let guide = GuideExtension(Assets: GuideAssets(configuration: try origin.clientConfiguration(), root: work.path + "/group/Library/Caches/assets"))

            let downloads = try guide.downloads(manifestURL: manifestURL, kind: .install, extensionInfo: BAAppExtensionInfo())
            #expect(Set(downloads.map(\.identifier)) == ["core@1", "tutorial@1", "world@1"])
            for download in downloads {
                let entry = try #require(manifest[pack: String(download.identifier.prefix { $0 != "@" })])
                #expect(download.request.url?.absoluteString == entry.url && download.request.url?.scheme == "https")
                #expect(download.fileSize == Int(entry.size) && download.isEssential == (entry.policy == .essential))
                #expect(download.applicationGroupIdentifier == "group.com.example.game")
            }
            // The floor was raised under the lock: an older manifest is refused from now on.
            #expect(try guide.Assets.flow().store.read(app: origin.app).manifestVersion == manifest.version)
            let older = try envelope("/v1/apps/\(origin.app)/releases/1")
            #expect(throws: ClientError.self) { try guide.downloads(manifestURL: older, kind: .periodic, extensionInfo: BAAppExtensionInfo()) }

            // The system delivers each file; the extension installs it before the callback returns.
            func delivered(_ download: BAURLDownload, tamper: Bool = false) throws -> URL {
                let path = try #require(download.request.url?.path)
                var body = try #require(try RawHTTP.send(port: origin.port, "GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first).body
                if tamper { body[body.count - 1] ^= 1 }
                let file = URL(fileURLWithPath: work.path + "/delivered-\(download.identifier)")
                try FileSystem.writeAtomically(body, to: file.path)
                return file
            }
            let core = try #require(downloads.first { $0.identifier == "core@1" })
            #expect(throws: ClientError.self) { try guide.backgroundDownload(core, finishedWithFileURL: delivered(core, tamper: true)) }
            #expect(!FileSystem.exists(guide.Assets.root + "/packs/core"))
            for download in downloads { try guide.backgroundDownload(download, finishedWithFileURL: delivered(download)) }
            for id in ["core", "tutorial", "world"] { #expect(try FileSystem.readFile(guide.Assets.root + "/packs/" + id) == contents[id]) }
            let state = try guide.Assets.flow().store.read(app: origin.app)
            #expect(Set(state.packs.keys) == ["core", "tutorial", "world"] && state.packs.values.allSatisfy { $0.revision == 1 })
            // A download for a revision the manifest no longer lists is refused.
            let stale = BAURLDownload(identifier: "core@7", request: core.request, essential: true, fileSize: core.fileSize,
                                      applicationGroupIdentifier: core.applicationGroupIdentifier, priority: .default)
            #expect(throws: ClientError.self) { try guide.backgroundDownload(stale, finishedWithFileURL: delivered(core)) }
            // Nothing left to schedule on the next event.
            #expect(try guide.downloads(manifestURL: manifestURL, kind: .periodic, extensionInfo: BAAppExtensionInfo()).isEmpty)
        }
    }

    @Test("The guide's code is the code this test runs, line for line")
    func guideMatches() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let guide = try String(contentsOf: root.appendingPathComponent("Sources/DepotClient/DepotClient.docc/Integration.md"), encoding: .utf8)
        let test = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        let guideLines = guide.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        var regions: [[String]] = []
        var current: [String]?
        for line in test.split(separator: "\n").map({ $0.trimmingCharacters(in: .whitespaces) }) {
            if line == "// guide: end" { regions.append(current ?? []); current = nil } else if line.hasPrefix("// guide: ") { current = [] } else if current != nil { current!.append(line) }
        }
        #expect(regions.count == 2)
        for region in regions {
            let found = guideLines.indices.contains { start in
                start + region.count <= guideLines.count && Array(guideLines[start..<(start + region.count)]) == region
            }
            #expect(found, "the guide lacks these lines, in this order:\n\(region.joined(separator: "\n"))")
        }
    }
}
