import DepotHTTP

/// Checks the credentials a route's ``Access`` asks for: bearer tokens scoped to an app and a
/// role, and an app's optional download credentials (HTTP Basic).
struct Authenticator: Sendable {
    let tokens: TokenStore
    let trust: TrustStore

    /// The token of a request allowed to publish for `app` (with `admin`, to administer it);
    /// with no app, any valid token.
    func bearer(_ request: HTTPRequest, app: String?, admin: Bool) throws -> StoredToken {
        guard let header = request.headers["Authorization"] else { throw DepotError.missingToken }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { throw DepotError.missingToken }
        let token: StoredToken
        switch tokens.check(parts[1].trimmingWhitespace) {
        case .valid(let record): token = record
        case .unknown: throw DepotError.badToken
        case .expired: throw DepotError(.unauthorized, "token_expired", "the bearer token has expired")
        case .revoked: throw DepotError(.unauthorized, "token_revoked", "the bearer token was revoked")
        }
        // A token of trusted publishing lives only as long as the rule that made it.
        if let rule = token.rule, !trust.rules(token.app).contains(where: { $0.id == rule }) {
            throw DepotError(.unauthorized, "token_revoked", "the trust rule that made this token was removed")
        }
        if let app, token.app != app {
            throw DepotError.forbidden("this token is scoped to another app; make one for \(app) with `depot tokens create --app \(app)`")
        }
        guard token.role == .publisher || token.role == .admin else { throw DepotError.forbidden("this token cannot publish") }
        if admin && token.role != .admin {
            throw DepotError.forbidden("this call needs an admin token of the app; make one with `depot tokens create --app \(token.app) --role admin`")
        }
        return token
    }

    /// Checks the app's download credentials, when it has them; returns whether it does (its
    /// answers must then stay out of shared caches).
    /// A bearer token of the app (the dashboard's) is accepted in their place.
    func download(_ request: HTTPRequest, settings: AppSettings) throws -> Bool {
        guard let credentials = settings.downloadCredentials else { return false }
        let header = request.headers["Authorization"]
        if let header, header.utf8.count > 7, header.prefix(7).lowercased() == "bearer " {
            _ = try bearer(request, app: settings.id, admin: false)
            return true
        }
        guard credentials.accepts(header) else { throw DepotError.downloadCredentials(settings.id) }
        return true
    }
}
