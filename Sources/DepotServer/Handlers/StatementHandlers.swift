import DepotCore
import DepotHTTP
import Foundation

extension PublishHandlers {
    /// `POST …/channels/{channel}/statements`: a release statement signed by the app's release
    /// keys (the JSON `depot release sign` writes, at most 64 KiB), checked against the app's
    /// newest root and the release it names, and kept for the channel: `201
    /// {"release","channel","signers","threshold"}`. A channel protected by the root serves a
    /// release only with one (409 `release_signature_required` otherwise).
    func statement(_ context: RequestContext) throws -> HTTPDisposition {
        let channel = context["channel"]
        try context.requireChannel(channel)
        if let length = context.request.contentLength, length > Int64(StatementLimits.bodyLimit) {
            throw DepotError.tooLarge(Int64(StatementLimits.bodyLimit))
        }
        let (releases, logger, app) = (publisher.releases, publisher.logger, context.app)
        return .receiveBody(StatementReceiver { body in
            let accepted = try releases.acceptStatement(body, app: app, channel: channel)
            logger.notice("release statement accepted", metadata: [
                "app": .string(app), "channel": .string(channel), "release": .stringConvertible(accepted.release),
                "signers": .stringConvertible(accepted.signers),
            ])
            var response = try JSONResponse.make(accepted, status: 201)
            response.headers.add("Cache-Control", "no-store")
            return response
        })
    }
}

/// Reads a statement's body (bounded), then hands it on.
final class StatementReceiver: HTTPBodyReceiver {
    private let accept: ([UInt8]) throws -> HTTPResponse
    private var body: [UInt8] = []

    init(_ accept: @escaping ([UInt8]) throws -> HTTPResponse) { self.accept = accept }

    func receive(_ chunk: UnsafeRawBufferPointer) -> HTTPResponse? {
        guard body.count + chunk.count <= StatementLimits.bodyLimit else {
            body = []
            return ErrorResponse.response(for: DepotError.tooLarge(Int64(StatementLimits.bodyLimit)))
        }
        body += chunk
        return nil
    }

    func finish() -> HTTPResponse {
        do {
            return try accept(body)
        } catch {
            return ErrorResponse.response(for: error)
        }
    }

    func abort() { body = [] }
}
