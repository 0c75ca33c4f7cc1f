import Foundation
import Testing

/// App Store Connect refuses an upload whose code calls an API of Apple's required-reason list
/// without a reason declared in a privacy manifest (ITMS-91053). The modules an app links
/// (DepotCore, DepotTransport, DepotClient) each ship a `PrivacyInfo.xcprivacy`; this suite scans
/// their sources for the symbols of the list ("Describing use of required reason API", Bundle
/// Resources) and fails when a category is used and not declared, or declared and not used,
/// or declared with a reason Apple does not list for it. It also checks that the integration
/// guide tells an app which categories its own sample code uses.
@Suite("Privacy manifests of the modules an app links")
struct PrivacyManifestTests {
    struct Category {
        var name: String
        /// The list's symbols, as they appear in Swift source.
        var patterns: [String]
        /// The reasons Apple lists for the category.
        var reasons: Set<String>
    }

    static let categories = [
        Category(name: "NSPrivacyAccessedAPICategoryFileTimestamp", patterns: [
            #"\b(stat|lstat|fstat|fstatat|getattrlist|getattrlistbulk|fgetattrlist|getattrlistat)\s*\("#,
            #"\.(creationDate|modificationDate|contentModificationDateKey|creationDateKey)\b"#,
            #"\b(fileModificationDate|fileCreationDate|NSFileCreationDate|NSFileModificationDate)\b"#,
        ], reasons: ["DDA9.1", "C617.1", "3B52.1", "0A2A.1"]),
        Category(name: "NSPrivacyAccessedAPICategorySystemBootTime", patterns: [
            #"\bsystemUptime\b"#, #"\bmach_absolute_time\s*\("#,
        ], reasons: ["35F9.1", "8FFB.1", "3D61.1"]),
        Category(name: "NSPrivacyAccessedAPICategoryDiskSpace", patterns: [
            #"\b(statfs|statvfs|fstatfs|fstatvfs)\s*\("#,
            #"\bvolume(AvailableCapacity|AvailableCapacityForImportantUsage|AvailableCapacityForOpportunisticUsage|TotalCapacity)Key\b"#,
            #"\.(systemFreeSize|systemSize)\b"#, #"\bNSFileSystem(FreeSize|Size)\b"#,
        ], reasons: ["85F4.1", "E174.1", "7D9E.1", "B728.1"]),
        Category(name: "NSPrivacyAccessedAPICategoryActiveKeyboards", patterns: [#"\bactiveInputModes\b"#], reasons: ["3EC4.1", "54BD.1"]),
        Category(name: "NSPrivacyAccessedAPICategoryUserDefaults", patterns: [#"\b(NS)?UserDefaults\b"#], reasons: ["CA92.1", "1C8F.1", "C56D.1", "AC6B.1"]),
    ]

    static let modules = ["DepotCore", "DepotTransport", "DepotClient"]

    /// The categories `text` (Swift) uses, with the first line of each; comments are skipped,
    /// and so are Linux-only branches (they are not in an app's binary).
    static func used(in text: String, file: String) -> [String: String] {
        var found: [String: String] = [:]
        var branches = Branches()
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if branches.follow(line) || line.hasPrefix("//") || branches.linuxOnly { continue }
            let code = line.components(separatedBy: "//").first ?? line
            for category in categories where found[category.name] == nil {
                if category.patterns.contains(where: { code.range(of: $0, options: .regularExpression) != nil }) {
                    found[category.name] = "\(file):\(index + 1): \(line)"
                }
            }
        }
        return found
    }

    /// What a module's manifest declares: category → reasons; and its tracking flag.
    static func declared(_ module: String) throws -> (categories: [String: [String]], tracking: Bool?) {
        let data = try Data(contentsOf: PlatformFenceTests.root.appendingPathComponent("Sources/\(module)/PrivacyInfo.xcprivacy"))
        let plist = try #require(try PropertyListSerialization.propertyList(from: data, format: nil) as? [String: Any])
        let types = try #require(plist["NSPrivacyAccessedAPITypes"] as? [[String: Any]])
        var out: [String: [String]] = [:]
        for type in types {
            let name = try #require(type["NSPrivacyAccessedAPIType"] as? String)
            out[name] = try #require(type["NSPrivacyAccessedAPITypeReasons"] as? [String])
        }
        return (out, plist["NSPrivacyTracking"] as? Bool)
    }

    @Test("Each module's manifest declares exactly the categories its code uses, each with a reason Apple lists for it; no tracking")
    func manifestsMatchTheCode() throws {
        for module in Self.modules {
            var used: [String: String] = [:]
            for file in try PlatformFenceTests.sources() where file.hasPrefix("Sources/\(module)/") {
                let text = try String(contentsOf: PlatformFenceTests.root.appendingPathComponent(file), encoding: .utf8)
                used.merge(Self.used(in: text, file: file)) { first, _ in first }
            }
            let (declared, tracking) = try Self.declared(module)
            #expect(tracking == false, "\(module): NSPrivacyTracking must be present and false")
            for (category, line) in used where declared[category] == nil {
                Issue.record("\(module) uses \(category) (\(line)) and its PrivacyInfo.xcprivacy does not declare it")
            }
            for category in declared.keys where used[category] == nil {
                Issue.record("\(module)'s PrivacyInfo.xcprivacy declares \(category), which its code no longer uses")
            }
            for (name, reasons) in declared {
                let allowed = try #require(Self.categories.first { $0.name == name }, "\(module): unknown category \(name)").reasons
                #expect(!reasons.isEmpty && Set(reasons).isSubset(of: allowed), "\(module): \(name) with reasons \(reasons), Apple lists \(allowed.sorted())")
            }
        }
        // What the code calls today, so that a scanner that silently matches nothing fails too.
        let core = try PlatformFenceTests.sources().filter { $0.hasPrefix("Sources/DepotCore/") }
        let coreUses = try core.reduce(into: Set<String>()) { set, file in
            set.formUnion(Self.used(in: try String(contentsOf: PlatformFenceTests.root.appendingPathComponent(file), encoding: .utf8), file: file).keys)
        }
        #expect(coreUses.contains("NSPrivacyAccessedAPICategoryFileTimestamp"))
    }

    @Test("The scan sees the symbols and skips comments and Linux-only branches", arguments: [
        ("var info = stat()\nguard fstat(fd, &info) == 0 else { return }\n", ["NSPrivacyAccessedAPICategoryFileTimestamp"]),
        ("let d = attributes[.modificationDate] as? Date\n", ["NSPrivacyAccessedAPICategoryFileTimestamp"]),
        ("let on = UserDefaults.standard.bool(forKey: \"x\")\n", ["NSPrivacyAccessedAPICategoryUserDefaults"]),
        ("let t = ProcessInfo.processInfo.systemUptime\n", ["NSPrivacyAccessedAPICategorySystemBootTime"]),
        ("let v = try url.resourceValues(forKeys: [.volumeAvailableCapacityForImportantUsageKey])\n", ["NSPrivacyAccessedAPICategoryDiskSpace"]),
        ("var s = statvfs()\n_ = statvfs(path, &s)\n", ["NSPrivacyAccessedAPICategoryDiskSpace"]),
        ("/// stat(2) is mentioned here\n// lstat(path)\nthrow SystemError(call: \"stat\", errno: ENOENT)\n", []),
        ("#if os(Linux)\nvar info = stat()\n#endif\n", []),
    ])
    func scanner(text: String, expected: [String]) {
        #expect(Set(Self.used(in: text, file: "X.swift").keys) == Set(expected))
    }

    @Test("The integration guide names every category its own sample code uses, for the app's manifest")
    func guideNamesTheAppsCategories() throws {
        let guide = try String(contentsOf: PlatformFenceTests.root.appendingPathComponent("Sources/DepotClient/DepotClient.docc/Integration.md"), encoding: .utf8)
        var code = ""
        var inSwift = false
        for line in guide.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") { inSwift = line.hasPrefix("```swift"); continue }
            if inSwift { code += line + "\n" }
        }
        let used = Self.used(in: code, file: "Integration.md")
        #expect(used.keys.contains("NSPrivacyAccessedAPICategoryUserDefaults"))
        // An app that signs its reports with App Attest sends a per-install key id with each:
        // a device-level identifier, which links the reports, to be declared as collected.
        if code.contains("DCAppAttestService") {
            #expect(guide.contains("`NSPrivacyCollectedDataTypeDeviceID`") && guide.contains("`NSPrivacyCollectedDataTypeLinked`"),
                    "the guide's reporter uses App Attest and its text does not tell the app to declare the key id it sends")
        }
        for category in used.keys {
            #expect(guide.components(separatedBy: "```").enumerated().contains { $0.offset % 2 == 0 && $0.element.contains(category) },
                    "the guide's code uses \(category) and its text does not tell the app to declare it")
        }
    }
}
