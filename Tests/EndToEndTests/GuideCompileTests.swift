import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// Every Swift block of the integration guide — the extension and the app — compiles against
/// `DepotClient` and the BackgroundAssets stand-in (declared as Apple's pages declare it), for
/// the iOS 26 SDK's declarations and, with `-D BA_SDK_27`, the iOS 27 SDK's; in Swift 6
/// language mode.
@Suite("The integration guide compiles against Apple's declarations")
struct GuideCompileTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// The guide's Swift blocks, in order.
    static func blocks() throws -> [String] {
        let guide = try String(contentsOfFile: root + "/Sources/DepotClient/DepotClient.docc/Integration.md", encoding: .utf8)
        var blocks: [String] = []
        var current: [Substring]?
        for line in guide.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line.hasPrefix("```swift") { current = [] } else if current != nil, line.hasPrefix("```") {
                blocks.append(current!.joined(separator: "\n"))
                current = nil
            } else if current != nil { current!.append(line) }
        }
        return blocks
    }

    /// One source file of the blocks: declarations as they stand (the extension's blocks continue
    /// one another), statements (the app's snippets) each inside a function of their own.
    static func source(_ blocks: [String]) -> String {
        let declarations = ["import ", "@main", "enum ", "struct ", "final class ", "class ", "func ", "    ", "}", "extension ", "//"]
        var out = ""
        for (index, block) in blocks.enumerated() {
            let firstCode = block.split(separator: "\n").first { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") && !$0.isEmpty } ?? ""
            let isStatement = !declarations.contains { firstCode.hasPrefix($0) }
            out += isStatement ? "func guideSnippet\(index)() async throws {\n\(block)\n}\n" : block + "\n"
        }
        return out
    }

    @Test("Both SDKs: the guide's blocks typecheck (swiftc, Swift 6 mode) against DepotClient and the stand-in", arguments: ["26", "27"])
    func compiles(sdk: String) throws {
        let blocks = try Self.blocks()
        #expect(blocks.count >= 5, "the guide's blocks: \(blocks.count)")
        #expect(blocks.contains { $0.contains("installArrived") } && blocks.contains { $0.contains("withExclusiveControl") }, "the app's part is in the guide")
        let work = TemporaryDirectory("depot-guide-\(sdk)")
        defer { work.remove() }
        let modules = Self.root + "/.build/debug/Modules"
        var flags = ["-swift-version", "6", "-parse-as-library", "-module-name", "GuideApp"]
        if sdk == "27" { flags += ["-D", "BA_SDK_27"] }
        // The stand-in, built for this SDK into its own folder (found before the package's).
        let standIn = try Processes.run("/usr/bin/env", ["swiftc", "-emit-module", "-module-name", "BackgroundAssets", "-swift-version", "6", "-parse-as-library",
                                                         "-emit-module-path", work.path + "/BackgroundAssets.swiftmodule", Self.root + "/Tests/BackgroundAssets/BackgroundAssets.swift"]
                                        + (sdk == "27" ? ["-D", "BA_SDK_27"] : []))
        #expect(standIn.status == 0, "\(standIn.stderr)")
        let file = work.path + "/Guide.swift"
        try FileSystem.writeAtomically(Array(Self.source(blocks).utf8), to: file)
        // ZIPFoundation (under DepotCore) brings its C module for zlib.
        // (and, on Linux only, DepotCore's OpenSSL backend its own).
        let zlib = ["-Xcc", "-fmodule-map-file=" + Self.root + "/.build/checkouts/ZIPFoundation/Sources/CZLib/module.modulemap",
                    "-Xcc", "-fmodule-map-file=" + Self.root + "/Sources/COpenSSL/module.modulemap"]
        let checked = try Processes.run("/usr/bin/env", ["swiftc", "-typecheck"] + flags + zlib + ["-I", work.path, "-I", modules, file])
        #expect(checked.status == 0, "the guide does not compile for the iOS \(sdk) SDK:\n\(checked.stderr)")
        #expect(!checked.stderr.contains("error:") && !checked.stderr.contains("warning:"), "\(checked.stderr)")
    }

    @Test("The stand-in catches a guide that strays from Apple's declarations")
    func catchesMistakes() throws {
        let work = TemporaryDirectory("depot-guide-wrong")
        defer { work.remove() }
        let wrong = """
            import BackgroundAssets
            func f(info: BAAppExtensionInfo) async throws {
                let _: Int64? = info.restrictedDownloadSizeRemaining?.int64Value
                try await BADownloadManager.shared.withExclusiveControl { 1 }
            }
            """
        try FileSystem.writeAtomically(Array(wrong.utf8), to: work.path + "/Wrong.swift")
        let checked = try Processes.run("/usr/bin/env", ["swiftc", "-typecheck", "-swift-version", "6", "-parse-as-library", "-I", Self.root + "/.build/debug/Modules", work.path + "/Wrong.swift"])
        #expect(checked.status != 0)
        #expect(checked.stderr.contains("int64Value"), "Int? has no int64Value: \(checked.stderr)")
        #expect(checked.stderr.contains("withExclusiveControl") || checked.stderr.contains("async"), "the async form is not in the iOS 26 SDK: \(checked.stderr)")
    }
}
