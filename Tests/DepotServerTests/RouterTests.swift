import DepotCore
import DepotHTTP
@testable import DepotServer
import DepotTestSupport
import Foundation
import Synchronization
import Testing

@Suite("Router: the table answers 404, 405 and checks before any handler runs")
struct RouterTests {
    @Test("405 carries Allow with every method of the path; 404 for paths no route has", arguments: [
        ("DELETE", "/v1/apps/com.example.game/manifest", 405, "GET, HEAD"),
        ("PUT", "/v1/apps/com.example.game/releases", 405, "GET, HEAD, POST"),
        ("POST", "/v1/apps/com.example.game/releases/1", 405, "GET, HEAD"),
        ("GET", "/v1/apps/com.example.game/packs/a", 405, "PUT, DELETE"),
        ("PUT", "/v1/apps/com.example.game/uploads", 405, "OPTIONS, POST"),
        ("POST", "/healthz", 405, "GET, HEAD"),
        ("POST", "/index.html", 405, "GET, HEAD"),
        ("GET", "/v1/nothing", 404, ""),
        ("POST", "/v1/apps/com.example.game/nothing", 404, ""),
        ("GET", "/healthz/more", 404, ""),
    ])
    func table(method: String, target: String, status: Int, allow: String) async throws {
        try await withServer { origin in
            let response = try request(origin, method, target, headers: ["Authorization: Bearer \(origin.token)"])
            #expect(response.status == status)
            #expect(response.header("Allow") == (allow.isEmpty ? nil : allow))
            #expect(response.bodyText.hasPrefix("{\"error\":{\"code\":\"\(status == 405 ? "method_not_allowed" : "not_found")\""))
        }
    }

    /// A table of two routes with handlers that record that they ran.
    private func router(_ ran: @escaping @Sendable (String) -> Void, apps: Set<String> = ["com.example.game"]) throws -> (Router, String, TemporaryDirectory) {
        let data = TemporaryDirectory("depot-router")
        let token = try prepareDataFolder(data.path, app: "com.example.game")
        let routes = [
            Route("GET, HEAD", "/v1/apps/:app/blobs/:sha256", label: "blob", access: .download) { context in
                ran(context["sha256"])
                return HTTPResponse(status: 200)
            },
            Route("POST", "/v1/apps/:app/rollback", label: "rollback", access: .admin) { context in
                ran("rollback " + context.app)
                return HTTPResponse(status: 201)
            },
            Route("GET", "/*", label: "static", access: .open) { _ in HTTPResponse(status: 200) },
        ]
        let folder = DataFolder(data.path)
        let router = Router(routes: routes, authenticator: Authenticator(tokens: TokenStore(folder: folder), trust: TrustStore(folder: folder))) { app in
            apps.contains(app) ? AppStore(folder: folder).settings(app) : nil
        }
        return (router, token, data)
    }

    private func dispatch(_ router: Router, _ method: String, _ path: String, headers: [(String, String)] = []) -> HTTPResponse {
        let target = try! RequestTarget.parse(path)
        let request = HTTPRequest(method: method, rawTarget: path, pathSegments: target.segments, headers: HTTPHeaders(headers))
        guard case .respond(let response) = router.dispatch(request) else { Issue.record("a body receiver"); return HTTPResponse(status: 0) }
        return response
    }

    @Test("Parameters, the app and the access are checked before the handler; answers carry the route's label")
    func checksFirst() throws {
        let ran = RanLog()
        let (router, token, data) = try router(ran.add)
        defer { data.remove() }
        let blob = String(repeating: "a", count: 64)
        let ok = dispatch(router, "GET", "/v1/apps/com.example.game/blobs/\(blob)")
        #expect(ok.status == 200 && ok.route == "blob")
        #expect(dispatch(router, "GET", "/v1/apps/com.example.game/blobs/xyz").status == 400)
        #expect(dispatch(router, "GET", "/v1/apps/com..game/blobs/\(blob)").status == 400)
        #expect(dispatch(router, "GET", "/v1/apps/com.example.nope/blobs/\(blob)").status == 404)
        let refused = dispatch(router, "POST", "/v1/apps/com.example.game/rollback", headers: [("Authorization", "Bearer \(token)")])
        #expect(refused.status == 403 && refused.route == "error")
        #expect(dispatch(router, "POST", "/v1/apps/com.example.game/rollback").status == 401)
        let notAllowed = dispatch(router, "DELETE", "/v1/apps/com.example.game/blobs/\(blob)")
        #expect(notAllowed.status == 405 && notAllowed.headers["Allow"] == "GET, HEAD")
        // The catch-all never takes a path under a prefix another route claims.
        #expect(dispatch(router, "GET", "/v1/other").status == 404)
        #expect(dispatch(router, "GET", "/index.html").route == "static")
        #expect(ran.entries == [blob])
        // A 503 the origin gives on purpose (a shed report) is labelled apart from one it suffers
        // (storage unavailable), for the alert on server errors.
        let shed = ErrorResponse.response(for: HTTPFailure(status: 503, code: "reports_busy", message: "busy"))
        let storage = ErrorResponse.response(for: DepotError(.unavailable, "storage_unavailable", "down"))
        #expect(shed.status == 503 && shed.route == "busy" && storage.status == 503 && storage.route == "error")
    }
}

private final class RanLog: Sendable {
    private let log = Mutex<[String]>([])
    var entries: [String] { log.withLock { $0 } }
    func add(_ entry: String) { log.withLock { $0.append(entry) } }
}
