import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// The README's shell blocks, run as written (the origin on a free port instead of 8080).
@Suite("End to end: the README, as a newcomer runs it")
struct ReadmeTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// The `sh` blocks of the README section that starts with `heading`.
    static func blocks(under heading: String) throws -> [String] {
        let readme = try String(contentsOfFile: root + "/README.md", encoding: .utf8)
        let start = try #require(readme.range(of: "\n" + heading + "\n"))
        let rest = readme[start.upperBound...]
        let section = rest[..<(rest.range(of: "\n## ")?.lowerBound ?? rest.endIndex)]
        return section.components(separatedBy: "```sh\n").dropFirst().compactMap { $0.components(separatedBy: "\n```").first }
    }

    @Test("The tour and the publishing workflow run as written after the embedded default's first start; no secret is left in the working copy")
    func tourAndWorkflow() throws {
        let work = TemporaryDirectory("depot-readme")
        defer { work.remove() }
        // A clone's working copy, as far as the tour touches it.
        let clone = work.path + "/clone"
        try FileSystem.createDirectory(clone)
        for name in ["README.md", "Package.swift"] { try FileSystem.writeAtomically(FileSystem.readFile(Self.root + "/" + name), to: clone + "/" + name) }
        // `Deploy/setup.sh serve` is the embedded default: `depot serve` on ./depot-data.
        let server = try ServeProcess(data: clone + "/depot-data", environment: [:])
        #expect(server.token.hasPrefix("dpt_") && server.adminToken.hasPrefix("dpt_"), "the first start prints both tokens")
        let environment = [
            "PATH": FileSystem.directory(of: Processes.depotBinary) + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
            "DEPOT_TOKEN": server.token, "DEPOT_ADMIN_TOKEN": server.adminToken, "XDG_CACHE_HOME": work.path + "/cache", "TMPDIR": work.path,
        ]
        func run(_ script: String) throws -> Processes.Result {
            let text = script.replacingOccurrences(of: "127.0.0.1:8080", with: "127.0.0.1:\(server.port)")
            return try Processes.run("/bin/bash", ["-euo", "pipefail", "-c", text], environment: environment, cwd: clone)
        }

        let tour = try Self.blocks(under: "## A five-minute tour")
        #expect(tour.count == 2)
        let toured = try run(tour[1])
        #expect(toured.status == 0, "\(toured.stderr)")
        #expect(toured.stdout.contains("identical"))
        #expect(toured.stdout.contains("published package revision 1"))
        #expect(toured.stdout.components(separatedBy: "== depot-data/blobs/").count == 3, "inspect describes both blobs: \(toured.stdout)")
        #expect(toured.stdout.contains("pack container v1") && toured.stdout.contains("DSSE envelope"))
        // Nothing but what the clone had (and the data folder, which .gitignore covers).
        #expect(FileSystem.contents(of: clone) == ["Package.swift", "README.md", "depot-data"])
        let ignored = try String(contentsOfFile: Self.root + "/.gitignore", encoding: .utf8)
        #expect(ignored.split(separator: "\n").contains("/depot-data/"))

        // The workflow, with the files a content team would have.
        let zip = "import sys, zipfile\nwith zipfile.ZipFile(sys.argv[1], 'w') as z: z.writestr('level/data.bin', b'x' * 5000)\n"
        for name in ["level-1.zip", "level-9.zip"] {
            #expect(try Processes.run("/usr/bin/python3", ["-c", zip, clone + "/" + name]).status == 0)
        }
        try FileSystem.writeAtomically([UInt8](repeating: 7, count: 30_000), to: clone + "/intro.mp4")
        let workflow = try Self.blocks(under: "### Publishing workflow")
        #expect(workflow.count == 2)
        let published = try run(workflow.joined(separator: "\n"))
        #expect(published.status == 0, "\(published.stdout)\n\(published.stderr)")
        #expect(published.stdout.contains("release 3") && published.stdout.contains("release 4"), "\(published.stdout)")
        #expect(published.stdout.contains("/channels/beta/manifest"))
    }
}
