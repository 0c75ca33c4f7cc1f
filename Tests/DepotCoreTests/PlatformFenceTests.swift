import Foundation
import Testing

/// The client modules ship in iOS apps: in DepotCore, DepotTransport and DepotClient, nothing Linux-only may
/// stand outside a Linux branch (`#if canImport(Glibc)` or `#if os(Linux)`), and COpenSSL is
/// imported only by the OpenSSL backend of the crypto API.
@Suite("Platform fences in the modules that ship in apps")
struct PlatformFenceTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let linuxOnly = ["import Glibc", "Glibc.", "renameat2", "MSG_NOSIGNAL", "sendfile", "st_mtim.", "dlsym", "RENAME_EXCHANGE"]
        // iOS 18 / macOS 15 only, above the client's floor (iOS 16.4, macOS 13.3): ``Locked`` instead.
        + ["import Synchronization", "Mutex<", "Mutex(", "Atomic<"]
    static let openSSLBackend = "Sources/DepotCore/Crypto/OpenSSL/"

    /// The Swift files of the three modules, relative to the package.
    static func sources() throws -> [String] {
        var out: [String] = []
        for module in ["Sources/DepotCore", "Sources/DepotTransport", "Sources/DepotClient"] {
            let base = root.appendingPathComponent(module)
            let enumerator = try #require(FileManager.default.enumerator(atPath: base.path))
            for case let path as String in enumerator where path.hasSuffix(".swift") { out.append(module + "/" + path) }
        }
        return out.sorted()
    }

    /// Lines that break a fence: `name:line: text`.
    static func violations(in text: String, file: String) -> [String] {
        var branches = Branches()
        var found: [String] = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if branches.follow(line) || line.hasPrefix("//") { continue }
            let code = line.components(separatedBy: "//").first ?? line
            if code.range(of: #"import\s+COpenSSL"#, options: .regularExpression) != nil && !file.hasPrefix(openSSLBackend) {
                found.append("\(file):\(index + 1): \(line)")
            }
            if linuxOnly.contains(where: code.contains) && !branches.linuxOnly {
                found.append("\(file):\(index + 1): \(line)")
            }
        }
        return found
    }

    @Test("No Linux-only call outside a Linux branch, no COpenSSL outside the OpenSSL backend")
    func fences() throws {
        let files = try Self.sources()
        #expect(files.count > 20)
        var found: [String] = []
        for file in files {
            found += Self.violations(in: try String(contentsOf: Self.root.appendingPathComponent(file), encoding: .utf8), file: file)
        }
        #expect(found.isEmpty, "\(found.joined(separator: "\n"))")
    }

    /// Each C library's module and the one place that may import it.
    static let cFences = [("CMicroHTTPD", "Sources/DepotHTTP/"), ("COpenSSL", openSSLBackend), ("CPKCS11", "Sources/DepotPKCS11/")]

    @Test("Three C libraries, three fences: CMicroHTTPD imported only in DepotHTTP, COpenSSL only in DepotCore's OpenSSL backend, CPKCS11 (PKCS#11 tokens) only in DepotPKCS11, across every module")
    func cLibraryFences() throws {
        let base = Self.root.appendingPathComponent("Sources")
        let enumerator = try #require(FileManager.default.enumerator(atPath: base.path))
        var found: [String] = []
        var seen: [String: Int] = [:]
        for case let path as String in enumerator where path.hasSuffix(".swift") {
            let file = "Sources/" + path
            let text = try String(contentsOf: base.appendingPathComponent(path), encoding: .utf8)
            for (module, home) in Self.cFences where text.range(of: #"(?m)^\s*(@\w+\s+)*(\w+\s+)?import\s+"# + module + #"\b"#, options: .regularExpression) != nil {
                seen[module, default: 0] += 1
                if !file.hasPrefix(home) { found.append("\(file) imports \(module)") }
            }
        }
        #expect(found.isEmpty, "\(found.joined(separator: "\n"))")
        #expect(Self.cFences.allSatisfy { (seen[$0.0] ?? 0) > 0 }, "the check sees each import: \(seen)")
    }

    @Test("The check itself catches what it must", arguments: [
        ("import Glibc\n", 1),
        ("#if canImport(Glibc)\nimport Glibc\n#elseif canImport(Darwin)\nimport Darwin\n#endif\n", 0),
        ("#if canImport(Darwin)\nx\n#else\nlet n = Glibc.send(s, p, c, Int32(MSG_NOSIGNAL))\n#endif\n", 1),
        ("#if os(Linux)\nlet n = sendfile(a, b, &c, d)\n#endif\n", 0),
        ("#if !os(Linux)\nrenameat2(x)\n#endif\n", 1),
        ("internal import COpenSSL\n", 1),
        ("/// sendfile is mentioned in a comment\n", 0),
        ("import Synchronization\nlet m = Mutex<Int>(0)\n", 2),
        ("#if os(Linux)\nimport Synchronization\n#endif\n", 0),
    ])
    func selfCheck(text: String, expected: Int) {
        #expect(Self.violations(in: text, file: "Sources/DepotClient/X.swift").count == expected)
    }

    /// Public types declared only for Linux: in a Linux branch, or in the OpenSSL backend (built
    /// only where CryptoKit is not). A documentation link to one resolves on Linux and breaks on
    /// Apple platforms, where the same catalogs are built too.
    static func linuxOnlyTypes(in text: String, file: String) -> [String] {
        var branches = Branches()
        var names: [String] = []
        let wholeFile = file.hasPrefix(openSSLBackend)
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if branches.follow(line) { continue }
            guard wholeFile || branches.linuxOnly,
                  let match = line.firstMatch(of: #/^public (?:final )?(?:class|struct|enum|protocol|actor) (\w+)/#) else { continue }
            names.append(String(match.1))
        }
        return names
    }

    @Test("Documentation links (DocC articles and doc comments) name no type that exists on Linux only")
    func documentationLinks() throws {
        let files = try Self.sources()
        var linuxOnly: Set<String> = []
        for file in files { linuxOnly.formUnion(Self.linuxOnlyTypes(in: try String(contentsOf: Self.root.appendingPathComponent(file), encoding: .utf8), file: file)) }
        #expect(linuxOnly.isSuperset(of: ["TLSClientContext", "TLSSession", "HTTPConnection"]), "\(linuxOnly.sorted())")
        var documents = files
        for catalog in ["Sources/DepotCore/DepotCore.docc", "Sources/DepotTransport/DepotTransport.docc", "Sources/DepotClient/DepotClient.docc"] {
            let names = try FileManager.default.contentsOfDirectory(atPath: Self.root.appendingPathComponent(catalog).path)
            documents += names.filter { $0.hasSuffix(".md") }.map { catalog + "/" + $0 }
        }
        var found: [String] = []
        for file in documents {
            let text = try String(contentsOf: Self.root.appendingPathComponent(file), encoding: .utf8)
            guard !file.hasPrefix(Self.openSSLBackend) else { continue }  // built on Linux only: may link Linux types
            var branches = Branches()
            for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let line = raw.trimmingCharacters(in: .whitespaces)
                if file.hasSuffix(".swift") {
                    if branches.follow(line) { continue }
                    guard line.hasPrefix("///"), !branches.linuxOnly else { continue }
                }
                for match in line.matches(of: #/``(\w+)/#) where linuxOnly.contains(String(match.1)) {
                    found.append("\(file):\(index + 1): \(line)")
                }
            }
        }
        #expect(found.isEmpty, "\(found.joined(separator: "\n"))")
    }
}

/// The `#if` branches open at a line of Swift, and whether any of them is Linux-only
/// (`canImport(Glibc)` or `os(Linux)`, not negated).
struct Branches {
    private var open: [Bool] = []

    var linuxOnly: Bool { open.contains(true) }

    /// Takes in a trimmed line; true if it was a compiler directive (nothing else to check).
    mutating func follow(_ line: String) -> Bool {
        let linux = { (condition: Substring) in !condition.contains("!") && (condition.contains("canImport(Glibc)") || condition.contains("os(Linux)")) }
        if line.hasPrefix("#if ") { open.append(linux(line.dropFirst(4))); return true }
        if line.hasPrefix("#elseif ") { if !open.isEmpty { open[open.count - 1] = linux(line.dropFirst(8)) }; return true }
        if line.hasPrefix("#else") { if !open.isEmpty { open[open.count - 1] = false }; return true }
        if line.hasPrefix("#endif") { _ = open.popLast(); return true }
        return false
    }
}
