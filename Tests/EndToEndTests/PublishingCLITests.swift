import DepotCore
import DepotTestSupport
import Foundation
import Testing

@Suite("End to end: publishing from the command line")
struct PublishingCLITests {
    @Test("depot publish killed mid-upload resumes on the next run; progress lines off a terminal; channels through the CLI")
    func resumeAndChannels() async throws {
        let work = TemporaryDirectory("depot-publish")
        defer { work.remove() }
        // A short connection timeout: the origin notices the killed client's connection sooner.
        let server = try ServeProcess(data: work.path + "/data", environment: ["DEPOT_TIMEOUT": "2"])
        let depot = Processes.depotBinary
        let environment = ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": server.token]
        let file = try work.file("big.bin", size: 200 << 20, seed: 9)
        let arguments = ["publish", file, "--server", server.url, "--app", "com.example.dev", "--pack", "big", "--policy", "essential"]

        // Start a publish and kill it once the origin has stored part of the file.
        let first = Process()
        first.executableURL = URL(fileURLWithPath: depot)
        first.arguments = arguments
        first.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        first.standardOutput = FileHandle.nullDevice
        first.standardError = FileHandle.nullDevice
        try first.run()
        let records = work.path + "/cache/assetdepot/uploads"
        let uploads = work.path + "/data/uploads"
        Eventually.wait(every: .milliseconds(1)) {
            (FileSystem.contents(of: uploads).compactMap { FileSystem.fileSize(uploads + "/" + $0 + "/container") }.max() ?? 0) >= 48 << 20 || !first.isRunning
        }
        kill(first.processIdentifier, SIGKILL)
        first.waitUntilExit()
        #expect(FileSystem.contents(of: records).count == 1, "the killed run left its upload URL")
        let upload = try String(decoding: FileSystem.readFile(records + "/" + FileSystem.contents(of: records)[0]), as: UTF8.self)
        var offset = -1
        try Eventually.wait {
            let head = try RawHTTP.send(port: UInt16(server.port)!, "HEAD \(URL(string: upload)!.path) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(server.token)\r\nTus-Resumable: 1.0.0\r\nConnection: close\r\n\r\n").first
            offset = head?.header("Upload-Offset").flatMap { Int($0) } ?? -1
            return offset > 0
        }
        #expect(offset > 0 && offset < 200 << 20, "the origin kept part of the file: \(offset)")

        // The same command again picks the upload up.
        let second = try Processes.run(depot, arguments, environment: environment)
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.stderr.contains("resuming the upload of big"))
        #expect(second.stderr.contains("uploading big: 100% (200.0 MiB of 200.0 MiB)"))
        #expect(!second.stderr.contains("\r"), "no bar off a terminal")
        // The container: a header, the file, and a 16-byte tag for each of its 200 segments.
        let size = try #require(second.stdout.split(separator: "(").dropFirst().first?.split(separator: " ").first.flatMap { Int64($0) })
        #expect(second.stdout.hasPrefix("staged big (") && (50...60).contains(size - Int64(200 << 20) - 200 * 16), "\(second.stdout)")
        #expect(FileSystem.contents(of: records).isEmpty, "a finished upload forgets its URL")

        // Release it to beta only, promote to production, read the beta Info.plist keys.
        let common = ["--server", server.url, "--app", "com.example.dev"]
        let release = try Processes.run(depot, ["release", "--channel", "beta"] + common, environment: environment)
        #expect(release.stdout == "published release 1 of com.example.dev on channel beta\n", "\(release.stderr)")
        let channels = try Processes.run(depot, ["channels"] + common, environment: environment)
        #expect(channels.stdout == "beta\trelease 1\t\(server.url)/v1/apps/com.example.dev/channels/beta/manifest\n")
        let promote = try Processes.run(depot, ["channels", "promote", "--channel", "production", "--release", "1"] + common, environment: environment)
        #expect(promote.stdout == "production now serves release 1 at \(server.url)/v1/apps/com.example.dev/manifest\n", "\(promote.stderr)")
        let backwards = try Processes.run(depot, ["channels", "promote", "--channel", "beta", "--release", "1"] + common, environment: environment)
        #expect(backwards.stdout == "beta already serves release 1\n")
        let plist = try Processes.run(depot, ["plist", "--channel", "beta"] + common, environment: environment)
        #expect(plist.stdout.contains("/v1/apps/com.example.dev/channels/beta/manifest"))
        let releases = try Processes.run(depot, ["releases"] + common, environment: environment)
        #expect(releases.stdout.hasSuffix("\t1 packs\tbeta, production\n"))
    }
}
