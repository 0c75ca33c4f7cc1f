import DepotCore
import DepotTestSupport
import Foundation
import Testing

@Suite("End to end: serving and stopping the real binary")
struct ServeLifecycleTests {
    @Test("SIGTERM drains: a download in flight completes, new connections are refused, exit status 0")
    func sigtermDrains() throws {
        let work = TemporaryDirectory("depot-sigterm")
        defer { work.remove() }
        let server = try ServeProcess(data: work.path + "/data", environment: ["DEPOT_DRAIN_TIMEOUT": "300", "DEPOT_MANIFEST_MAX_AGE": "7"])
        let file = try work.file("pack", size: 48 << 20)
        let published = try Processes.run(Processes.depotBinary, ["publish", file, "--server", server.url, "--app", "com.example.dev", "--pack", "big", "--token", server.token, "--release"])
        #expect(published.status == 0, "\(published.stderr)")
        let manifest = try RawHTTP.send(port: UInt16(server.port)!, "GET /v1/apps/com.example.dev/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        #expect(manifest?.header("Cache-Control") == "public, max-age=7, must-revalidate")
        let blob = try #require(FileSystem.contents(of: work.path + "/data/blobs").first.flatMap { FileSystem.contents(of: work.path + "/data/blobs/" + $0).first })

        let total = try #require(FileSystem.fileSize(work.path + "/data/blobs/\(blob.prefix(2))/\(blob)"))

        // The test is the slow client: it reads the start of the response, then stops reading,
        // so the server cannot finish sending until the test resumes.
        let client = try SlowReader(port: UInt16(server.port)!, request: "GET /v1/apps/com.example.dev/blobs/\(blob) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        let head = client.read(atLeast: 64 << 10)
        // From here to the last byte the test never suspends: a task waiting to be resumed on the
        // shared test pool, busy with other suites, could miss the drain's grace period (seen in CI).
        kill(server.process.processIdentifier, SIGTERM)
        #expect(server.waitForOutput("stopping").contains("draining"))
        Thread.sleep(forTimeInterval: 1)
        #expect(server.process.isRunning, "the server must wait for the download in flight")
        #expect(throws: (any Error).self) { try RawHTTP.exchange(port: UInt16(server.port)!, Array("GET /healthz HTTP/1.1\r\n\r\n".utf8), timeout: 1) }
        let received = try head + client.readAll()
        server.process.waitUntilExit()
        #expect(Int64(received) > total, "the whole response (headers and \(total) body bytes) arrives: \(received)")
        #expect(server.process.terminationStatus == 0)
        #expect(server.remainingOutput().contains("stopped"))
        let log = server.errorOutput()
        #expect(log.contains("path=/v1/apps/com.example.dev/blobs/\(blob)") && log.contains("status=200"))
        #expect(!log.contains(server.token))
    }

    @Test("depot plist and depot apps credentials work against the running server")
    func plistAndCredentials() async throws {
        let work = TemporaryDirectory("depot-plist")
        defer { work.remove() }
        let server = try ServeProcess(data: work.path + "/data", environment: ["DEPOT_PUBLIC_URL": "https://edge.example.net"])
        let depot = Processes.depotBinary
        let file = try work.file("pack", size: 12345)
        #expect(try Processes.run(depot, ["publish", file, "--server", server.url, "--app", "com.example.dev", "--pack", "a", "--policy", "essential", "--token", server.token, "--release"]).status == 0)

        let plist = try Processes.run(depot, ["plist", "--server", server.url, "--app", "com.example.dev"])
        #expect(plist.status == 0)
        let parsed = try #require(try PropertyListSerialization.propertyList(from: Data(plist.stdout.utf8), format: nil) as? [String: Any])
        #expect(parsed["BAManifestURL"] as? String == "https://edge.example.net/v1/apps/com.example.dev/manifest")
        #expect(parsed["BAEssentialMaxInstallSize"] as? Int == 12345)

        // The shipped build's allowances, recorded from the plist itself: a bigger essential pack is refused.
        try FileSystem.writeAtomically(Array(plist.stdout.utf8), to: work.path + "/shipped.plist")
        let recorded = try Processes.run(depot, ["apps", "allowances", "com.example.dev", "--from-plist", work.path + "/shipped.plist", "--data", work.path + "/data"])
        #expect(recorded.status == 0 && recorded.stdout.contains("essential install 12345"))
        let bigger = try work.file("bigger", size: 20000)
        let refusedRelease = try Processes.run(depot, ["publish", bigger, "--server", server.url, "--app", "com.example.dev", "--pack", "a", "--policy", "essential", "--token", server.token, "--release"])
        #expect(refusedRelease.status != 0 && refusedRelease.stderr.contains("allowance_exceeded"))
        let forced = try Processes.run(depot, ["publish", bigger, "--server", server.url, "--app", "com.example.dev", "--pack", "a", "--policy", "essential", "--token", server.token, "--release", "--force"])
        #expect(forced.status == 0, "\(forced.stderr)")

        let enabled = try Processes.run(depot, ["apps", "credentials", "com.example.dev", "--enable", "--data", work.path + "/data"])
        #expect(enabled.status == 0)
        let credentials = try #require(enabled.stdout.split(separator: "\n").last.map(String.init))
        let refused = try Processes.run(depot, ["plist", "--server", server.url, "--app", "com.example.dev"])
        #expect(refused.status != 0 && refused.stderr.contains("401"))
        let allowed = try Processes.run(depot, ["plist", "--server", server.url, "--app", "com.example.dev", "--credentials", credentials])
        #expect(allowed.status == 0 && allowed.stdout.contains("BAManifestURL"))
        let busy = try Processes.run(depot, ["gc", "--data", work.path + "/data"])
        #expect(busy.status != 0 && busy.stderr.contains("in use"))
        server.process.terminate()
        server.process.waitUntilExit()
        #expect(server.process.terminationStatus == 0)
        // Offline, nothing is old enough to go: the live release and recent ones keep their blobs.
        let swept = try Processes.run(depot, ["gc", "--data", work.path + "/data", "--dry-run"])
        #expect(swept.status == 0 && swept.stdout.contains("would remove 0 blobs"))
    }

    @Test("The dashboard beside an installed depot (PREFIX/bin/depot, PREFIX/share/assetdepot/Public) is served at / with no option, through a symbolic link on the PATH; without it, serve says so at start and / answers 404")
    func dashboardBesideInstalledBinary() throws {
        let work = TemporaryDirectory("depot-prefix")
        defer { work.remove() }
        // The package's layout under a prefix of the test's: a copy of the built binary (a link
        // would resolve to the build folder), the dashboard copied beside it.
        try FileSystem.createDirectory(work.path + "/usr/bin")
        try FileSystem.createDirectory(work.path + "/usr/share/assetdepot")
        try FileSystem.createDirectory(work.path + "/link")
        try FileSystem.createDirectory(work.path + "/elsewhere")
        try FileManager.default.copyItem(atPath: Processes.depotBinary, toPath: work.path + "/usr/bin/depot")
        try FileManager.default.copyItem(atPath: ReadmeTests.root + "/Public", toPath: work.path + "/usr/share/assetdepot/Public")
        try FileManager.default.createSymbolicLink(atPath: work.path + "/link/depot", withDestinationPath: work.path + "/usr/bin/depot")
        let index = try FileSystem.readFile(ReadmeTests.root + "/Public/index.html")
        // Run from a folder with no ./Public, with DEPOT_PUBLIC_DIR empty (the default).
        let environment = ["DEPOT_PUBLIC_DIR": ""]

        let installed = try ServeProcess(data: work.path + "/data", environment: environment, binary: work.path + "/link/depot", directory: work.path + "/elsewhere")
        #expect(!installed.banner.contains("warning: no dashboard"), "\(installed.banner)")
        let page = try RawHTTP.send(port: UInt16(installed.port)!, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        #expect(page?.status == 200)
        #expect(page?.body == index, "/ answers the bytes of share/assetdepot/Public/index.html")
        let style = try RawHTTP.send(port: UInt16(installed.port)!, "GET /style.css HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        let css = try FileSystem.readFile(ReadmeTests.root + "/Public/style.css")
        #expect(style?.status == 200 && style?.body == css)
        installed.process.terminate()
        installed.process.waitUntilExit()

        // No dashboard anywhere it looks: one warning line naming the places and the option, and 404.
        try FileManager.default.removeItem(atPath: work.path + "/usr/share/assetdepot/Public")
        let bare = try ServeProcess(data: work.path + "/data2", environment: environment, binary: work.path + "/usr/bin/depot", directory: work.path + "/elsewhere")
        let warning = bare.banner.split(separator: "\n").first { $0.hasPrefix("warning: no dashboard") }.map(String.init)
        #expect(warning?.contains(work.path + "/usr/share/assetdepot/Public") == true && warning?.contains("--public-dir") == true, "\(bare.banner)")
        let missing = try RawHTTP.send(port: UInt16(bare.port)!, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        #expect(missing?.status == 404)
        bare.process.terminate()
        bare.process.waitUntilExit()

        // A --public-dir (here DEPOT_PUBLIC_DIR) without an index.html: the same warning, naming it.
        let wrong = try ServeProcess(data: work.path + "/data3", environment: ["DEPOT_PUBLIC_DIR": work.path + "/elsewhere"], directory: work.path + "/elsewhere")
        #expect(wrong.banner.contains("warning: no dashboard: \(work.path)/elsewhere/index.html does not exist"), "\(wrong.banner)")
        wrong.process.terminate()
        wrong.process.waitUntilExit()
    }
}
