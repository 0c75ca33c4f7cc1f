import BackgroundAssets
import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing

/// The guide's `Assets`, for one test origin.
struct GuideAssets {
    let group = "group.com.example.game"
    let configuration: ClientConfiguration
    let root: String
    var stateFolder: String { root + "/../../Application Support/assets" }
    func flow() throws -> ExtensionFlow {
        try ExtensionFlow(configuration: configuration, destination: root, stateFolder: stateFolder)
    }
}

/// The guide's extension, its lines verbatim.
struct GuideExtension {
    let Assets: GuideAssets

    func kind(for request: BAContentRequest) -> RequestKind {
        // guide: kind
        let kind: RequestKind = switch request {
        case .install: .install
        case .update: .update
        case .periodic: .periodic
        // The iOS 27 SDK adds one case, .languageChange (the person changed the app's
        // language); matched by `default`, this builds with the iOS 26 SDK as well.
        default: .languageChange
        }
        // guide: end
        return kind
    }

    func downloads(manifestURL: URL, kind: RequestKind, extensionInfo: BAAppExtensionInfo, languages: [String] = Locale.preferredLanguages) throws -> Set<BAURLDownload> {
        // A test stands in for the device's languages.
        let Locale = (preferredLanguages: languages, 0)
        // guide: schedule
        let scheduled = try Assets.flow().schedule(
            manifestFile: manifestURL.path, kind: kind,
            allowance: extensionInfo.restrictedDownloadSizeRemaining,
            essentialAllowance: extensionInfo.restrictedEssentialDownloadSizeRemaining,
            languages: Locale.preferredLanguages
        )
        return Set(scheduled.map { download in
            BAURLDownload(
                identifier: download.identifier, request: download.request, essential: download.isEssential,
                fileSize: download.fileSize, applicationGroupIdentifier: Assets.group, priority: .default
            )
        })
        // guide: end
    }

    func backgroundDownload(_ download: BAURLDownload, finishedWithFileURL fileURL: URL) throws {
        // guide: receive
        try Assets.flow().receive(identifier: download.identifier, file: fileURL.path)
        // guide: end
    }
}

@Suite("The Background Assets extension's flow, as the integration guide writes it")
struct ExtensionFlowTests {
    @Test("Verify the delivered manifest, raise the floor, plan the install, schedule exact downloads (not those already scheduled), take in what the system delivers, install it in a separate step")
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
            // The system purges Library/Caches whole: the packs' folder goes, the state stays, and
            // the older manifest is still refused (the floor survived; with the state under the
            // packs it would have been accepted).
            try FileManager.default.removeItem(atPath: work.path + "/group/Library/Caches")
            #expect(throws: ClientError.self) { try guide.downloads(manifestURL: older, kind: .periodic, extensionInfo: BAAppExtensionInfo()) }
            #expect(try guide.Assets.flow().store.read(app: origin.app).manifestVersion == manifest.version)
            // What it scheduled before is noted with the packs, so the purge took the notes too: asked
            // for again (twice rather than never); noted again, and not asked for a third time.
            #expect(try guide.downloads(manifestURL: manifestURL, kind: .periodic, extensionInfo: BAAppExtensionInfo()).count == 3)
            #expect(try guide.downloads(manifestURL: manifestURL, kind: .periodic, extensionInfo: BAAppExtensionInfo()).isEmpty)
            // An install event ignores the notes (nothing the system held before it counts).
            #expect(try guide.downloads(manifestURL: manifestURL, kind: .install, extensionInfo: BAAppExtensionInfo()).count == 3)

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
            // A tampered delivery is taken in (the callback only moves it) and refused by the install step.
            try guide.backgroundDownload(core, finishedWithFileURL: delivered(core, tamper: true))
            let refused = try guide.Assets.flow().installArrived()
            #expect(refused.installed.isEmpty && refused.discarded["core@1"]?.contains("SHA-256") == true, "\(refused)")
            #expect(!FileSystem.exists(guide.Assets.root + "/packs/core") && FileSystem.contents(of: guide.Assets.root + "/.depot/arrived").isEmpty)
            // Delivered and waiting, or handed to the system and not yet delivered: not asked for
            // again (core's delivery was refused: it is). The extension never asks the system.
            let world = try #require(downloads.first { $0.identifier == "world@1" })
            try guide.backgroundDownload(world, finishedWithFileURL: delivered(world))
            #expect(Set(try guide.downloads(manifestURL: manifestURL, kind: .update, extensionInfo: BAAppExtensionInfo()).map(\.identifier)) == ["core@1"])
            // The app learns what the system has (tutorial@1 and core@1 only)... then the system
            // drops tutorial@1 and the app says so: it is asked for at the next event.
            let asked = Date()
            try guide.Assets.flow().noteCurrentDownloads(["tutorial@1", "core@1"], fetchedAt: asked)
            #expect(try guide.downloads(manifestURL: manifestURL, kind: .update, extensionInfo: BAAppExtensionInfo()).isEmpty)
            try guide.Assets.flow().noteCurrentDownloads(["core@1"], fetchedAt: asked.addingTimeInterval(2))
            #expect(Set(try guide.downloads(manifestURL: manifestURL, kind: .update, extensionInfo: BAAppExtensionInfo()).map(\.identifier)) == ["tutorial@1"])
            // A note dated in the future (the clock set back since) counts for nothing.
            let flow = try guide.Assets.flow()
            flow.noteScheduled(["tutorial@1"], now: Date().addingTimeInterval(2 * 86_400))
            #expect(Set(try guide.downloads(manifestURL: manifestURL, kind: .update, extensionInfo: BAAppExtensionInfo()).map(\.identifier)) == ["tutorial@1"])
            for download in downloads where download != world { try guide.backgroundDownload(download, finishedWithFileURL: delivered(download)) }
            #expect(!FileSystem.exists(guide.Assets.root + "/packs/world"), "the callback only moves the file")
            let report = try guide.Assets.flow().installArrived()
            #expect(Set(report.installed) == ["core", "tutorial", "world"] && report.discarded.isEmpty && report.kept.isEmpty, "\(report)")
            for id in ["core", "tutorial", "world"] { #expect(try FileSystem.readFile(guide.Assets.root + "/packs/" + id) == contents[id]) }
            let state = try guide.Assets.flow().store.read(app: origin.app)
            #expect(Set(state.packs.keys) == ["core", "tutorial", "world"] && state.packs.values.allSatisfy { $0.revision == 1 })
            // A download for a revision the manifest no longer lists is dropped by the install step.
            let stale = BAURLDownload(identifier: "core@7", request: core.request, essential: true, fileSize: core.fileSize,
                                      applicationGroupIdentifier: core.applicationGroupIdentifier, priority: .default)
            try guide.backgroundDownload(stale, finishedWithFileURL: delivered(core))
            #expect(try guide.Assets.flow().installArrived().discarded["core@7"] != nil)
            // A name that is no identifier is refused at once, before anything moves.
            let hostile = BAURLDownload(identifier: "../../x@1", request: core.request, essential: false, fileSize: 1, applicationGroupIdentifier: "g", priority: .default)
            let victim = try delivered(core)
            #expect(throws: ClientError.self) { try guide.backgroundDownload(hostile, finishedWithFileURL: victim) }
            #expect(FileSystem.exists(victim.path))
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
        #expect(regions.count == 3)
        #expect(!guide.contains("int64Value"), "BAAppExtensionInfo's restricted sizes are Int? in Swift")
        for region in regions {
            let found = guideLines.indices.contains { start in
                start + region.count <= guideLines.count && Array(guideLines[start..<(start + region.count)]) == region
            }
            #expect(found, "the guide lacks these lines, in this order:\n\(region.joined(separator: "\n"))")
        }
    }
}

@Suite("A delivery the system purged")
struct PurgedDeliveryTests {
    @Test("A delivered file gone before the install step (purged under low storage) is the device's condition: no failure in the report, asked for again at the next event")
    func purgedDelivery() async throws {
        try await withServer(configure: { $0.publicURL = "https://cdn.example.com" }) { origin in
            let work = TemporaryDirectory("depot-purged")
            defer { work.remove() }
            try put(origin, "world", bytes(50_000, seed: 3))
            let response = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
            let manifestURL = URL(fileURLWithPath: work.path + "/manifest.json")
            try FileSystem.writeAtomically(response.body, to: manifestURL.path)
            let guide = GuideExtension(Assets: GuideAssets(configuration: try origin.clientConfiguration(), root: work.path + "/group/Library/Caches/assets"))
            let download = try #require(try guide.downloads(manifestURL: manifestURL, kind: .install, extensionInfo: BAAppExtensionInfo()).first)
            #expect(download.identifier == "world@1")
            let path = try #require(download.request.url?.path)
            let body = try #require(try RawHTTP.send(port: origin.port, "GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first).body
            try FileSystem.writeAtomically(body, to: work.path + "/delivered")
            try guide.backgroundDownload(download, finishedWithFileURL: URL(fileURLWithPath: work.path + "/delivered"))
            // Purged between the step's listing and its opening of the file: a name that leads nowhere.
            let arrived = guide.Assets.root + "/.depot/arrived/world@1"
            FileSystem.remove(arrived)
            #expect(symlink(work.path + "/purged", arrived) == 0)

            let report = try guide.Assets.flow().installArrived(languages: ["en"])
            #expect(report.installed.isEmpty)
            #expect(report.deviceReport == nil, "a purge is not a failure of the release: \(String(describing: report.deviceReport))")
            #expect(report.discarded["world@1"]?.contains("is gone") == true, "\(report.discarded)")
            #expect(!FileSystem.exists(arrived) && (try? FileManager.default.destinationOfSymbolicLink(atPath: arrived)) == nil)
            // Nothing installed, nothing waiting, no note: the next event asks for it again.
            #expect(try guide.downloads(manifestURL: manifestURL, kind: .periodic, extensionInfo: BAAppExtensionInfo()).map(\.identifier) == ["world@1"])
        }
    }

    @Test("The install step's error for a delivered file that is gone is the purged kind, which reports leave out")
    func purgedKind() throws {
        let work = TemporaryDirectory("depot-purged-kind")
        defer { work.remove() }
        let entry = PackEntry(
            id: "world", revision: 1, url: "https://cdn.example.com/world", size: 10, sha256: String(repeating: "a", count: 64), installSize: 10,
            plaintextSHA256: String(repeating: "b", count: 64), policy: .prefetch, tags: [], keyID: "k1", contentType: "application/octet-stream"
        )
        let installer = Installer(keyRing: try KeyRing(["k1": [UInt8](repeating: 7, count: 32)]))
        #expect { try installer.install(entry, from: work.path + "/gone", to: work.path + "/world") } throws: { ($0 as? ClientError)?.kind == .purged }
        #expect(DeviceReport.isDeviceCondition("purged"))
    }
}

@Suite("The install step when the app's background time runs out")
struct SuspendedInstallStepTests {
    @Test("With the state's lock suspended (the expiration handler), the install step records nothing and keeps the delivery; resumed, the next run installs it")
    func keepsTheDelivery() async throws {
        try await withServer(configure: { $0.publicURL = "https://assets.example.com" }) { origin in
            let work = TemporaryDirectory("depot-suspended-step")
            defer { work.remove() }
            let content = bytes(30_000, seed: 9)
            try put(origin, "map", content)
            let response = try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
            let manifestURL = URL(fileURLWithPath: work.path + "/manifest.json")
            try FileSystem.writeAtomically(response.body, to: manifestURL.path)
            let guide = GuideExtension(Assets: GuideAssets(configuration: try origin.clientConfiguration(), root: work.path + "/group/Library/Caches/assets"))
            let download = try #require(try guide.downloads(manifestURL: manifestURL, kind: .install, extensionInfo: BAAppExtensionInfo()).first)
            let path = try #require(download.request.url?.path)
            let body = try #require(try RawHTTP.send(port: origin.port, "GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first).body
            try FileSystem.writeAtomically(body, to: work.path + "/delivered")
            try guide.backgroundDownload(download, finishedWithFileURL: URL(fileURLWithPath: work.path + "/delivered"))

            let store = try guide.Assets.flow().store
            #expect(store.suspendLocking(waitingUpTo: 1))
            let stopped = try guide.Assets.flow().installArrived(languages: ["en"])
            #expect(stopped.installed.isEmpty && stopped.discarded.isEmpty && stopped.kept["map@1"]?.contains("cancelled") == true, "\(stopped)")
            #expect(try store.read(app: origin.app).packs["map"] == nil)
            #expect(try guide.Assets.flow().arrivedIdentifiers() == ["map@1"], "the delivery waits for the next run")

            store.resumeLocking()
            let next = try guide.Assets.flow().installArrived(languages: ["en"])
            #expect(next.installed == ["map"], "\(next)")
            #expect(try FileSystem.readFile(guide.Assets.root + "/packs/map") == content)
        }
    }
}

@Suite("The finished-download callback: constant time and memory")
struct ReceiveTests {
    @Test("A delivered 1 GiB pack is taken in by one rename (the same file, not a copy), whatever its size")
    func receiveIsARename() throws {
        let work = TemporaryDirectory("depot-receive")
        defer { work.remove() }
        let keys = ClientConfiguration(app: "com.example.dev", manifestPublicKeys: [], keyRing: try KeyRing([String: [UInt8]]()))
        let flow = try ExtensionFlow(configuration: keys, destination: work.path + "/group")
        let delivered = work.path + "/delivered"
        let file = try FileDescriptor(path: delivered, flags: O_WRONLY | O_CREAT, mode: 0o600)
        try file.truncate(to: 1 << 30)
        let before = try #require(try FileManager.default.attributesOfItem(atPath: delivered)[.systemFileNumber] as? UInt64)
        let started = ContinuousClock.now
        try flow.receive(identifier: "big@3", file: delivered)
        let took = ContinuousClock.now - started
        print("ReceiveTests: a 1 GiB delivery taken in in \(took)")
        let arrived = work.path + "/group/.depot/arrived/big@3"
        #expect(try FileManager.default.attributesOfItem(atPath: arrived)[.systemFileNumber] as? UInt64 == before, "the same inode: renamed, nothing read or written")
        #expect(!FileSystem.exists(delivered) && FileSystem.fileSize(arrived) == 1 << 30)
        #expect(flow.arrivedIdentifiers() == ["big@3"])
    }

    @Test("Taking in a delivery flushes the drive once (the App Group's folder), not the system's folder too")
    func receiveFlushesOnce() throws {
        let work = TemporaryDirectory("depot-receive-flush")
        defer { work.remove() }
        let keys = ClientConfiguration(app: "com.example.dev", manifestPublicKeys: [], keyRing: try KeyRing([String: [UInt8]]()))
        let flow = try ExtensionFlow(configuration: keys, destination: work.path + "/group")
        try FileSystem.createDirectory(work.path + "/system")
        try FileSystem.writeAtomically(Array(repeating: 9, count: 4096), to: work.path + "/system/delivered")
        let (_, tally) = try SyncTally.measure { try flow.receive(identifier: "small@1", file: work.path + "/system/delivered") }
        #expect(tally[.full] == 1, "\(tally[.full]) full flushes")
        #expect(FileSystem.fileSize(work.path + "/group/.depot/arrived/small@1") == 4096)
    }
}
