import DepotCore
import DepotHTTP

/// An error that reaches a client: an HTTP status, a stable code and a message.
public struct DepotError: Error, Sendable, CustomStringConvertible {
    /// The HTTP status it maps to.
    public let status: Int
    /// A stable machine-readable code (documented in the README).
    public let code: String
    /// A sentence for people.
    public let message: String

    init(_ status: Int, _ code: String, _ message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    public var description: String { message }

    /// The JSON error response.
    var response: HTTPResponse {
        var response = HTTPResponse.error(status: status, code: code, message: message)
        if let challenge { response.headers.add("WWW-Authenticate", challenge) } else if status == 401 {
            response.headers.add("WWW-Authenticate", "Bearer realm=\"assetdepot\"")
        }
        return response
    }

    /// A `WWW-Authenticate` challenge other than the bearer one.
    var challenge: String?

    static func downloadCredentials(_ app: String) -> DepotError {
        var error = DepotError(401, "unauthorized", "app \(app) requires download credentials (HTTP Basic)")
        error.challenge = "Basic realm=\"AssetDepot \(app)\", charset=\"UTF-8\""
        return error
    }

    static func notFound(_ what: String) -> DepotError { DepotError(404, "not_found", "\(what) not found") }
    static func invalidID(_ what: String) -> DepotError {
        DepotError(400, "invalid_id", "invalid \(what): 1–64 (apps: 128) of A-Z a-z 0-9 . -, starting with a letter or digit, no '..'")
    }
    static let missingToken = DepotError(401, "unauthorized", "a bearer token is required (Authorization: Bearer …)")
    static let badToken = DepotError(401, "unauthorized", "the bearer token is not valid")
    static func forbidden(_ why: String) -> DepotError { DepotError(403, "forbidden", why) }
    static func methodNotAllowed(_ allowed: String) -> DepotError { DepotError(405, "method_not_allowed", "allowed methods: \(allowed)") }
    static func tooLarge(_ limit: Int64) -> DepotError { DepotError(413, "too_large", "the body is larger than the limit of \(limit) bytes") }
    static func badRequest(_ why: String) -> DepotError { DepotError(400, "bad_request", why) }
    static func checksumMismatch(expected: String, actual: String) -> DepotError {
        DepotError(400, "checksum_mismatch", "plaintext SHA-256 is \(actual), the request said \(expected); nothing was stored")
    }

    /// Maps a storage failure to what a client should see. A full disk is the client's to retry
    /// later with less, so it gets 413 with its own code; anything else is the server's fault.
    static func storage(_ error: any Error) -> DepotError {
        if let error = error as? DepotError { return error }
        if let system = error as? SystemError, system.isNoSpace {
            return DepotError(413, "insufficient_storage", "the origin's disk is full; nothing was stored")
        }
        return DepotError(500, "storage_error", "the origin could not store the data: \(error)")
    }
}
