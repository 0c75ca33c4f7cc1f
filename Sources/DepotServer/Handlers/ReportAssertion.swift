import DepotCore
import DepotHTTP
import Foundation

/// A report's App Attest assertion: `X-Depot-Attest-Key` (the key id, base64) and
/// `X-Depot-Assertion` (base64 of the assertion `DCAppAttestService.generateAssertion` made with
/// `clientDataHash` = SHA-256 of the report's exact body bytes).
///
/// The counter scheme, not a challenge per report: an assertion's counter must exceed the key's
/// last one, which the origin keeps durably (``AttestedKeys/advance(app:keyID:to:)``), so a
/// replayed or reordered assertion is refused (`409 stale_counter`) without a round trip for a
/// challenge before every report; the report's bytes are what the key signs, so an assertion
/// cannot be moved to other bytes (`403 assertion_refused`).
///
/// The work a request can ask for before the one signature check is bounded and cheap: the
/// report's size and the rate buckets (before the body is read), the headers' sizes, the key's
/// lookup (one `stat`, and a small file read only for a key the origin stored: a flood of
/// made-up key ids costs a `stat` each), the app's settings (in memory), the report's decoding
/// (at most 32 KiB) and its checks against what the channel served (cached). Only then the
/// ECDSA verification, then the counter's durable advance, then the queue.
struct ReportAssertion: Sendable {
    /// What a refused assertion costs its sender in the report buckets' tokens (a report costs
    /// one per KiB): its ECDSA verification was done in vain.
    static let refusedCost = 16.0
    static let keyHeader = "X-Depot-Attest-Key"
    static let assertionHeader = "X-Depot-Assertion"
    /// Base64 of 32 bytes.
    static let keyHeaderLength = 44
    /// Base64 of the largest assertion the verifier takes.
    static let assertionHeaderLength = (AppAttestVerifier.maximumAssertionBytes + 2) / 3 * 4

    let app: String
    let stored: StoredKey
    let assertion: [UInt8]
    let settings: AttestationSettings

    /// The headers' assertion, its key looked up; nil for an unattested report (neither header).
    /// Throws the refusals that need no body: `400` for one header without the other or a
    /// malformed or oversized one, `403 unknown_attested_key` / `attested_key_revoked`, `404
    /// attestation_not_configured` (the app takes no App Attest keys now: send unattested reports).
    static func read(_ context: RequestContext, keys: AttestedKeys) throws -> ReportAssertion? {
        let headers = context.request.headers
        let (keyValues, assertionValues) = (headers.values(keyHeader), headers.values(assertionHeader))
        if keyValues.isEmpty && assertionValues.isEmpty { return nil }
        guard keyValues.count == 1, assertionValues.count == 1 else {
            throw DepotError.badRequest("an attested report carries one \(keyHeader) (the key id, base64) and one \(assertionHeader) (the assertion over the report's bytes, base64); send both, or neither for an unattested report")
        }
        let (keyText, assertionText) = (keyValues[0].trimmingCharacters(in: .whitespaces), assertionValues[0].trimmingCharacters(in: .whitespaces))
        guard keyText.utf8.count == keyHeaderLength, let keyID = Data(base64Encoded: keyText), keyID.count == 32 else {
            throw DepotError.badRequest("\(keyHeader) is the key id DCAppAttestService.generateKey returned: base64 of 32 bytes")
        }
        guard assertionText.utf8.count <= assertionHeaderLength, let assertion = Data(base64Encoded: assertionText), !assertion.isEmpty else {
            throw DepotError.badRequest("\(assertionHeader) is base64 of the assertion DCAppAttestService.generateAssertion returned, at most \(AppAttestVerifier.maximumAssertionBytes) bytes")
        }
        let app = context.app
        guard let stored = try keys.key(app: app, keyID: Array(keyID)) else {
            throw DepotError(.forbidden, "unknown_attested_key", "app \(app) has no attested key \(keyText): attest the key again (POST /v1/apps/\(app)/attest/challenges, then …/attest/keys); the report was not counted")
        }
        guard !stored.isRevoked else { throw AttestedKeys.revoked(stored) }
        guard let settings = context.settings?.attestation else {
            throw DepotError(.notFound, "attestation_not_configured", "app \(app) does not take App Attest keys now (depot attest configure); send unattested reports")
        }
        return ReportAssertion(app: app, stored: stored, assertion: Array(assertion), settings: settings)
    }

    /// Checks the assertion over `body` and raises the key's counter: `403 assertion_refused`
    /// (with the check that refused it) for an assertion by another key or over other bytes, `409
    /// stale_counter` for one whose counter does not rise (replayed, or overtaken). Returns whether
    /// the report counts among the attested ones: a key counts once per channel and release (its
    /// first report about it), so that one genuine device signing report after report cannot make
    /// a guard's minimum on its own; its later reports about that release count as unattested.
    func verify(_ body: [UInt8], report: DeviceReport, keys: AttestedKeys) throws -> Bool {
        let counter: UInt32
        do {
            counter = try AppAttestVerifier(appID: settings.appID, environment: settings.environment)
                .assertion(assertion, clientData: body, key: stored.key, after: stored.counter)
        } catch {
            if error.check == .counter { throw Self.stale(error.detail) }
            throw DepotError(.forbidden, "assertion_refused", "the report's assertion was refused (\(error.description)); the report was not counted")
        }
        guard try keys.advance(app: app, stored: stored, to: counter) else {
            throw Self.stale("the assertion's counter is \(counter), and the key's last one is as high already (a replayed or overtaken assertion)")
        }
        return keys.firstReport(app: app, keyID: stored.key.keyID, channel: report.channel, release: report.release)
    }

    static func stale(_ detail: String) -> DepotError {
        DepotError.conflict("stale_counter", detail + "; the report was not counted: sign each report with a new assertion")
    }
}
