import Foundation
import Testing

/// Docs that cannot drift: every relative link in every Markdown file and DocC article of the
/// repository names a file that exists, and every `#anchor` a heading (or `<a id>`) of the file
/// it points into, as GitHub renders them.
@Suite("Docs: every relative link and anchor resolves")
struct DocsLinkTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// Every Markdown file of the repository (not `.build`, not hidden folders), relative to the root.
    static func markdownFiles() -> [String] {
        var found: [String] = []
        let manager = FileManager.default
        guard let walker = manager.enumerator(atPath: root) else { return [] }
        while let path = walker.nextObject() as? String {
            let name = (path as NSString).lastPathComponent
            if name.hasPrefix(".") || name == "node_modules" {
                walker.skipDescendants()
                continue
            }
            if path.hasSuffix(".md") { found.append(path) }
        }
        return found.sorted()
    }

    /// A heading's anchor as GitHub makes it: its text as rendered (no backticks, a link's text),
    /// lowercased, every character but letters, digits, marks, `-` and `_` dropped, spaces → `-`.
    static func slug(_ heading: String) -> String {
        var text = heading
        // [text](target) → text
        while let open = text.range(of: "]("), let start = text[..<open.lowerBound].lastIndex(of: "["),
              let close = text[open.upperBound...].firstIndex(of: ")") {
            text = String(text[..<start]) + String(text[text.index(after: start)..<open.lowerBound]) + String(text[text.index(after: close)...])
        }
        var out = ""
        for scalar in text.lowercased().unicodeScalars {
            if scalar == " " {
                out.append("-")
            } else if scalar == "-" || scalar == "_" || scalar.properties.isAlphabetic || scalar.properties.numericType != nil
                || scalar.properties.generalCategory == .nonspacingMark {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// The anchors of a Markdown text: its headings' (outside code fences; a repeated one gets
    /// `-1`, `-2`, as GitHub numbers them) and its `<a id="…">`/`<a name="…">`.
    static func anchors(of text: String) -> Set<String> {
        var anchors: Set<String> = []
        var seen: [String: Int] = [:]
        var fenced = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") { fenced.toggle() }
            guard !fenced, line.hasPrefix("#") else { continue }
            let heading = line.drop { $0 == "#" }
            guard heading.hasPrefix(" ") else { continue }
            let base = slug(heading.trimmingCharacters(in: .whitespaces))
            let count = seen[base, default: 0]
            seen[base] = count + 1
            anchors.insert(count == 0 ? base : "\(base)-\(count)")
        }
        for attribute in ["id=\"", "name=\""] {
            for piece in text.components(separatedBy: "<a " + attribute).dropFirst() {
                if let end = piece.firstIndex(of: "\"") { anchors.insert(String(piece[..<end])) }
            }
        }
        return anchors
    }

    /// The link targets of a Markdown text, outside code (fences and inline code spans):
    /// `[text](target)`, `![alt](target)` and `[label]: target`.
    static func links(in text: String) -> [String] {
        var targets: [String] = []
        var fenced = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") { fenced.toggle() }
            guard !fenced else { continue }
            // Inline code spans out.
            let parts = line.split(separator: "`", omittingEmptySubsequences: false)
            let prose = parts.enumerated().filter { $0.offset % 2 == 0 }.map(\.element).joined(separator: " ")
            for piece in prose.components(separatedBy: "](").dropFirst() {
                guard let end = piece.firstIndex(where: { $0 == ")" || $0 == " " }) else { continue }
                targets.append(String(piece[..<end]))
            }
            let trimmed = prose.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("["), let label = trimmed.range(of: "]: ") {
                targets.append(String(trimmed[label.upperBound...].split(separator: " ").first ?? ""))
            }
        }
        return targets
    }

    @Test("Every relative link of every Markdown file and DocC article names a file that exists, and every anchor a heading there")
    func links() throws {
        let files = Self.markdownFiles()
        #expect(files.contains("README.md") && files.contains("docs/HTTP-API.md") && files.contains("Sources/DepotClient/DepotClient.docc/Integration.md"))
        var anchorsByFile: [String: Set<String>] = [:]
        func anchors(_ path: String) throws -> Set<String> {
            if let known = anchorsByFile[path] { return known }
            let made = Self.anchors(of: try String(contentsOfFile: path, encoding: .utf8))
            anchorsByFile[path] = made
            return made
        }
        var checked = 0
        var broken: [String] = []
        for file in files {
            let path = Self.root + "/" + file
            let text = try String(contentsOfFile: path, encoding: .utf8)
            let folder = (path as NSString).deletingLastPathComponent
            for target in Self.links(in: text) {
                if target.contains("://") || target.hasPrefix("mailto:") || target.hasPrefix("doc:") || target.isEmpty { continue }
                checked += 1
                let (filePart, anchor): (Substring, Substring?) = {
                    guard let hash = target.firstIndex(of: "#") else { return (target[...], nil) }
                    return (target[..<hash], target[target.index(after: hash)...])
                }()
                let destination = filePart.isEmpty ? path : ((folder + "/" + filePart) as NSString).standardizingPath
                guard destination.hasPrefix(Self.root), FileManager.default.fileExists(atPath: destination) else {
                    broken.append("\(file): \(target) (no such file)")
                    continue
                }
                if let anchor, destination.hasSuffix(".md"), !(try anchors(destination)).contains(String(anchor)) {
                    broken.append("\(file): \(target) (no such anchor)")
                }
            }
        }
        #expect(checked > 50, "the links were found (\(checked))")
        #expect(broken.isEmpty, "\(broken.count) broken links:\n\(broken.joined(separator: "\n"))")
    }

    @Test("The anchor rule is GitHub's")
    func slugs() {
        #expect(Self.slug("Trusted publishing from CI (issue 43)") == "trusted-publishing-from-ci-issue-43")
        #expect(Self.slug("`depot serve` options") == "depot-serve-options")
        #expect(Self.slug("Writes: `PUT /v1/apps/{app}/packs/{pack}`") == "writes-put-v1appsapppackspack")
        #expect(Self.slug("Rollouts: `…/rollouts/{channel}[/start|/advance]`") == "rollouts-rolloutschannelstartadvance")
        #expect(Self.slug("Managed asset packs (iOS 26+)") == "managed-asset-packs-ios-26")
        #expect(Self.slug("`depot_http_requests_total`") == "depot_http_requests_total")
        #expect(Self.anchors(of: "# A\n## A\n```\n# B\n```\n<a id=\"x\"></a>") == ["a", "a-1", "x"])
    }
}
