import DepotHTTP

/// What a handler gets: the request, its checked path parameters, and what the router
/// established before calling it (the app's settings, whether download credentials gate it).
struct RequestContext: Sendable {
    let request: HTTPRequest
    /// Path parameters by name, each checked against its rule (``Router/validate(_:)``).
    let parameters: PathParameters
    /// The app named by `:app`, when the route's access looked it up.
    let settings: AppSettings?
    /// Whether the app's download credentials gate the answer (so shared caches must not keep it).
    let gated: Bool
    /// The bearer token the router checked, for routes that need one.
    var token: StoredToken? = nil

    /// A path parameter the route's pattern declares.
    subscript(_ name: String) -> String {
        guard let value = parameters[name] else { preconditionFailure("the route declares no :\(name)") }
        return value
    }

    /// Refuses a token scoped to other channels (a trusted-publishing rule's): `403 channel_not_allowed`.
    func requireChannel(_ channel: String) throws {
        guard let token, !token.allows(channel: channel) else { return }
        throw DepotError(.forbidden, "channel_not_allowed", "this token may act on channel \((token.channels ?? []).joined(separator: ", ")) only, not \(channel)")
    }

    /// The channels the token may act on, nil for every channel.
    var scope: [String]? { token?.channels }

    /// The app id of the path.
    var app: String { self["app"] }

    /// The first value of a query parameter.
    func query(_ name: String) -> String? { request.queryValue(name) }

    /// Whether a query flag is `true`.
    func flag(_ name: String) -> Bool { request.queryValue(name) == "true" }
}
