import DepotCore
import DepotHTTP
import Foundation
import Logging

/// `POST /v1/apps/{app}/oidc-token`: trusted publishing's exchange (``TokenExchange``). Open to
/// anyone, so bounded like every open route: a rate per client address before any decoding, and
/// per app and in all once the token could be the app's (``ExchangeLimits``), a token of at most
/// 16 KiB, no fetch but of a rule's issuer, and never a wait on an issuer.
struct TrustHandlers: Sendable {
    let exchange: TokenExchange
    let limits: ExchangeLimits
    let metrics: OriginMetrics
    let logger: Logger
    let readOnly: Bool
    let settings: @Sendable (String) -> AppSettings?

    func exchange(_ context: RequestContext) throws -> HTTPResponse {
        let app = context.app
        if let wait = limits.addresses.take(ReportRateLimiter.key(context.request.clientAddress ?? "")) {
            metrics.oidcExchange(result: "rate_limited")
            throw HTTPFailure(status: 429, code: "rate_limited", message: "too many token exchanges from your address; try again in \(wait) s", headers: [("Retry-After", "\(wait)")])
        }
        guard !readOnly else {
            throw DepotError.forbidden("this origin is a read-only replica of the bucket: exchange tokens with the writing origin")
        }
        guard settings(app) != nil else { throw DepotError.notFound("app \(app)") }
        guard let header = context.request.headers["Authorization"], header.utf8.count > 7, header.prefix(7).lowercased() == "bearer " else {
            metrics.oidcExchange(result: "missing")
            throw HTTPFailure(status: 401, code: "oidc_missing", message: "send the CI job's OIDC token: Authorization: Bearer <JWT>")
        }
        do {
            let minted = try exchange.exchange(app: app, jwt: header.dropFirst(7).drop { $0 == " " }) { [limits] in
                if let wait = limits.apps.take(address: app) {
                    throw HTTPFailure(status: 429, code: "rate_limited", message: "too many token exchanges for app \(app) or in all; try again in \(wait) s", headers: [("Retry-After", "\(wait)")])
                }
            }
            metrics.oidcExchange(result: "issued")
            logger.notice("oidc token issued", metadata: [
                "app": .string(app), "rule": .string(minted.rule.id), "token": .string(minted.record.id),
                "subject": .string(minted.record.subject ?? ""), "jti": .string(minted.record.jwtID ?? ""),
            ])
            var response = try JSONResponse.make(Issued(
                token: minted.token, tokenID: minted.record.id, expiresAt: minted.record.expiresAt ?? WallClock.now(), rule: minted.rule.id,
                app: app, role: minted.record.role.rawValue, channels: minted.record.channels
            ), status: 201)
            response.headers.add("Cache-Control", "no-store")
            return response
        } catch let refusal as OIDCRefusal {
            metrics.oidcExchange(result: refusal.check)
            logger.notice("oidc token refused", metadata: ["app": .string(app), "check": .string(refusal.check)])
            throw HTTPFailure(status: 401, code: "oidc_" + refusal.check, message: refusal.message)
        } catch let failure as HTTPFailure {
            metrics.oidcExchange(result: failure.code)
            throw failure
        }
    }

    struct Issued: Encodable {
        let token: String
        let tokenID: String
        let expiresAt: Date
        let rule: String
        let app: String
        let role: String
        let channels: [String]?
    }
}
