import DepotCore
import DepotHTTP

/// Dispatches a request through a table of ``Route``s. Before any handler runs, the router
/// answers 404 (no route has the path) and 405 with `Allow` (no route on the path has the
/// method), checks every path parameter, looks the app up, checks the route's ``Access``, and
/// labels the answer for metrics. Handlers only turn a request into a domain call.
struct Router: Sendable {
    let routes: [Route]
    let authenticator: Authenticator
    /// An app's settings, or nil if there is no such app.
    let settings: @Sendable (String) -> AppSettings?
    /// First path segments claimed by a route: a catch-all (`/*`) never takes a path under one.
    private let reserved: Set<String>
    /// A read-only replica: every route that needs a token is refused.
    let readOnly: Bool

    init(routes: [Route], authenticator: Authenticator, settings: @escaping @Sendable (String) -> AppSettings?, readOnly: Bool = false) {
        self.routes = routes
        self.authenticator = authenticator
        self.settings = settings
        self.readOnly = readOnly
        reserved = Set(routes.filter { !$0.pattern.isCatchAll }.compactMap(\.pattern.firstLiteral))
    }

    /// The answer to a request: a response, or a receiver for its body.
    func dispatch(_ request: HTTPRequest) -> HTTPDisposition {
        var decorate: (@Sendable (inout HTTPResponse) -> Void)?
        do {
            // The route is used in place (by index): a copy of a Route retains and releases each
            // of its fields, shared by every server thread, on every request.
            let (index, parameters) = try self.route(for: request)
            decorate = routes[index].extraHeaders
            let context = try admit(request, access: routes[index].access, pattern: routes[index].pattern, parameters: parameters)
            switch try routes[index].handler(context) {
            case .respond(var response):
                response.route = routes[index].label
                decorate?(&response)
                return .respond(response)
            case .receiveBody(let receiver):
                return .receiveBody(LabelledReceiver(receiver, label: routes[index].label, decorate: decorate))
            }
        } catch {
            var response = ErrorResponse.response(for: error)
            decorate?(&response)
            return .respond(response)
        }
    }

    /// The index of the route for the request's path and method, and its parameters: 404 when
    /// no route has the path, 405 (with every method the path has) when none has the method.
    func route(for request: HTTPRequest) throws -> (Int, PathParameters) {
        let path = request.pathSegments
        var allowed: [String] = []
        for index in routes.indices {
            if routes[index].pattern.isCatchAll, let first = path.first, reserved.contains(first) { continue }
            guard let parameters = routes[index].pattern.match(path) else { continue }
            if routes[index].methods.contains(request.method) { return (index, parameters) }
            allowed += routes[index].methods.filter { !allowed.contains($0) }
        }
        guard allowed.isEmpty else { throw HTTPFailure.methodNotAllowed(allowed) }
        throw DepotError.notFound("route \(request.path)")
    }

    /// Checks the parameters and the route's access; returns what the handler gets.
    private func admit(_ request: HTTPRequest, access: Access, pattern: PathPattern, parameters: PathParameters) throws -> RequestContext {
        for (name, value) in parameters { try Self.validate(name, value, parameters) }
        var settings: AppSettings?
        var gated = false
        var token: StoredToken?
        switch access {
        case .open:
            break
        case .download:
            settings = try lookUp(parameters["app"])
            if let settings { gated = try authenticator.download(request, settings: settings) }
        case .publisher, .admin:
            guard !readOnly else {
                throw DepotError.forbidden("this origin is a read-only replica of the bucket: publish through the writing origin")
            }
            guard let app = parameters["app"] else { preconditionFailure("\(pattern) needs :app for token access") }
            token = try authenticator.bearer(request, app: app, admin: access == .admin)
            settings = try lookUp(app)
        case .token:
            token = try authenticator.bearer(request, app: nil, admin: false)
        }
        return RequestContext(request: request, parameters: parameters, settings: settings, gated: gated, token: token)
    }

    private func lookUp(_ app: String?) throws -> AppSettings? {
        guard let app else { return nil }
        guard let found = settings(app) else { throw DepotError.notFound("app \(app)") }
        return found
    }

    /// The rule of each parameter name used in a pattern.
    static func validate(_ name: String, _ value: String, _ parameters: PathParameters) throws {
        switch name {
        case "app":
            guard Identifier.isValidApp(value) else { throw DepotError.invalidID("app id") }
        case "pack":
            guard Identifier.isValidPack(value) else { throw DepotError.invalidID("pack id") }
        case "channel":
            guard Identifier.isValidChannel(value) else { throw DepotError.invalidID("channel") }
        case "sha256":
            guard Hex.isSHA256(value) else { throw DepotError(.invalid, "invalid_hash", "a blob is named by 64 lower-case hex digits") }
        case "release":
            guard ReleaseNumber.parse(value) != nil else {
                throw DepotError(.invalid, "invalid_release", "a release number is a positive decimal integer")
            }
        case "upload":
            guard ResumableUploads.isValidID(value) else { throw DepotError.notFound("upload \(value) of app \(parameters["app"] ?? "")") }
        default:
            preconditionFailure("no rule for the path parameter :\(name)")
        }
    }
}

/// A positive decimal release number of at most fifteen digits (below 2^53: a restored origin's
/// numbers continue from the Unix time, ``ReleaseFloor``), as URLs and queries carry it.
enum ReleaseNumber {
    static func parse(_ text: String) -> Int? {
        guard (1...15).contains(text.utf8.count), text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let value = Int(text), value > 0 else { return nil }
        return value
    }
}

/// A body receiver whose answers carry the route's label and headers.
final class LabelledReceiver: HTTPBodyReceiver {
    private let inner: any HTTPBodyReceiver
    private let label: String
    private let decorate: (@Sendable (inout HTTPResponse) -> Void)?

    init(_ inner: any HTTPBodyReceiver, label: String, decorate: (@Sendable (inout HTTPResponse) -> Void)?) {
        self.inner = inner
        self.label = label
        self.decorate = decorate
    }

    func receive(_ chunk: UnsafeRawBufferPointer) -> HTTPResponse? { inner.receive(chunk).map(labelled) }
    func finish() -> HTTPResponse { labelled(inner.finish()) }
    func finish(trailers: HTTPHeaders) -> HTTPResponse { labelled(inner.finish(trailers: trailers)) }
    func abort() { inner.abort() }

    private func labelled(_ response: HTTPResponse) -> HTTPResponse {
        var response = response
        if response.status < 400 { response.route = label }
        decorate?(&response)
        return response
    }
}
