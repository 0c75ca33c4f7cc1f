import DepotCore
import DepotHTTP
import Foundation
import Logging

/// App Attest (the app's download access): `POST …/attest/challenges` gives a device a challenge,
/// `POST …/attest/keys` takes its key's attestation over that challenge, verifies it as Apple's
/// "Validating apps that connect to your server" says (``AppAttestVerifier``) and stores the key
/// (``AttestedKeys``). Both are open to any device, so bounded like every open route: a token
/// bucket per client address and one for all before anything else, challenges bounded per
/// address and in all (``AttestChallenges``), a body of at most 16 KiB refused by its declared
/// length before it is read, and the challenge taken before the attestation is parsed. Every
/// refusal is counted (`depot_attest_total`) and logged without the attestation's bytes.
struct AttestHandlers: Sendable {
    let challenges: AttestChallenges
    let keys: AttestedKeys
    let limiter: ReportRateLimiter
    let metrics: OriginMetrics
    let logger: Logger
    /// The anchor attestation chains must end at: Apple's App Attestation root (a test CA in tests).
    let anchor: [UInt8]
    let readOnly: Bool

    /// The largest body `POST …/attest/keys` takes.
    static let maximumBody = 16 << 10

    /// The app's settings, when they say how its keys are attested; else 404 `attestation_not_configured`.
    private static func settings(_ context: RequestContext) throws -> AttestationSettings {
        guard let attestation = context.settings?.attestation else {
            throw DepotError(.notFound, "attestation_not_configured", "app \(context.app) does not take App Attest keys (depot attest configure); send unattested reports")
        }
        return attestation
    }

    private func refuse(_ context: RequestContext, _ route: String, _ error: any Error, result: String) -> any Error {
        metrics.attestation(app: context.app, route: route, result: result)
        return error
    }

    /// A refusal past the buckets: `429 rate_limited` with `Retry-After`.
    private func rateLimited(_ wait: Int, _ what: String) -> HTTPFailure {
        HTTPFailure(status: 429, code: "rate_limited", message: "too many \(what) from your address or in all; try again in \(wait) s", headers: [("Retry-After", "\(wait)")])
    }

    /// `POST …/attest/challenges` → `201 {"challenge": base64 of 32 random bytes, "expiresIn": 300}`.
    func challenge(_ context: RequestContext) throws -> HTTPResponse {
        let address = ReportRateLimiter.key(context.request.clientAddress ?? "")
        if let wait = limiter.take(address: address) { throw refuse(context, "challenge", rateLimited(wait, "attestation requests"), result: "rate_limited") }
        guard !readOnly else { throw refuse(context, "challenge", Self.replica, result: "read_only") }
        do {
            _ = try Self.settings(context)
        } catch {
            throw refuse(context, "challenge", error, result: "not_configured")
        }
        let issued: [UInt8]
        do {
            issued = try challenges.issue(app: context.app, address: address)
        } catch .address(let wait) {
            throw refuse(context, "challenge", HTTPFailure(
                status: 429, code: "too_many_challenges", message: "\(challenges.perAddress) challenges from your address are unused; use one, or try again in \(wait) s",
                headers: [("Retry-After", "\(wait)")]
            ), result: "too_many_challenges")
        } catch .full(let wait) {
            throw refuse(context, "challenge", HTTPFailure(
                status: 503, code: "attest_busy", message: "the origin holds as many challenges as it keeps; try again in \(wait) s", headers: [("Retry-After", "\(wait)")]
            ), result: "busy")
        }
        metrics.attestation(app: context.app, route: "challenge", result: "issued")
        var response = try JSONResponse.make(Challenge(challenge: Data(issued).base64EncodedString(), expiresIn: challenges.lifetimeSeconds), status: 201)
        response.headers.add("Cache-Control", "no-store")
        return response
    }

    struct Challenge: Encodable {
        let challenge: String
        let expiresIn: Int
    }

    static let replica = DepotError.forbidden("this origin is a read-only replica of the bucket: attest keys with the writing origin")

    /// `POST …/attest/keys` with `{"keyId", "challenge", "attestation"}` (base64 each) → `201
    /// {"keyId", "environment"}` once the key is stored durably.
    func attest(_ context: RequestContext) throws -> HTTPDisposition {
        if let length = context.request.contentLength, length > Int64(Self.maximumBody) {
            throw refuse(context, "keys", DepotError.tooLarge(Int64(Self.maximumBody)), result: "too_large")
        }
        if let wait = limiter.take(address: ReportRateLimiter.key(context.request.clientAddress ?? "")) {
            metrics.attestation(app: context.app, route: "keys", result: "rate_limited")
            // The body (at most 16 KiB) is read and dropped, so that the connection stays open: a
            // flood refused by closing would cost the origin a connection per request.
            return .receiveBody(AttestBodyReceiver(limit: Self.maximumBody, metrics: metrics, app: context.app) { _ in
                ErrorResponse.response(for: rateLimited(wait, "attestation requests"))
            })
        }
        guard !readOnly else { throw refuse(context, "keys", Self.replica, result: "read_only") }
        let settings: AttestationSettings
        do {
            settings = try Self.settings(context)
        } catch {
            throw refuse(context, "keys", error, result: "not_configured")
        }
        let app = context.app
        return .receiveBody(AttestBodyReceiver(limit: Self.maximumBody, metrics: metrics, app: app) { body in
            do {
                let key = try accept(body, app: app, settings: settings)
                metrics.attestation(app: app, route: "keys", result: "accepted")
                logger.notice("app attest key accepted", metadata: ["app": .string(app), "key": .string(Data(key.keyID).base64EncodedString()), "environment": .string(key.environment.rawValue)])
                var response = try JSONResponse.make(Attested(keyId: Data(key.keyID).base64EncodedString(), environment: key.environment.rawValue), status: 201)
                response.headers.add("Cache-Control", "no-store")
                return response
            } catch {
                return ErrorResponse.response(for: error)
            }
        })
    }

    struct Attested: Encodable {
        let keyId: String
        let environment: String
    }

    /// The body's shape, the challenge (taken whatever follows), the key id not yet stored, the
    /// attestation verified, the key stored: each refusal counted and logged by its reason.
    private func accept(_ body: [UInt8], app: String, settings: AttestationSettings) throws -> AttestedKey {
        func refused(_ result: String, _ error: DepotError, key: String = "") -> DepotError {
            metrics.attestation(app: app, route: "keys", result: result)
            logger.notice("app attest key refused", metadata: ["app": .string(app), "reason": .string(result), "key": .string(key)])
            return error
        }
        guard let request = AttestRequest(body) else {
            throw refused("invalid", DepotError.badRequest(AttestRequest.shape))
        }
        guard challenges.take(request.challenge, app: app) else {
            throw refused("unknown_challenge", DepotError(.invalid, "unknown_challenge", "the challenge is unknown, used or expired: ask POST /v1/apps/\(app)/attest/challenges for a new one and attest over it"))
        }
        let keyName = Data(request.keyID).base64EncodedString()
        if let stored = try keys.key(app: app, keyID: request.keyID) { throw refused("key_known", AttestedKeys.known(stored), key: keyName) }
        let key: AttestedKey
        do {
            key = try AppAttestVerifier(appID: settings.appID, environment: settings.environment, anchor: anchor)
                .attestation(request.attestation, keyID: request.keyID, clientDataHash: SHA256Hasher.hash(request.challenge), at: Date())
        } catch {
            throw refused(error.check.rawValue, DepotError(.unprocessable, "attestation_refused", "the attestation was refused: \(error.description)"), key: keyName)
        }
        do {
            try keys.store(app: app, key: key, at: WallClock.now())
        } catch let error as DepotError where error.code == "key_known" {
            throw refused("key_known", error, key: keyName)
        }
        return key
    }
}

/// `{"keyId": base64 of 32 bytes, "challenge": base64 of 32 bytes, "attestation": base64}`,
/// nothing else, each name once (``StrictJSON``).
struct AttestRequest {
    let keyID: [UInt8]
    let challenge: [UInt8]
    let attestation: [UInt8]

    static let shape = "the body is JSON {\"keyId\": base64 of the key id's 32 bytes, \"challenge\": base64 of the challenge's 32 bytes, \"attestation\": base64 of the attestation object}, nothing else"

    init?(_ body: [UInt8]) {
        guard let members = try? StrictJSON.object(body), members.count == 3,
              case .string(let keyID)? = members["keyId"], case .string(let challenge)? = members["challenge"], case .string(let attestation)? = members["attestation"],
              let keyBytes = Data(base64Encoded: keyID), keyBytes.count == 32, let challengeBytes = Data(base64Encoded: challenge), challengeBytes.count == 32,
              let object = Data(base64Encoded: attestation), !object.isEmpty, object.count <= AppAttestVerifier.maximumAttestationBytes else { return nil }
        (self.keyID, self.challenge, self.attestation) = (Array(keyBytes), Array(challengeBytes), Array(object))
    }
}

/// Reads a body of at most `limit` bytes (`413` past it, counted), then answers with `answer`.
final class AttestBodyReceiver: HTTPBodyReceiver {
    private let limit: Int
    private let metrics: OriginMetrics
    private let app: String
    private let answer: ([UInt8]) -> HTTPResponse
    private var body: [UInt8] = []

    init(limit: Int, metrics: OriginMetrics, app: String, answer: @escaping ([UInt8]) -> HTTPResponse) {
        (self.limit, self.metrics, self.app, self.answer) = (limit, metrics, app, answer)
    }

    func receive(_ chunk: UnsafeRawBufferPointer) -> HTTPResponse? {
        guard body.count + chunk.count <= limit else {
            body = []
            metrics.attestation(app: app, route: "keys", result: "too_large")
            return ErrorResponse.response(for: DepotError.tooLarge(Int64(limit)))
        }
        body += chunk
        return nil
    }

    func finish() -> HTTPResponse { answer(body) }
    func abort() { body = [] }
}
