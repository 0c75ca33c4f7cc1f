@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// The HTTP API guide's table of every route is the route table itself: made from
/// `Router.originRoutes` of a running origin, and compared with what `docs/HTTP-API.md` holds
/// between its `routes:begin` and `routes:end` markers (`DEPOT_WRITE_DOCS=1` writes it there).
@Suite("Docs: the HTTP API guide lists every route as the route table declares it")
struct RouteDocsTests {
    static let guide = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path + "/docs/HTTP-API.md"
    static let (begin, end) = ("<!-- routes:begin (made from Sources/DepotServer/Routing/OriginRoutes.swift by RouteDocsTests) -->\n", "<!-- routes:end -->")

    /// Open routes whose handler asks for a credential of its own.
    static let ownChecks = [
        "metrics": "the metrics token, checked by the route (`401`; `404` when metrics are off)",
        "oidc-token": "a CI job's OIDC token, checked by the route (`401 oidc_…`)",
    ]

    static func access(_ access: Access, label: String) -> String {
        if access == .open, let own = ownChecks[label] { return own }
        return switch access {
        case .open: "anyone"
        case .download: "anyone; with the app's download credentials when it has them (`401`)"
        case .publisher: "a bearer token of the app, publisher or admin (`401`, `403`)"
        case .admin: "a bearer token of the app with the admin role (`401`, `403`)"
        case .token: "any valid bearer token, of whichever app (`401`)"
        }
    }

    /// The Markdown table of `routes`, in the table's order.
    static func table(_ routes: [Route]) -> String {
        var lines = ["| methods | path | who may call it | metrics `route` |", "| --- | --- | --- | --- |"]
        for route in routes {
            let path = route.pattern.segments.map { segment in
                switch segment {
                case .literal(let text): text
                case .parameter(let name): "{\(name)}"
                case .rest: "{file…}"
                }
            }.joined(separator: "/")
            lines.append("| \(route.methods.joined(separator: ", ")) | `/\(path)` | \(access(route.access, label: route.label)) | `\(route.label)` |")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    @Test("docs/HTTP-API.md's table of routes is the one the origin serves")
    func table() async throws {
        try await withServer { origin in
            let generated = Self.table(origin.server.origin.router.routes)
            var text = try String(contentsOfFile: Self.guide, encoding: .utf8)
            let start = try #require(text.range(of: Self.begin), "docs/HTTP-API.md has the markers")
            let stop = try #require(text.range(of: Self.end, range: start.upperBound..<text.endIndex))
            let documented = String(text[start.upperBound..<stop.lowerBound])
            if documented != generated, ProcessInfo.processInfo.environment["DEPOT_WRITE_DOCS"] == "1" {
                text.replaceSubrange(start.upperBound..<stop.lowerBound, with: generated)
                try text.write(toFile: Self.guide, atomically: true, encoding: .utf8)
                return
            }
            #expect(documented == generated, "docs/HTTP-API.md lists other routes than the route table (DEPOT_WRITE_DOCS=1 rewrites it):\n\(generated)")
            #expect(generated.split(separator: "\n").count == origin.server.origin.router.routes.count + 2)
        }
    }
}
