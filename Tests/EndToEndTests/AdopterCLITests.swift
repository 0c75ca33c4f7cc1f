import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// What an adopter meets first on the command line: the version a build is, dropping a pack
/// staged by mistake, and a patched download's progress counted in the patch's bytes.
@Suite("depot --version")
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
}
