import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// A managed app end to end through the command line: `depot apps create --mode managed`,
/// `depot publish --pack-manifest` of ba-package-style archives, and the device simulator
/// (`depot sync --managed --event …`) reading the real origin's download manifest.
@Suite("End to end: managed asset packs")
struct ManagedDeviceTests {
    @Test("Install, update and periodic events: essential and prefetch packs by their events, on-demand when asked, a re-download only when the version rises, deletion when a pack leaves")
    func installUpdatePeriodic() throws {
        let work = TemporaryDirectory("depot-managed")
        defer { work.remove() }
        let data = work.path + "/data"
        let server = try ServeProcess(data: data, environment: [:])
        defer { server.process.terminate(); server.process.waitUntilExit() }
        let depot = Processes.depotBinary
        let app = "com.example.managed"
        let create = try Processes.run(depot, ["apps", "create", app, "--data", data, "--mode", "managed", "--app-group", "group.com.example.managed"])
        #expect(create.status == 0 && create.stdout.contains("managed app"), "\(create.stderr)")
        let refused = try Processes.run(depot, ["apps", "create", "com.example.other", "--data", data, "--mode", "managed"])
        #expect(refused.status != 0 && refused.stderr.contains("--app-group"))
        let tokens = try Processes.run(depot, ["tokens", "create", "--data", data, "--app", app, "--role", "admin"])
        let token = try #require(tokens.stdout.split(separator: "\n").last.map(String.init))
        let environment = ["XDG_CACHE_HOME": work.path + "/cache", "DEPOT_TOKEN": token]
        let common = ["--server", server.url, "--app", app]

        // Three packs as ba-package would be given them: a Manifest.json each.
        func pack(_ id: String, policy: String, events: [String]?, files: [(String, [UInt8])]) throws -> (archive: String, manifest: String) {
            let archive = work.path + "/\(id).aar"
            try FileSystem.writeAtomically(ArchiveFixture.uncompressed(files.map { (path: $0.0, bytes: $0.1) }), to: archive)
            let detail = events.map { #"{"installationEventTypes":[\#($0.map { "\"\($0)\"" }.joined(separator: ","))]}"# } ?? "{}"
            let manifest = work.path + "/\(id).json"
            let json = #"{"assetPackID":"\#(id)","downloadPolicy":{"\#(policy)":\#(detail)},"fileSelectors":[{"directory":"x"}],"platforms":["iOS"],"userInfo":{"kind":"\#(policy)"}}"#
            try FileSystem.writeAtomically(Array(json.utf8), to: manifest)
            return (archive, manifest)
        }
        func publish(_ files: (archive: String, manifest: String)) throws {
            let run = try Processes.run(depot, ["publish", files.archive, "--pack-manifest", files.manifest, "--release", "--quiet"] + common, environment: environment)
            #expect(run.status == 0, "\(run.stderr)")
        }
        try publish(try pack("essentials", policy: "essential", events: ["firstInstallation", "subsequentUpdate"], files: [("a.bin", Array(repeating: 1, count: 3000))]))
        try publish(try pack("intro", policy: "prefetch", events: ["firstInstallation"], files: [("b.bin", Array(repeating: 2, count: 2000))]))
        try publish(try pack("bonus", policy: "onDemand", events: nil, files: [("c.bin", Array(repeating: 3, count: 1000))]))
        let notArchive = work.path + "/plain.bin"
        try FileSystem.writeAtomically(Array(repeating: 0, count: 100), to: notArchive)
        let wrong = try Processes.run(depot, ["publish", notArchive, "--pack", "plain", "--quiet"] + common, environment: environment)
        #expect(wrong.status != 0 && wrong.stderr.contains("Apple Archive"), "\(wrong.stderr)")

        // The unmanaged client refuses the app clearly (its packs are not encrypted for it).
        let keys = try Processes.run(depot, ["keys", "export", "--data", data, "--app", app])
        try FileSystem.writeAtomically(Array(keys.stdout.utf8), to: work.path + "/client.json")
        let unmanaged = try Processes.run(depot, ["sync", "--config", work.path + "/client.json", "--dest", work.path + "/plain", "--quiet"] + common)
        #expect(unmanaged.status != 0 && unmanaged.stderr.contains("managed"), "\(unmanaged.stdout)\(unmanaged.stderr)")

        let device = work.path + "/device"
        func sync(_ event: String, _ extra: [String] = []) throws -> String {
            let run = try Processes.run(depot, ["sync", "--managed", "--event", event, "--dest", device, "--allow-http", "--quiet"] + common + extra, environment: environment)
            #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
            return run.stdout
        }
        // Install: the essential pack, then the prefetch one (first installation); not the on-demand one.
        let install = try sync("install")
        #expect(install.contains("downloaded essentials version 1 (") && install.contains("downloaded intro version 1 ("), "\(install)")
        #expect(!install.contains("bonus"), "\(install)")
        #expect(try FileSystem.readFile(device + "/packs/essentials.aar") == FileSystem.readFile(work.path + "/essentials.aar"))
        #expect(install.contains("managed install: 2 packs held"))

        // Nothing changed: no download. The on-demand pack when asked.
        let quiet = try sync("periodic")
        #expect(!quiet.contains("downloaded"), "\(quiet)")
        #expect(try sync("periodic", ["--pack", "bonus"]).contains("downloaded bonus version 1"))

        // New bytes for essentials (a higher version): the next periodic check fetches them.
        try publish(try pack("essentials", policy: "essential", events: ["firstInstallation", "subsequentUpdate"], files: [("a.bin", Array(repeating: 9, count: 3500))]))
        let periodic = try sync("periodic")
        #expect(periodic.contains("downloaded essentials version 2 (") && !periodic.contains("downloaded intro"), "\(periodic)")
        #expect(try FileSystem.readFile(device + "/packs/essentials.aar") == FileSystem.readFile(work.path + "/essentials.aar"))

        // A pack removed (confirmed) is deleted from the device.
        let target = "/v1/apps/\(app)/packs/intro?release=true"
        let unconfirmed = try RawHTTP.send(port: UInt16(server.port)!, "DELETE \(target) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nConnection: close\r\n\r\n").first
        #expect(unconfirmed?.status == 409)
        let remove = try RawHTTP.send(port: UInt16(server.port)!, "DELETE \(target)&removeLive=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nConnection: close\r\n\r\n").first
        #expect(remove?.status == 201, "\(remove?.bodyText ?? "")")
        let afterRemoval = try sync("update")
        #expect(afterRemoval.contains("deleted intro: it left the download manifest"), "\(afterRemoval)")
        #expect(!FileSystem.exists(device + "/packs/intro.aar"))
        #expect(afterRemoval.contains("device has bonus version 1") && afterRemoval.contains("device has essentials version 2"), "\(afterRemoval)")
    }
}
