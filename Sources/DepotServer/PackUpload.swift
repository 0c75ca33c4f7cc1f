import DepotCore
import DepotHTTP
import Foundation

/// What a publisher asked for along with the bytes.
struct PackUploadRequest: Sendable {
    var app: String
    var pack: String
    var policy: PackEntry.Policy
    var tags: [String]
    var contentType: String
    var expectedPlaintextSHA256: String?
    var declaredLength: Int64?
    /// Publish the staged changes at once (`?release=true`).
    var release: Bool
    /// The live version the publisher saw (`?base=N`): 409 if another publish came first.
    var base: Int?
    /// Publish even past the recorded allowances (`?force=true`).
    var force: Bool = false
    /// The channel a release goes to (`?channel=`).
    var channel: String = ReleaseStore.production
}

/// Receives one `PUT …/packs/{pack}` body: encrypts each chunk as it arrives into a file in
/// `uploads/`, then makes the blob durable and publishes it. Nothing is kept if anything fails.
final class PackUpload: HTTPBodyReceiver {
    private let request: PackUploadRequest
    private let origin: Origin
    private let path: String
    private let file: FileDescriptor
    private let encryptor: PackEncryptor
    private var received: Int64 = 0
    private var failed = false

    init(request: PackUploadRequest, origin: Origin) throws {
        self.request = request
        self.origin = origin
        let keys = try origin.apps.packKeys(request.app)
        (path, file) = try origin.blobs.newUpload()
        let file = self.file
        do {
            encryptor = try PackEncryptor(
                header: PackHeader(keyID: keys.current), masterKey: keys.ring[keys.current]!,
                sink: { try file.write($0) }
            )
        } catch {
            FileSystem.remove(path)
            throw error
        }
    }

    func receive(_ chunk: UnsafeRawBufferPointer) -> HTTPResponse? {
        received += Int64(chunk.count)
        if received > origin.configuration.maximumPackSize {
            return fail(.tooLarge(origin.configuration.maximumPackSize))
        }
        do {
            try encryptor.update(chunk)
        } catch {
            return fail(.storage(error))
        }
        return nil
    }

    func finish() -> HTTPResponse {
        do {
            let summary = try encryptor.finish()
            if let expected = request.expectedPlaintextSHA256, expected != summary.plaintextSHA256 {
                return fail(.checksumMismatch(expected: expected, actual: summary.plaintextSHA256))
            }
            let installSize = try origin.installSize(
                ofContainer: path, summary: summary, contentType: request.contentType, keys: origin.apps.packKeys(request.app).ring
            )
            try origin.blobs.commit(upload: path, file: file, sha256: summary.sha256)
            return try origin.publish(summary, installSize: installSize, for: request)
        } catch {
            return fail(.storage(error))
        }
    }

    func abort() {
        guard !failed else { return }
        failed = true
        try? file.close()
        FileSystem.remove(path)
    }

    private func fail(_ error: DepotError) -> HTTPResponse {
        abort()
        return error.response
    }
}
