import DepotCore

/// Why an operation on the origin's data was refused or failed: what kind of failure it is,
/// a stable machine-readable code (documented in docs/HTTP-API.md) and a sentence for people.
///
/// The stores and the ``Publisher`` throw it and know nothing of HTTP; the HTTP layer turns
/// it into a status in one place (``ErrorResponse``).
public struct DepotError: Error, Sendable, CustomStringConvertible {
    /// The kinds of failure, each answered the same way whatever raised it.
    public enum Kind: Sendable, Hashable {
        /// A value the caller gave is malformed or out of range.
        case invalid
        /// No credentials, or credentials that are not valid.
        case unauthorized
        /// Valid credentials that do not allow this.
        case forbidden
        case notFound
        /// The state does not allow it now (a race, a live pack, a channel that only moves forward).
        case conflict
        /// It existed and has expired.
        case gone
        /// Larger than the configured limit.
        case tooLarge
        /// Well-formed, but the content is refused (a damaged zip, for instance).
        case unprocessable
        /// The disk is full: nothing was stored.
        case noSpace
        /// The origin's own fault.
        case failure
        /// A service the origin depends on (its object store) is down or failing: try again later.
        case unavailable
    }

    /// What kind of failure it is.
    public let kind: Kind
    /// A stable machine-readable code.
    public let code: String
    /// A sentence for people.
    public let message: String
    /// For ``Kind/unauthorized``: the app whose download credentials (HTTP Basic) were missing;
    /// nil when a bearer token was.
    public let credentialsApp: String?

    init(_ kind: Kind, _ code: String, _ message: String, credentialsApp: String? = nil) {
        self.kind = kind
        self.code = code
        self.message = message
        self.credentialsApp = credentialsApp
    }

    public var description: String { message }

    static func downloadCredentials(_ app: String) -> DepotError {
        DepotError(.unauthorized, "unauthorized", "app \(app) requires download credentials (HTTP Basic)", credentialsApp: app)
    }

    static func notFound(_ what: String) -> DepotError { DepotError(.notFound, "not_found", "\(what) not found") }
    static func invalidID(_ what: String) -> DepotError {
        DepotError(.invalid, "invalid_id", "invalid \(what): 1–64 (apps: 128) of A-Z a-z 0-9 . -, starting with a letter or digit, no '..'")
    }
    static let missingToken = DepotError(.unauthorized, "unauthorized", "a bearer token is required (Authorization: Bearer …)")
    static let badToken = DepotError(.unauthorized, "unauthorized", "the bearer token is not valid")
    static func forbidden(_ why: String) -> DepotError { DepotError(.forbidden, "forbidden", why) }
    static func tooLarge(_ limit: Int64) -> DepotError { DepotError(.tooLarge, "too_large", "the body is larger than the limit of \(limit) bytes") }
    static func badRequest(_ why: String) -> DepotError { DepotError(.invalid, "bad_request", why) }
    static func conflict(_ code: String, _ why: String) -> DepotError { DepotError(.conflict, code, why) }
    static func checksumMismatch(expected: String, actual: String) -> DepotError {
        DepotError(.invalid, "checksum_mismatch", "plaintext SHA-256 is \(actual), the request said \(expected); nothing was stored")
    }

    /// A storage failure as a client should see it: a full disk is the client's to retry later
    /// with less; anything else is the origin's fault. A ``DepotError`` passes through.
    static func storage(_ error: any Error) -> DepotError {
        if let error = error as? DepotError { return error }
        if let system = error as? SystemError, system.isNoSpace {
            return DepotError(.noSpace, "insufficient_storage", "the origin's disk is full; nothing was stored")
        }
        if let store = error as? S3Error, store.status == 0 || store.status >= 500 {
            return DepotError(.unavailable, "storage_unavailable", "the object store is unavailable, try again later: \(store)")
        }
        return DepotError(.failure, "storage_error", "the origin could not store the data: \(error)")
    }
}
