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
    /// a candidate that answers 404 or fails TLS is what a rollout's guard must see. Only the
    /// kind of failure is kept (`http`, `tls` or `transport`).
    public func downloadFailed(identifier: String, error: any Error) {
        guard Self.isIdentifier(identifier) else { return }
        var kind = "transport"
        if let error = error as? URLError {
            switch error.code {
            case .secureConnectionFailed, .serverCertificateHasBadDate, .serverCertificateUntrusted, .serverCertificateHasUnknownRoot,
                 .serverCertificateNotYetValid, .clientCertificateRejected, .clientCertificateRequired:
                kind = "tls"
            case .badServerResponse, .fileDoesNotExist, .noPermissionsToReadFile, .userAuthenticationRequired:
                kind = "http"
            default:
                break
            }
        } else if let error = error as? ClientError {
            kind = DeviceReport.errorKind("\(error.kind)")
        }
        try? FileSystem.createDirectory(failedDownloads)
        try? FileSystem.writeAtomically(Array(kind.utf8), to: failedDownloads + "/" + identifier)
    }

    /// The failed downloads noted since the last install step, of revisions the manifest still
    /// lists, as report results; the notes are removed.
    func takeFailedDownloads(_ manifest: Manifest) -> [String: DeviceReport.PackResult] {
        var results: [String: DeviceReport.PackResult] = [:]
        for name in FileSystem.contents(of: failedDownloads) {
            defer { FileSystem.remove(failedDownloads + "/" + name) }
            guard Self.isIdentifier(name) else { continue }
            let (id, revision, _) = Self.parse(name)
            guard manifest[pack: id]?.revision == revision, let kind = try? FileSystem.readFile(failedDownloads + "/" + name, limit: 32) else { continue }
            results[id] = DeviceReport.PackResult(id: id, revision: revision, outcome: .failed, error: DeviceReport.errorKind(String(decoding: kind, as: UTF8.self)))
        }
        return results
    }
}
