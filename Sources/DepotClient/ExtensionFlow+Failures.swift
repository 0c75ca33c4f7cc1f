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
        forgetScheduled(identifier)
        guard Self.isIdentifier(identifier), let kind = Self.reportedKind(of: error) else { return }
        try? FileSystem.createDirectory(failedDownloads)
        try? FileSystem.writeAtomically(Array(kind.utf8), to: failedDownloads + "/" + identifier)
    }

    /// The kind a failed download is reported as, or nil for the device's own conditions.
    ///
    /// What Background Assets passes for a download that got a 404 or a body of the wrong size
    /// is not documented: the error itself and each error under it (`NSUnderlyingErrorKey`) are
    /// looked at, and the first that names a failure of the content decides — a `URLError`
    /// about TLS or HTTP, or Background Assets' `sessionDownloadDisallowedByDomain` (202: the
    /// release's URL is on a domain the build's `BADownloadDomainAllowList` does not allow), in
    /// `BAErrorDomain` (iOS 17+) or the domain iOS 16 uses, `com.apple.backgroundassets.error`.
    /// Its other codes are the device's or the app's state (the allowance, Low Power Mode or
    /// Background App Refresh, the app not launched yet, a call from the wrong process): not
    /// reported. The integration guide says what to log on a first device run to settle the rest.
    static func reportedKind(of error: any Error) -> String? {
        var next: (any Error)? = error
        var depth = 0
        while let current = next, depth < 4 {
            if let kind = contentKind(of: current) { return kind }
            next = (current as NSError).userInfo[NSUnderlyingErrorKey] as? any Error
            depth += 1
        }
        return nil
    }

    /// The domains Background Assets reports its errors in.
    static let backgroundAssetsDomains: Set<String> = ["BAErrorDomain", "com.apple.backgroundassets.error"]
    /// `BAErrorCode.sessionDownloadDisallowedByDomain`.
    static let disallowedByDomain = 202

    private static func contentKind(of error: any Error) -> String? {
        if let error = error as? ClientError {
            return [.http, .tls, .integrity, .tooLarge].contains(error.kind) ? DeviceReport.errorKind("\(error.kind)") : nil
        }
        let code: URLError.Code
        if let error = error as? URLError {
            code = error.code
        } else {
            let error = error as NSError
            if backgroundAssetsDomains.contains(error.domain) { return error.code == disallowedByDomain ? "domain" : nil }
            // (Failable on Linux, not on Apple platforms: the annotation makes both an optional.)
            let known: URLError.Code? = URLError.Code(rawValue: error.code)
            guard error.domain == NSURLErrorDomain, let known else { return nil }
            code = known
        }
        switch code {
        case .secureConnectionFailed, .serverCertificateHasBadDate, .serverCertificateUntrusted, .serverCertificateHasUnknownRoot,
             .serverCertificateNotYetValid, .clientCertificateRejected, .clientCertificateRequired:
            return "tls"
        case .badServerResponse, .resourceUnavailable, .userAuthenticationRequired, .cannotDecodeContentData, .cannotDecodeRawData, .zeroByteResource,
             .badURL, .unsupportedURL:
            return "http"
        default:
            return nil
        }
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
                  let kind = Self.readSmallFile(path) else { continue }
            results[id] = DeviceReport.PackResult(id: id, revision: revision, outcome: .failed, error: DeviceReport.errorKind(String(decoding: kind, as: UTF8.self)))
        }
        return results
    }
}
