import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// What an adopter meets first on the command line: the version a build is, dropping a pack
/// staged by mistake, and a patched download's progress counted in the patch's bytes.
@Suite("depot --version, depot unstage, a patch's progress")
struct AdopterCLITests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    @Test("depot --version prints the package's one version constant, which is CHANGELOG.md's newest entry")
    func version() throws {
        let printed = try Processes.run(Processes.depotBinary, ["--version"])
        #expect(printed.status == 0 && printed.stdout == AssetDepotVersion.current + "\n", "\(printed.stdout)\(printed.stderr)")
        let changelog = try String(contentsOfFile: Self.root + "/CHANGELOG.md", encoding: .utf8)
        let newest = changelog.split(separator: "\n").first { $0.hasPrefix("## ") && !$0.contains("Unreleased") }
        #expect(newest?.hasPrefix("## \(AssetDepotVersion.current) ") == true, "CHANGELOG.md's newest entry is \(String(describing: newest))")
        #expect(AssetDepotVersion.current.split(separator: ".").count == 3 && AssetDepotVersion.current.split(separator: ".").allSatisfy { Int($0) != nil })
    }

    @Test("depot unstage drops a staged upload (nothing published, the live pack untouched); a pack with nothing staged is a clear error")
    func unstage() async throws {
        try await withServer { origin in
            let depot = Processes.depotBinary
            let common = ["--server", origin.baseURL.absoluteString, "--app", origin.app, "--token", origin.token]
            let work = TemporaryDirectory("depot-unstage")
            defer { work.remove() }
            try put(origin, "level", bytes(3_000, seed: 1))
            try FileSystem.writeAtomically(bytes(3_500, seed: 2), to: work.path + "/level-v2.bin")
            let staged = try Processes.run(depot, ["publish", work.path + "/level-v2.bin", "--pack", "level", "--quiet"] + common, environment: ["XDG_CACHE_HOME": work.path + "/cache"])
            #expect(staged.status == 0, "\(staged.stderr)")

            let dropped = try Processes.run(depot, ["unstage", "--pack", "level"] + common)
            #expect(dropped.status == 0 && dropped.stdout == "the staged change of level was dropped; the live pack is unchanged\n", "\(dropped.stdout)\(dropped.stderr)")
            // The draft is empty: there is nothing to release, and devices keep revision 1.
            let release = try Processes.run(depot, ["release"] + common)
            #expect(release.status == 1 && release.stderr.contains("nothing_staged"), "\(release.stdout)\(release.stderr)")
            try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: work.path + "/client.json")
            let sync = try Processes.run(depot, ["sync", "--config", work.path + "/client.json", "--dest", work.path + "/device", "--quiet", "--server", origin.baseURL.absoluteString, "--app", origin.app])
            #expect(sync.status == 0 && (try? FileSystem.readFile(work.path + "/device/packs/level")) == bytes(3_000, seed: 1), "\(sync.stdout)\(sync.stderr)")

            let again = try Processes.run(depot, ["unstage", "--pack", "level"] + common)
            #expect(again.status == 1 && again.stderr.hasPrefix("Error: unstage failed: HTTP 404"), "\(again.stderr)")
            let invalid = try Processes.run(depot, ["unstage", "--pack", "../x"] + common)
            #expect(invalid.status != 0 && invalid.stderr.contains("invalid pack id"), "\(invalid.stderr)")
        }
    }

    @Test("A patched download's progress counts the patch's bytes, not the whole pack's")
    func patchProgress() async throws {
        try await withServer(configure: { $0.patchDepth = 3 }) { origin in
            let work = TemporaryDirectory("depot-patch-progress")
            defer { work.remove() }
            let v1 = PatchTests.random(8 << 20, seed: 5)
            try put(origin, "level", v1)
            try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: work.path + "/client.json")
            let sync = ["sync", "--config", work.path + "/client.json", "--dest", work.path + "/device", "--server", origin.baseURL.absoluteString, "--app", origin.app]
            #expect(try Processes.run(Processes.depotBinary, sync).status == 0)
            try put(origin, "level", PatchTests.revise(v1, inserted: 50_000, seed: 6))
            origin.server.waitForPatches()
            let updated = try Processes.run(Processes.depotBinary, sync)
            #expect(updated.status == 0 && updated.stdout.contains("1 patched"), "\(updated.stdout)\(updated.stderr)")
            // Not a terminal: a line per tenth, the last one "downloading: 100% (X of Y)" with Y the patch's size.
            let last = try #require(updated.stderr.split(separator: "\n").last { $0.hasPrefix("downloading: ") }, "\(updated.stderr)")
            #expect(last.hasPrefix("downloading: 100% (") && !last.contains("MiB"), "a patch of about 50 KB, not the 8 MiB pack: \(last)")
        }
    }
}
