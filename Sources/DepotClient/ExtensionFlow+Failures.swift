import DepotCore
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Downloads the system failed, noted by the extension for the app's next report.
extension ExtensionFlow {
    /// Where the extension notes downloads the system failed, for the next install step's report.
    var failedDownloads: String { store.metadata + "/failed" }

    /// A download the system failed (`backgroundDownload(_:failedWithError:)`): noted in one
    /// small file (no lock, constant time), so that the next install step's report says so —
    /// a candidate that answers an error or fails TLS is what a rollout's guard must see. Only
    /// failures of what was published are noted (`tls`, `http`); the device's own conditions
    /// (offline, a lost connection, a timeout, cellular refused, a cancellation, the system's
    /// own reasons) are not, so that network noise cannot halt a healthy rollout.
    public func downloadFailed(identifier: String, error: any Error) {
        guard Self.isIdentifier(identifier), let kind = Self.reportedKind(of: error) else { return }
        try? FileSystem.createDirectory(failedDownloads)
        try? FileSystem.writeAtomically(Array(kind.utf8), to: failedDownloads + "/" + identifier)
    }

    /// The kind a failed download is reported as, or nil for the device's own conditions.
    static func reportedKind(of error: any Error) -> String? {
        if let error = error as? URLError {
            switch error.code {
            case .secureConnectionFailed, .serverCertificateHasBadDate, .serverCertificateUntrusted, .serverCertificateHasUnknownRoot,
                 .serverCertificateNotYetValid, .clientCertificateRejected, .clientCertificateRequired:
                return "tls"
            case .badServerResponse, .resourceUnavailable, .userAuthenticationRequired, .cannotDecodeContentData, .cannotDecodeRawData, .zeroByteResource:
                return "http"
            default:
                return nil
            }
        }
        if let error = error as? ClientError, [.http, .tls, .integrity, .tooLarge].contains(error.kind) {
            return DeviceReport.errorKind("\(error.kind)")
        }
        return nil
    }

    /// The failed downloads noted since the last install step, of revisions the manifest still
    /// lists, as report results; the notes are removed.
    func takeFailedDownloads(_ manifest: Manifest) -> [String: DeviceReport.PackResult] {
        var results: [String: DeviceReport.PackResult] = [:]
        // (A `.tmp-` file is a note being written; one a killed extension left is removed at the
        // start of the install step.)
        for name in FileSystem.contents(of: failedDownloads) where !name.hasPrefix(".") {
            let path = failedDownloads + "/" + name
            defer { FileSystem.remove(path) }
            guard Self.isIdentifier(name) else { continue }
            let (id, revision, _) = Self.parse(name)
            // A note older than the manifest is about an earlier one (a rollout halted and
            // resumed since): not counted against this one.
            let noted = (try? FileManager.default.attributesOfItem(atPath: path)[.modificationDate]) as? Date
            guard manifest[pack: id]?.revision == revision, (noted ?? .distantFuture) >= manifest.publishedAt,
                  let kind = try? FileSystem.readFile(path, limit: 32) else { continue }
            results[id] = DeviceReport.PackResult(id: id, revision: revision, outcome: .failed, error: DeviceReport.errorKind(String(decoding: kind, as: UTF8.self)))
        }
        return results
    }
}
