import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// Every Swift block of the integration guide is a file of a user's project, compiled as one:
/// each block with its own imports, in the target its first line names (`// File: NAME, in the
/// extension target` / `in the app target` / `a member of both targets`), against `DepotClient`
/// and stand-ins for BackgroundAssets and UIKit declared as Apple's pages declare them — for the
/// iOS 26 SDK's declarations and, with `-D BA_SDK_27`, the iOS 27 SDK's; and each time twice:
/// with the defaults of an existing target (nonisolated) and with Xcode 26's defaults for a new
/// one (`-default-isolation MainActor`, and the upcoming features Approachable Concurrency turns
/// on). Swift 6 language mode, no warning.
@Suite("The integration guide compiles as the files of an Xcode project, against Apple's declarations", .blocking)
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

    /// A block as a file: its name and the targets it is a member of.
    struct File {
        var name: String
        var inApp: Bool
        var inExtension: Bool
        var text: String
    }

    static func files() throws -> [File] {
        try blocks().map { block in
            let first = String(block.prefix { $0 != "\n" })
            #expect(first.hasPrefix("// File: "), "every block names its file and target on its first line: \(first)")
            let name = String(first.dropFirst("// File: ".count).prefix { $0 != "," })
            let both = first.contains("both targets")
            return File(name: name, inApp: both || first.contains("app target"), inExtension: both || first.contains("extension target"), text: block)
        }
    }

    /// Xcode 26's build settings for a new target: main-actor default isolation and Approachable Concurrency.
    static let xcode26Defaults = ["-default-isolation", "MainActor", "-enable-upcoming-feature", "NonisolatedNonsendingByDefault",
                                  "-enable-upcoming-feature", "InferIsolatedConformances"]

    @Test("Each block a file in its target (app, extension, both), for both SDKs, with and without Xcode 26's new-target defaults (MainActor isolation)",
          arguments: ["26", "27"], [false, true])
    func compiles(sdk: String, newTargetDefaults: Bool) throws {
        let files = try Self.files()
        #expect(files.count >= 5, "the guide's blocks: \(files.count)")
        #expect(files.filter(\.inApp).contains { $0.text.contains("installArrived") } && files.filter(\.inApp).contains { $0.text.contains("withExclusiveControl") }, "the app's part is in the guide")
        #expect(!files.filter { $0.inExtension && !$0.inApp }.contains { $0.text.contains("installArrived") }, "the extension never runs the install step")
        // Apple's header: a download manager delegate takes the finished and failed downloads
        // from the extension; the app's delegate hands them to the flow.
        #expect(files.filter(\.inApp).contains { $0.text.contains("BADownloadManagerDelegate") && $0.text.contains(".receive(") && $0.text.contains(".downloadFailed(") },
                "the delegate path is in the app's part")
        // The manager refuses scheduling during downloads(for:) and fetchCurrentDownloads() can block.
        #expect(!files.filter(\.inExtension).contains { $0.text.contains("fetchCurrentDownloads") }, "the extension never asks the manager")
        // App Attest: the app signs its reports, keeping the key's id beside the state; never the
        // extension (generateKey fails there, as Apple's isSupported page says).
        #expect(files.filter(\.inApp).contains { $0.text.contains("reporter.attestation = DCAppAttestService.shared") && $0.text.contains("reporter.stateFolder") },
                "the app's reporter attests")
        #expect(!files.filter(\.inExtension).contains { $0.text.contains("DCAppAttestService") }, "no App Attest in the extension")
        #expect(!files.contains { $0.text.contains("Task.detached") && $0.text.contains("installArrived") } && files.contains { $0.text.contains("Thread {") && $0.text.contains("installArrived") },
                "the install step runs on a thread of its own, not Swift's cooperative pool")
        let work = TemporaryDirectory("depot-guide-\(sdk)-\(newTargetDefaults)")
        defer { work.remove() }
        let modules = Self.root + "/.build/debug/Modules"
        let sdkFlags = sdk == "27" ? ["-D", "BA_SDK_27"] : []
        // The stand-ins, built for this SDK into their own folder (found before the package's).
        for (name, source) in [("BackgroundAssets", "Tests/BackgroundAssets/BackgroundAssets.swift"), ("UIKit", "Tests/UIKit/UIKit.swift"),
                               ("DeviceCheck", "Tests/DeviceCheck/DeviceCheck.swift")] {
            let standIn = try Processes.run("/usr/bin/env", ["swiftc", "-emit-module", "-module-name", name, "-swift-version", "6", "-parse-as-library",
                                                             "-emit-module-path", work.path + "/\(name).swiftmodule", Self.root + "/" + source] + sdkFlags)
            #expect(standIn.status == 0, "\(standIn.stderr)")
        }
        // ZIPFoundation (under DepotCore) brings its C module for zlib (and, on Linux only,
        // DepotCore's OpenSSL backend its own).
        let cModules = ["-Xcc", "-fmodule-map-file=" + Self.root + "/.build/checkouts/ZIPFoundation/Sources/CZLib/module.modulemap",
                        "-Xcc", "-fmodule-map-file=" + Self.root + "/Sources/COpenSSL/module.modulemap"]
        for (target, member) in [("GuideApp", \File.inApp), ("GuideExtension", \File.inExtension)] {
            var paths: [String] = []
            for file in files where file[keyPath: member] {
                try FileSystem.createDirectory(work.path + "/" + target)
                let path = work.path + "/" + target + "/" + file.name
                try FileSystem.writeAtomically(Array(file.text.utf8), to: path)
                paths.append(path)
            }
            if target == "GuideApp" {
                // What DepotClient declares on Apple platforms only (DCAppAttestService is an
                // AppAttesting), which Linux's DepotClient lacks: the same file, in the app's target.
                paths.append(Self.root + "/Sources/DepotClient/AppAttesting+DeviceCheck.swift")
            }
            let flags = ["-swift-version", "6", "-parse-as-library", "-module-name", target, "-D", "DEPOT_DEVICECHECK_STANDIN"] + sdkFlags
                + (newTargetDefaults ? Self.xcode26Defaults : [])
            let checked = try Processes.run("/usr/bin/env", ["swiftc", "-typecheck"] + flags + cModules + ["-I", work.path, "-I", modules] + paths)
            #expect(checked.status == 0, "the guide's \(target) target does not compile (iOS \(sdk) SDK, new-target defaults: \(newTargetDefaults)):\n\(checked.stderr)")
            #expect(!checked.stderr.contains("error:") && !checked.stderr.contains("warning:"), "\(checked.stderr)")
        }
    }

    @Test("Xcode 26's defaults are really in force: a main-actor type called from a detached task fails there and nowhere else")
    func defaultsBite() throws {
        let work = TemporaryDirectory("depot-guide-isolation")
        defer { work.remove() }
        let source = "enum Assets { static func flow() -> Int { 1 } }\nfunc start() { Task.detached { _ = Assets.flow() } }\n"
        try FileSystem.writeAtomically(Array(source.utf8), to: work.path + "/App.swift")
        let base = ["swiftc", "-typecheck", "-swift-version", "6", "-parse-as-library", work.path + "/App.swift"]
        #expect(try Processes.run("/usr/bin/env", base).status == 0)
        let isolated = try Processes.run("/usr/bin/env", base + Self.xcode26Defaults)
        #expect(isolated.status != 0 && isolated.stderr.contains("main actor-isolated"), "\(isolated.stderr)")
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
            func g() { BADownloadManager.shared = BADownloadManager() }
            """
        try FileSystem.writeAtomically(Array(wrong.utf8), to: work.path + "/Wrong.swift")
        let checked = try Processes.run("/usr/bin/env", ["swiftc", "-typecheck", "-swift-version", "6", "-parse-as-library", "-I", Self.root + "/.build/debug/Modules", work.path + "/Wrong.swift"])
        #expect(checked.status != 0)
        #expect(checked.stderr.contains("int64Value"), "Int? has no int64Value: \(checked.stderr)")
        #expect(checked.stderr.contains("withExclusiveControl") || checked.stderr.contains("async"), "the async form is not in the iOS 26 SDK: \(checked.stderr)")
        #expect(checked.stderr.contains("'shared' is a 'let' constant") || checked.stderr.contains("cannot assign"), "shared is get-only: \(checked.stderr)")
    }

    @Test("The DeviceCheck stand-in catches App Attest calls that stray from Apple's declarations")
    func catchesDeviceCheckMistakes() throws {
        let work = TemporaryDirectory("depot-guide-devicecheck")
        defer { work.remove() }
        let wrong = """
            import DeviceCheck
            func f() async throws {
                DCAppAttestService.shared.isSupported = true
                _ = try await DCAppAttestService.shared.attestKey("k", clientDataHash: [UInt8](repeating: 0, count: 32))
            }
            func g() async throws {
                let keyId: String = DCAppAttestService.shared.generateKey()
                _ = keyId
            }
            """
        try FileSystem.writeAtomically(Array(wrong.utf8), to: work.path + "/Wrong.swift")
        let checked = try Processes.run("/usr/bin/env", ["swiftc", "-typecheck", "-swift-version", "6", "-parse-as-library", "-I", Self.root + "/.build/debug/Modules", work.path + "/Wrong.swift"])
        #expect(checked.status != 0)
        #expect(checked.stderr.contains("isSupported") && checked.stderr.contains("get-only"), "isSupported is get-only: \(checked.stderr)")
        #expect(checked.stderr.contains("'Array<UInt8>'") && checked.stderr.contains("'Data'"), "clientDataHash is Data: \(checked.stderr)")
        #expect(checked.stderr.contains("'async' but is not marked with 'await'") && checked.stderr.contains("can throw but is not marked with 'try'"),
                "generateKey's form without a completion handler is async and throws: \(checked.stderr)")
    }
}
