import DepotCore
import DepotHTTP
import Foundation

/// What the dashboard (Public/) needs beyond the publishing API: who a pasted token is, an
/// app's settings, and the client configuration an app build embeds (admin only).
struct DashboardHandlers: Sendable {
    let apps: AppStore
    let trust: TrustStore

    /// `GET /v1/session` (any valid bearer token): the app and role the token carries.
    func session(_ context: RequestContext) throws -> HTTPResponse {
        guard let token = context.token else { throw DepotError.missingToken }
        let app = apps.settings(token.app)
        return try Self.private(Session(
            app: token.app, role: token.role.rawValue, tokenID: token.id, expiresAt: token.expiresAt, appExists: app != nil,
            mode: (app?.mode ?? .unmanaged).rawValue
        ))
    }

    /// `GET /v1/apps/{app}` (publisher): the app's settings, without secrets.
    func app(_ context: RequestContext) throws -> HTTPResponse {
        guard let settings = context.settings else { throw DepotError.notFound("app \(context.app)") }
        return try Self.private(Summary(
            app: settings.id, createdAt: settings.createdAt, mode: (settings.mode ?? .unmanaged).rawValue, appGroup: settings.appGroup,
            allowances: settings.allowances, downloadCredentials: settings.downloadCredentials != nil,
            currentPackKey: settings.isManaged ? nil : try apps.packKeys(settings.id).current, trustRules: trust.rules(settings.id)
        ))
    }

    /// `GET /v1/apps/{app}/client-configuration` (admin): what `depot keys export` prints. A
    /// secret (the pack keys), so never stored by a cache.
    func clientConfiguration(_ context: RequestContext) throws -> HTTPResponse {
        var response = HTTPResponse.bytes(try apps.clientConfiguration(context.app).encoded(), contentType: "application/json")
        response.headers.add("Cache-Control", "no-store")
        return response
    }

    private static func `private`(_ value: some Encodable) throws -> HTTPResponse {
        var response = try JSONResponse.make(value, status: 200)
        response.headers.add("Cache-Control", "private, no-store")
        return response
    }

    struct Session: Encodable {
        var app: String
        var role: String
        var tokenID: String
        var expiresAt: Date?
        var appExists: Bool
        var mode: String
    }

    struct Summary: Encodable {
        var app: String
        var createdAt: Date
        var mode: String
        var appGroup: String?
        var allowances: BuildAllowances?
        var downloadCredentials: Bool
        var currentPackKey: String?
        /// Trusted publishing's rules (no secrets in them), shown read-only.
        var trustRules: [TrustRule]
    }
}
