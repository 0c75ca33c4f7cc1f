import DepotCore
import DepotHTTP

/// Small JSON answers.
enum JSONResponse {
    /// `value` as pretty JSON with a newline, not cached.
    static func make(_ value: some Encodable, status: Int) throws -> HTTPResponse {
        HTTPResponse.bytes(Array(try StoredJSON.encoder.encode(value)) + [10], status: status, contentType: "application/json")
    }

    /// A publish's answer: 202 when staged, 201 when a release changed, 200 when nothing did.
    static func make(_ result: PublishResult) throws -> HTTPResponse {
        try make(result, status: result.staged ? 202 : result.changed ? 201 : 200)
    }

    /// A listing that caches may keep while they revalidate it: JSON with an ETag of its bytes.
    static func listing(_ value: some Encodable, gated: Bool, to request: HTTPRequest) throws -> HTTPResponse {
        let body = Array(try StoredJSON.encoder.encode(value)) + [10]
        return Representation(
            source: .bytes(body), size: Int64(body.count), etag: Representation.etag(of: body), lastModified: nil, contentType: "application/json",
            cacheControl: Representation.cacheControl("public, max-age=0, must-revalidate", gated: gated)
        ).response(to: request)
    }
}
