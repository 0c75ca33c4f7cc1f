import DepotHTTP

/// Who may call a route; the router checks it before the handler runs.
enum Access: Sendable {
    /// Anyone.
    case open
    /// Anyone, unless the app has download credentials (HTTP Basic): then only with them.
    case download
    /// A bearer token of the app, publisher or admin.
    case publisher
    /// A bearer token of the app with the admin role.
    case admin
    /// Any valid bearer token, of whichever app (the handler reads it from the context).
    case token
}

/// A path with literal segments, `:name` parameters and, last, an optional `*` that takes the
/// rest (`/v1/apps/:app/blobs/:sha256`, `/*`).
struct PathPattern: Sendable, CustomStringConvertible {
    enum Segment: Sendable, Equatable {
        case literal(String)
        case parameter(String)
        case rest
    }

    let segments: [Segment]
    let description: String

    init(_ text: String) {
        description = text
        segments = text.split(separator: "/").map { part in
            if part == "*" { return .rest }
            if part.hasPrefix(":") { return .parameter(String(part.dropFirst())) }
            return .literal(String(part))
        }
        precondition(!segments.dropLast().contains(.rest), "* comes last in \(text)")
        isCatchAll = segments.last == .rest
    }

    /// The literal first segment, if any (a catch-all never takes a path under one of these).
    var firstLiteral: String? {
        if case .literal(let value) = segments.first { return value }
        return nil
    }

    let isCatchAll: Bool

    /// The parameters, when `path` matches. The literals are compared first, so that a
    /// mismatch (most routes, for most requests) allocates nothing.
    func match(_ path: [String]) -> PathParameters? {
        if isCatchAll ? path.count < segments.count - 1 : path.count != segments.count { return nil }
        for (index, segment) in segments.enumerated() {
            if case .literal(let value) = segment, path[index] != value { return nil }
        }
        var parameters = PathParameters()
        parameters.pairs.reserveCapacity(segments.count)
        for (index, segment) in segments.enumerated() {
            if case .parameter(let name) = segment { parameters.pairs.append((name, path[index])) }
        }
        return parameters
    }
}

/// A matched route's path parameters, in pattern order. A route has at most three, so a list
/// looked up by name beats a dictionary (no hashing on every request).
struct PathParameters: Sendable, Sequence {
    var pairs: [(name: String, value: String)] = []

    subscript(name: String) -> String? {
        for pair in pairs where pair.name == name { return pair.value }
        return nil
    }

    func makeIterator() -> IndexingIterator<[(name: String, value: String)]> { pairs.makeIterator() }
}

/// One route: the methods it answers, its path, its metrics label, who may call it, and the
/// handler method that answers.
struct Route: Sendable {
    typealias Handler = @Sendable (RequestContext) throws -> HTTPDisposition

    let methods: [String]
    let pattern: PathPattern
    let label: String
    let access: Access
    let handler: Handler
    /// Headers added to every answer of the route, errors included (tus's `Tus-Resumable`).
    var extraHeaders: (@Sendable (inout HTTPResponse) -> Void)?

    /// A route whose handler may read the request body.
    init(_ methods: String, _ pattern: String, label: String, access: Access, receiving handler: @escaping Handler) {
        self.methods = methods.split(separator: ",").map { $0.trimmingWhitespace }
        self.pattern = PathPattern(pattern)
        self.label = label
        self.access = access
        self.handler = handler
    }

    /// A route whose handler answers at once.
    init(_ methods: String, _ pattern: String, label: String, access: Access, _ handler: @escaping @Sendable (RequestContext) throws -> HTTPResponse) {
        self.init(methods, pattern, label: label, access: access, receiving: { .respond(try handler($0)) })
    }

    /// The same route with headers added to all its answers.
    func adding(_ headers: @escaping @Sendable (inout HTTPResponse) -> Void) -> Route {
        var route = self
        route.extraHeaders = headers
        return route
    }
}

extension Substring {
    var trimmingWhitespace: String { String(self).trimmingWhitespace }
}
