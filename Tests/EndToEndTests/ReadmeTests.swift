import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// Docs that cannot drift: every shell block marked runnable (```` ```sh runnable ````) in the
/// README and the guides runs as written, the README's tour first, against one live origin
/// started as the embedded default (on a free port instead of 8080), and prints what the docs
/// say it prints: each `#   ` line under a command is a line of its output (`…` stands for
/// anything), in order.
@Suite("End to end: the docs' runnable blocks, as a newcomer runs them")
struct ReadmeTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    /// The files with runnable blocks, in the order they run: the README (the tour) first, the
    /// operator's book last (its blocks work on a data folder of their own, with origins they start).
    static let order = ["README.md", "docs/Publishing.md", "docs/Operating.md", "docs/HTTP-API.md", "docs/Integrating.md", "Deploy/README.md"]
    static let marker = "```sh runnable\n"

    /// The runnable blocks of a Markdown text.
    static func runnableBlocks(_ text: String) -> [String] {
        text.components(separatedBy: "\n" + marker).dropFirst().compactMap { $0.components(separatedBy: "\n```").first }
    }

    /// What a block says its commands print: its `#   ` lines, each split at `…`.
    static func expectedLines(_ block: String) -> [[String]] {
        block.split(separator: "\n").filter { $0.hasPrefix("#   ") }.map { $0.dropFirst(4).components(separatedBy: "…") }
    }

    /// Whether `line` holds the pieces in order (the first at its start, the last at its end).
    static func matches(_ line: Substring, _ pieces: [String]) -> Bool {
        guard line.hasPrefix(pieces[0]), line.hasSuffix(pieces[pieces.count - 1]) else { return false }
        var rest = line.dropFirst(pieces[0].count)
        for piece in pieces.dropFirst() where !piece.isEmpty {
            guard let found = rest.range(of: piece) else { return false }
            rest = rest[found.upperBound...]
        }
        return true
    }

    /// The expected lines that the output does not have in order (empty: all of them are there).
    static func missing(_ expected: [[String]], in output: String) -> [String] {
        var lines = output.split(separator: "\n")[...]
        var missing: [String] = []
        for pieces in expected {
            if let at = lines.firstIndex(where: { matches($0.trimmingCharacters(in: .whitespaces)[...], pieces) }) {
                lines = lines[(at + 1)...]
            } else {
                missing.append(pieces.joined(separator: "…"))
            }
        }
        return missing
    }

    @Test("The matching of documented output")
    func matching() {
        #expect(Self.matches("published readme revision 1 (10 bytes, sha256 ab) in release 1 of x", ["published readme revision 1 (", " bytes, sha256 ", ") in release 1 of x"]))
        #expect(!Self.matches("published readme revision 2 (10 bytes) in release 1 of x", ["published readme revision 1 (", ") in release 1 of x"]))
        #expect(Self.missing([["a"], ["c"]], in: "a\nb\nc") == [] && Self.missing([["c"], ["a"]], in: "a\nb\nc") == ["a"])
        #expect(Self.expectedLines("depot x\n#   out … here\n# a comment") == [["out ", " here"]])
    }

    @Test("Every runnable block of the README and the guides runs as written against the embedded default and prints what the docs say; no secret is left in the working copy")
    func runnableBlocks() throws {
        // Every runnable block is in a file this test runs.
        for file in DocsLinkTests.markdownFiles() where !Self.order.contains(file) {
            #expect(!(try String(contentsOfFile: Self.root + "/" + file, encoding: .utf8)).contains(Self.marker), "\(file) has a runnable block this test does not run")
        }
        let work = TemporaryDirectory("depot-readme")
        defer { work.remove() }
        // A clone's working copy, as far as the blocks touch it (the files they publish they make).
        let clone = work.path + "/clone"
        try FileSystem.createDirectory(clone)
        for name in ["README.md", "Package.swift"] { try FileSystem.writeAtomically(FileSystem.readFile(Self.root + "/" + name), to: clone + "/" + name) }
        let given = Set(FileSystem.contents(of: clone))

        // `Deploy/setup.sh serve` is the embedded default: `depot serve` on ./depot-data.
        let server = try ServeProcess(data: clone + "/depot-data", environment: [:])
        #expect(server.token.hasPrefix("dpt_") && server.adminToken.hasPrefix("dpt_"), "the first start prints both tokens")
        let environment = [
            "PATH": FileSystem.directory(of: Processes.depotBinary) + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
            "DEPOT_TOKEN": server.token, "DEPOT_ADMIN_TOKEN": server.adminToken, "XDG_CACHE_HOME": work.path + "/cache", "TMPDIR": work.path,
        ]
        var outputs: [String: String] = [:]
        var ran = 0
        for file in Self.order {
            let blocks = Self.runnableBlocks(try String(contentsOfFile: Self.root + "/" + file, encoding: .utf8))
            if file == "README.md" { #expect(blocks.count == 1, "the tour") }
            guard !blocks.isEmpty else { continue }
            ran += blocks.count
            // A file's blocks in one shell, as a reader types them one after another. An origin a
            // block starts in the background (the operator's restore drill) is stopped by the
            // block; should the block fail first, the shell stops it as it exits.
            let script = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
                + blocks.joined(separator: "\n").replacingOccurrences(of: "127.0.0.1:8080", with: "127.0.0.1:\(server.port)")
            let result = try Processes.run("/bin/bash", ["-euo", "pipefail", "-c", script], environment: environment, cwd: clone)
            #expect(result.status == 0, "\(file): \(result.stdout)\n\(result.stderr)")
            let missing = Self.missing(Self.expectedLines(script), in: result.stdout)
            #expect(missing.isEmpty, "\(file) says its blocks print lines they did not:\n\(missing.joined(separator: "\n"))\n--- they printed:\n\(result.stdout)")
            outputs[file] = result.stdout
        }
        #expect(ran >= 11)

        // The tour's own checks: the installed pack is the file, and inspect described both blobs.
        let tour = outputs["README.md"] ?? ""
        #expect(tour.contains("identical"))
        #expect(tour.components(separatedBy: "== depot-data/blobs/").count == 3, "inspect describes both blobs: \(tour)")
        #expect(tour.contains("pack container v1") && tour.contains("DSSE envelope"))
        // The operator's book: the dev app removed from a folder started with it, the restored
        // backup serving the live keys, and no token on the terminal (they go to files).
        let book = outputs["Deploy/README.md"] ?? ""
        #expect(book.contains("no dev app, no dev token") && book.contains("the restored keys are the ones the app holds"))
        #expect(book.range(of: "dpt_[0-9a-f]{8}", options: .regularExpression) == nil, "the operator's book prints no token: \(book)")
        // Nothing but what the clone had and the data folder (which .gitignore covers): the
        // blocks' secrets (the client configuration) stay outside the working copy.
        #expect(Set(FileSystem.contents(of: clone)) == given.union(["depot-data"]))
        let ignored = try String(contentsOfFile: Self.root + "/.gitignore", encoding: .utf8)
        #expect(ignored.split(separator: "\n").contains("/depot-data/"))
    }
}
