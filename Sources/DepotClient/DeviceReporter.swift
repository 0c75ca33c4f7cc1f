import DepotCore
import Foundation

/// Sends a `DeviceReport` (``SyncReport/deviceReport``, ``ArrivedReport/deviceReport``)
/// to the origin's `POST /v1/apps/{app}/reports`, for an app that opts in.
///
/// Call it from the app, after its install step, never from the Background Assets extension:
/// an extension has seconds per callback and its network time belongs to the downloads (and App
/// Attest's `generateKey` fails in an extension). One report per install step, at most. A report
/// says the channel, the release, and per pack the revision, the outcome and the bytes; without
/// App Attest it names no device, with it the request carries the install's key id (below). A
/// report the origin sheds (`503 reports_busy`) is sent again after its `Retry-After`, a few times
/// (``resends``, ``longestRetryAfter``); one that cannot be sent is dropped (figures are
/// counts, not a ledger); nothing is queued on the device.
///
/// **App Attest.** With ``attestation`` (on a device, `DCAppAttestService.shared`) and a
/// ``stateFolder``, each report carries an assertion: the key's signature over the report's exact
/// bytes (`X-Depot-Attest-Key`, `X-Depot-Assertion`), which the origin verifies with the key it
/// attested, so that a guard requiring attestation counts only reports from genuine copies of the
/// app. The first send generates the key, asks the origin for a challenge, has Apple attest the
/// key over its SHA-256 and hands the attestation to the origin; later sends only sign. The report
/// goes unattested when App Attest is not supported (`isSupported` false: a Mac, a simulator, an
/// old device; or an app extension), when the origin has no attestation settings for the app
/// (asked again after six hours), or while an attestation waits (Apple's service unreachable, the
/// origin busy); a report whose signature the origin refuses is sent again unattested. A key the
/// origin does not know, revoked or whose signature it refused, or that DeviceCheck calls
/// invalid, is forgotten and a new one attested at the next send. What it keeps (`attest-key.json`: the key's id, whether the origin accepted it, and
/// while an attestation is under way the challenge and Apple's attestation object) is written
/// atomically before each step that depends on it, and no lock is held across an `await`: the app
/// may be suspended or ended anywhere in a send, and the next send picks up from the record — the
/// same key attested again, the same attestation handed over again, or at worst a new key.
public struct DeviceReporter: Sendable {
    /// The origin or edge base URL (the manifest's server).
    public var server: URL
    /// The app id.
    public var app: String
    /// Sent with the request (the app's download credentials, if its downloads need them); with
    /// attestation, with the challenge and key requests too.
    public var headers: [String: String] = [:]
    /// What https trusts and where names connect.
    public var transport = TransportOptions()
    /// Seconds before the request gives up.
    public var timeout: TimeInterval = 15
    /// App Attest, to sign each report: `DCAppAttestService.shared` on a device; nil sends
    /// unattested reports (as every report before App Attest).
    public var attestation: (any AppAttesting)?
    /// The folder where the attested key's id is kept (`attest-key.json`): the app's state folder
    /// (``StateStore/stateFolder``), which a purge of the packs keeps. Required with
    /// ``attestation``.
    public var stateFolder: String?

    public init(server: URL, app: String) {
        self.server = server
        self.app = app
    }

    /// A reporter that signs its reports with `attestation`, keeping the key's id in `stateFolder`.
    public init(server: URL, app: String, attestation: any AppAttesting, stateFolder: String) {
        self.init(server: server, app: app)
        self.attestation = attestation
        self.stateFolder = stateFolder
    }

    /// Where reports go: `SERVER/v1/apps/APP/reports`.
    public var url: URL { appURL.appendingPathComponent("reports") }

    var appURL: URL { server.appendingPathComponent("v1").appendingPathComponent("apps").appendingPathComponent(app) }

    /// How many times a report the origin shed (`503 reports_busy`: it is reading the release the
    /// report is about, or its queue is full) is sent again, each after the origin's
    /// `Retry-After` and a random part as long again (devices shed together do not come back
    /// together). A `429` (a rate limit) is not sent again.
    public var resends = 3
    /// The longest `Retry-After` honoured: a report the origin asks to hold longer is not sent
    /// again (its answer is returned), so a send never outlasts `resends` × twice this by much.
    public var longestRetryAfter: TimeInterval = 10

    /// Sends `report`; returns the origin's status (`202` when accepted for counting; `429` when
    /// rate-limited; `503` when the origin shed it even after ``resends`` more sends; a report
    /// whose signature was refused is sent again unattested and this is that answer). Throws
    /// when the origin could not be reached, when ``attestation`` is set without a
    /// ``stateFolder``, and `CancellationError` when the task is cancelled while it waits to send
    /// again (send it from a task of its own, cancelled from the background task's expiration
    /// handler, so that an install step never waits for it).
    @discardableResult
    public func send(_ report: DeviceReport) async throws -> Int {
        if attestation != nil && stateFolder == nil {
            // Checked before isSupported: a simulator or a Mac (unsupported) would hide it until devices.
            throw ClientError.state("DeviceReporter.attestation needs a stateFolder to keep its key in (the app's state folder)")
        }
        var sent = 0
        while true {
            let response = try await sendOnce(report, attesting: sent == 0)
            sent += 1
            guard response.status == 503, Self.errorCode(response.body) == "reports_busy", sent <= resends,
                  let wait = Self.retryAfter(response.header("Retry-After")), wait <= longestRetryAfter else { return response.status }
            let jittered = wait * Double.random(in: 1...2)
            DepotLog.info("the origin is busy (reports_busy); sending the report again in \(Int(jittered.rounded(.up))) s", category: "report")
            try await Task.sleep(nanoseconds: UInt64(jittered * 1e9))
        }
    }

    /// `Retry-After` in seconds (a number of seconds; a date is not sent by the origin), at least
    /// a tenth of a second.
    static func retryAfter(_ value: String?) -> TimeInterval? {
        guard let value, let seconds = Double(value.trimmingCharacters(in: .whitespaces)), seconds.isFinite, seconds >= 0 else { return nil }
        return max(0.1, seconds)
    }

    /// One send: signed afresh (an assertion's counter is used once), and sent again unattested
    /// if the origin refused the signature.
    private func sendOnce(_ report: DeviceReport, attesting: Bool) async throws -> HTTPTransport.Response {
        let body = report.encoded()
        var headers = headers
        headers["Content-Type"] = "application/json"
        let http = HTTPTransport(timeout: timeout, options: transport)
        var signedBy: String?
        if let attestation, let stateFolder, attestation.isSupported, !Self.inAppExtension {
            let attester = ReportAttester(reporter: self, service: attestation, record: AttestationRecord.File(folder: stateFolder, app: app), http: http)
            if let signature = await attester.sign(body, attesting: attesting) {
                headers[Self.keyHeader] = signature.keyId
                headers[Self.assertionHeader] = signature.assertion.base64EncodedString()
                signedBy = signature.keyId
            }
        }
        var response = try await http.send(method: "POST", to: url, headers: headers, body: Data(body))
        if let signedBy, let stateFolder, let code = Self.errorCode(response.body), Self.unsignedAgain.contains(code) {
            let record = AttestationRecord.File(folder: stateFolder, app: app)
            if Self.keyRefusals.contains(code) {
                // The origin does not know the key (a restored data folder, a replica), revoked it,
                // or refused its signature (the app's App ID changed): a new one at the next send.
                DepotLog.notice("the origin refused the report's key (\(code)); a new key is attested at the next report", category: "report")
                record.forget(keyId: signedBy)
            } else if code == "attestation_not_configured" {
                DepotLog.notice("the origin attests no key for this app now; reports go unattested", category: "report")
                record.pause(until: Date().addingTimeInterval(ReportAttester.afterNotConfigured))
            }
            // The report itself is sent again, unattested: a refusal of its signature is no
            // reason to lose what it says.
            headers[Self.keyHeader] = nil
            headers[Self.assertionHeader] = nil
            response = try await http.send(method: "POST", to: url, headers: headers, body: Data(body))
        }
        return response
    }

    /// Whether this process is an app extension, where App Attest's `generateKey` fails whatever
    /// `isSupported` says (its page): reports from there go unattested.
    static var inAppExtension: Bool { Bundle.main.bundlePath.hasSuffix(".appex") }

    /// The report's headers with App Attest: the key's id (base64, as `generateKey` returned it)
    /// and the assertion (base64).
    public static let keyHeader = "X-Depot-Attest-Key"
    public static let assertionHeader = "X-Depot-Assertion"
    /// The origin's refusals of a report's key (`403`), after which the key is forgotten.
    static let keyRefusals: Set<String> = ["unknown_attested_key", "attested_key_revoked", "assertion_refused"]
    /// The refusals of a report's signature after which it is sent again unattested (the key
    /// refused; `404 attestation_not_configured`: the app's attestation turned off; `409
    /// stale_counter`: another report of the key overtook this one).
    static let unsignedAgain: Set<String> = keyRefusals.union(["attestation_not_configured", "stale_counter"])

    /// The `code` of the origin's JSON error body (`{"error":{"code":…,"message":…}}`).
    static func errorCode(_ body: [UInt8]) -> String? {
        struct Body: Decodable { struct E: Decodable { var code: String }; var error: E }
        return (try? JSONDecoder().decode(Body.self, from: Data(body)))?.error.code
    }
}
