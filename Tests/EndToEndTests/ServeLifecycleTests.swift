import DepotCore
import DepotTestSupport
import Foundation
import Testing

@Suite("End to end: serving and stopping the real binary")
struct ServeLifecycleTests {
    @Test("SIGTERM drains: a download in flight completes, new connections are refused, exit status 0")
    func sigtermDrains() async throws {
        let work = TemporaryDirectory("depot-sigterm")
        defer { work.remove() }
        let server = try ServeProcess(data: work.path + "/data", environment: ["DEPOT_DRAIN_TIMEOUT": "30", "DEPOT_MANIFEST_MAX_AGE": "7"])
        let file = try work.file("pack", size: 48 << 20)
        let published = try Processes.run(Processes.depotBinary, ["publish", file, "--server", server.url, "--app", "com.example.dev", "--pack", "big", "--token", server.token])
        #expect(published.status == 0, "\(published.stderr)")
        let manifest = try RawHTTP.send(port: UInt16(server.port)!, "GET /v1/apps/com.example.dev/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        #expect(manifest?.header("Cache-Control") == "public, max-age=7, must-revalidate")
        let blob = try #require(FileSystem.contents(of: work.path + "/data/blobs").first.flatMap { FileSystem.contents(of: work.path + "/data/blobs/" + $0).first })

        // curl, rate-limited, keeps a request in flight for about six seconds.
        let curl = Process()
        curl.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        curl.arguments = ["-sf", "--limit-rate", "8M", "-o", work.path + "/out", "\(server.url)/v1/apps/com.example.dev/blobs/\(blob)"]
        try curl.run()
        // Stop only once the response is flowing, so the request is certainly in flight.
        for _ in 0..<500 where (FileSystem.fileSize(work.path + "/out") ?? 0) == 0 { try await Task.sleep(for: .milliseconds(10)) }
        let total = try #require(FileSystem.fileSize(work.path + "/data/blobs/\(blob.prefix(2))/\(blob)"))
        let atSignal = FileSystem.fileSize(work.path + "/out") ?? 0
        kill(server.process.processIdentifier, SIGTERM)
        #expect(server.waitForOutput("stopping").contains("draining"))
        // The server stays up while the response is sent; libmicrohttpd reports the exchange done
        // once the last byte is in the kernel's socket buffer, so curl may still be reading the
        // tail when the server exits, and loses nothing.
        for _ in 0..<3000 where server.process.isRunning {
            if curl.isRunning {
                #expect(throws: (any Error).self) { try RawHTTP.exchange(port: UInt16(server.port)!, Array("GET /healthz HTTP/1.1\r\n\r\n".utf8), timeout: 1) }
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        let atServerExit = FileSystem.fileSize(work.path + "/out") ?? 0
        #expect(atSignal < total / 2, "the download must still have most of its bytes to go at SIGTERM (\(atSignal) of \(total))")
        #expect(atServerExit > total / 2, "the server must stay up while the response is sent (\(atServerExit) of \(total) at exit)")
        curl.waitUntilExit()
        server.process.waitUntilExit()
        #expect(curl.terminationStatus == 0)
        #expect(FileSystem.fileSize(work.path + "/out") == FileSystem.fileSize(work.path + "/data/blobs/\(blob.prefix(2))/\(blob)"))
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
        #expect(try Processes.run(depot, ["publish", file, "--server", server.url, "--app", "com.example.dev", "--pack", "a", "--policy", "essential", "--token", server.token]).status == 0)

        let plist = try Processes.run(depot, ["plist", "--server", server.url, "--app", "com.example.dev"])
        #expect(plist.status == 0)
        let parsed = try #require(try PropertyListSerialization.propertyList(from: Data(plist.stdout.utf8), format: nil) as? [String: Any])
        #expect(parsed["BAManifestURL"] as? String == "https://edge.example.net/v1/apps/com.example.dev/manifest")
        #expect(parsed["BAEssentialMaxInstallSize"] as? Int == 12345)

        let enabled = try Processes.run(depot, ["apps", "credentials", "com.example.dev", "--enable", "--data", work.path + "/data"])
        #expect(enabled.status == 0)
        let credentials = try #require(enabled.stdout.split(separator: "\n").last.map(String.init))
        let refused = try Processes.run(depot, ["plist", "--server", server.url, "--app", "com.example.dev"])
        #expect(refused.status != 0 && refused.stderr.contains("401"))
        let allowed = try Processes.run(depot, ["plist", "--server", server.url, "--app", "com.example.dev", "--credentials", credentials])
        #expect(allowed.status == 0 && allowed.stdout.contains("BAManifestURL"))
        server.process.terminate()
        server.process.waitUntilExit()
        #expect(server.process.terminationStatus == 0)
    }
}
