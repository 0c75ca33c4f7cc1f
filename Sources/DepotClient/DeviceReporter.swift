import DepotCore
import Foundation

/// Sends a `DeviceReport` (``SyncReport/deviceReport``, ``ArrivedReport/deviceReport``)
/// to the origin's `POST /v1/apps/{app}/reports`, for an app that opts in.
///
/// Call it from the app, after its install step, never from the Background Assets extension:
/// an extension has seconds per callback and its network time belongs to the downloads. One
/// report per install step, at most. A report names no device: the channel, the release, and
/// per pack the revision, the outcome and the bytes. A report that cannot be sent is dropped
/// (figures are counts, not a ledger); nothing is queued on the device.
public struct DeviceReporter: Sendable {
    /// The origin or edge base URL (the manifest's server).
    public var server: URL
    /// The app id.
    public var app: String
    /// Sent with the request (the app's download credentials, if its downloads need them).
    public var headers: [String: String] = [:]
    /// What https trusts and where names connect.
    public var transport = TransportOptions()
    /// Seconds before the request gives up.
    public var timeout: TimeInterval = 15

    public init(server: URL, app: String) {
        self.server = server
        self.app = app
    }

    /// Where reports go: `SERVER/v1/apps/APP/reports`.
    public var url: URL { server.appendingPathComponent("v1").appendingPathComponent("apps").appendingPathComponent(app).appendingPathComponent("reports") }

    /// Sends `report`; returns the origin's status (`202` when accepted for counting; `429` or
    /// `503` with `Retry-After` when the origin sheds it — it is not sent again). Throws only
    /// when the origin could not be reached.
    @discardableResult
    public func send(_ report: DeviceReport) async throws -> Int {
        var headers = headers
        headers["Content-Type"] = "application/json"
        let response = try await HTTPTransport(timeout: timeout, options: transport).send(method: "POST", to: url, headers: headers, body: Data(report.encoded()))
        return response.status
    }
}
