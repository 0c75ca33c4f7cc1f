import DepotCore
import Foundation

/// Storing a verified container in two steps, as a resumable upload does: the checks first (its
/// install size recorded with the verified pack), then the store and the staging, or the
/// staging alone of a blob a crash left stored.
extension Publisher {
    /// The checks of ``store(container:summary:keys:for:)`` before anything is stored: the
    /// plaintext checksum, the zip or Apple Archive; returns the pack's install size.
    func check(container path: String, summary: PackSummary, keys: KeyRing, for parameters: UploadParameters) throws -> Int64 {
        if let expected = parameters.expectedPlaintextSHA256, expected != summary.plaintextSHA256 {
            throw DepotError.checksumMismatch(expected: expected, actual: summary.plaintextSHA256)
        }
        return try appSettings(parameters.app)?.isManaged == true
            ? installSize(ofArchive: path, size: summary.size, declared: parameters.installSize)
            : installSize(ofContainer: path, summary: summary, contentType: parameters.contentType, keys: keys)
    }

    /// Stores a checked container (``check(container:summary:keys:for:)``) and stages or releases it.
    func store(container path: String, summary: PackSummary, installSize: Int64, for parameters: UploadParameters) throws -> PublishResult {
        storing.begin(summary.sha256)
        defer { storing.end(summary.sha256) }
        try blobs.put(temporaryFile: path, sha256: summary.sha256)
        return try publish(summary, installSize: installSize, for: parameters)
    }

    /// Stages (or releases) a blob already stored: an upload whose container moved into the
    /// store just before a crash. nil when the store says the blob is not there; unavailable
    /// when it cannot say (object storage unreachable).
    func restage(_ summary: PackSummary, installSize: Int64, for parameters: UploadParameters) throws -> PublishResult? {
        storing.begin(summary.sha256)
        defer { storing.end(summary.sha256) }
        guard !blobs.isMissing(summary.sha256) else { return nil }
        guard blobs.contains(summary.sha256) else {
            throw DepotError(.unavailable, "storage_unavailable", "the object store cannot say whether blob \(summary.sha256) is stored")
        }
        return try publish(summary, installSize: installSize, for: parameters)
    }
}
