import DepotHTTP

/// A refusal that belongs to the HTTP protocol itself rather than to the data (405 with
/// `Allow`, 411, 412, 415, tus's 460): raised by the router and the handlers only.
struct HTTPFailure: Error, Sendable {
    var status: Int
    var code: String
    var message: String
    var headers: [(String, String)] = []

    static func methodNotAllowed(_ allowed: [String]) -> HTTPFailure {
        let list = allowed.joined(separator: ", ")
        return HTTPFailure(status: 405, code: "method_not_allowed", message: "allowed methods: \(list)", headers: [("Allow", list)])
    }
}

/// The one place where errors become HTTP responses.
enum ErrorResponse {
    /// The status of each kind of domain failure.
    static func status(of kind: DepotError.Kind) -> Int {
        switch kind {
        case .invalid: 400
        case .unauthorized: 401
        case .forbidden: 403
        case .notFound: 404
        case .conflict: 409
        case .gone: 410
        case .tooLarge: 413
        case .unprocessable: 422
        // 507 Insufficient Storage: nothing was stored, the same request may succeed later.
        case .noSpace: 507
        case .failure: 500
        case .unavailable: 503
        }
    }

    /// The JSON error response for any error: a ``DepotError``, an ``HTTPFailure``, or anything
    /// else thrown on the way (a storage failure).
    static func response(for error: any Error) -> HTTPResponse {
        if let failure = error as? HTTPFailure {
            var response = HTTPResponse.error(status: failure.status, code: failure.code, message: failure.message)
            for (name, value) in failure.headers { response.headers.add(name, value) }
            // A 503 the origin gives on purpose (reports shed, an issuer's keys awaited) is told
            // apart in the metrics from one it suffers (storage unavailable): anonymous clients
            // can cause the first, and an alert on server errors must not page for it.
            if failure.status == 503 { response.route = "busy" }
            return response
        }
        let error = DepotError.storage(error)
        var response = HTTPResponse.error(status: status(of: error.kind), code: error.code, message: error.message)
        if let app = error.credentialsApp {
            response.headers.add("WWW-Authenticate", "Basic realm=\"AssetDepot \(app)\", charset=\"UTF-8\"")
        } else if error.kind == .unauthorized {
            response.headers.add("WWW-Authenticate", "Bearer realm=\"assetdepot\"")
        }
        return response
    }
}
