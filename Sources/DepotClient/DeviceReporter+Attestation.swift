import DepotCore
import Foundation

/// One send's App Attest work (``DeviceReporter``): an attestation round trip at most —
/// `generateKey` if no key is recorded, `POST …/attest/challenges`, `attestKey` over the SHA-256 of
/// the challenge's bytes, `POST …/attest/keys` — then the report's assertion, `generateAssertion`
/// over the SHA-256 of the report's exact bytes. Every failure leaves the report unattested,
/// never unsent. What it records, and why stopping anywhere is safe: ``AttestationRecord``.
struct ReportAttester: Sendable {
    var reporter: DeviceReporter
    var service: any AppAttesting
    var record: AttestationRecord.File
    var http: HTTPTransport
    var now = Date()

    struct Signature {
        var keyId: String
        var assertion: Data
    }

    /// How long no attestation is tried after the origin refused one (`422`): a refusal there is
    /// the origin's settings (App ID, environment), which each attempt would meet again, and
    /// each attempt costs a call to Apple's service.
    static let afterRefusal: TimeInterval = 24 * 3600
    /// How long no key is generated after `generateKey` failed.
    static let afterFailure: TimeInterval = 3600
    /// How long no new key is made after the origin lost a fresh attestation's challenge.
    static let afterLostChallenge: TimeInterval = 600
    /// How long no report is signed, and no attestation tried, after the origin said it attests
    /// no key for this app (`404 attestation_not_configured`).
    static let afterNotConfigured: TimeInterval = 6 * 3600

    /// The report's key and assertion, or nil: the report goes unattested.
    /// `attesting`: false on a report sent again after the origin shed it: a key the origin has
    /// not accepted yet is not attested then (no challenge asked of a busy origin, no key made).
    func sign(_ body: [UInt8], attesting: Bool = true) async -> Signature? {
        do {
            if !attesting, let current = try record.read(), !(current.hasKey && current.attested) { return nil }
            guard let keyId = try await attestedKey() else { return nil }
            do {
                let assertion = try await service.generateAssertion(keyId, clientDataHash: Data(SHA256Hasher.hash(body)))
                return Signature(keyId: keyId, assertion: assertion)
            } catch where AppAttestError.code(of: error) == AppAttestError.invalidKey {
                DepotLog.notice("App Attest refused the key (invalidKey): report sent unattested, a new key attested at the next report", category: "report")
                record.forget(keyId: keyId)
                return nil
            }
        } catch {
            DepotLog.error("report sent unattested: \(error)", category: "report")
            return nil
        }
    }

    /// The key the origin accepted, attested first when it has not (at most one round trip); nil
    /// when there is none to sign with this time.
    func attestedKey() async throws -> String? {
        // A record that exists and cannot be read now (before the first unlock): unattested this
        // time, the key kept.
        var current = try record.read() ?? AttestationRecord(app: reporter.app, keyId: "")
        if let notBefore = current.notBefore, now < notBefore { return nil }
        if current.hasKey && current.attested {
            if current.notBefore != nil {
                current.notBefore = nil
                try record.save(current)
            }
            return current.keyId
        }
        current.notBefore = nil
        // Apple's attestation from an earlier send, which the origin may hold already.
        if current.hasKey, let object = current.attestation, let challenge = current.challenge {
            return try await upload(&current, attestation: object, challenge: challenge, again: true)
        }
        let challenge: String
        if current.hasKey, let kept = current.challenge, let expires = current.challengeExpires, now.addingTimeInterval(30) < expires {
            challenge = kept  // after DeviceCheck's serverUnavailable: the same key, the same clientDataHash
        } else {
            // The challenge before the key: an origin that does not attest this app costs no key.
            guard let fresh = try await newChallenge(&current) else { return nil }
            (challenge, current.challenge, current.challengeExpires) = (fresh.challenge, fresh.challenge, now.addingTimeInterval(fresh.expiresIn))
        }
        if !current.hasKey {
            do {
                current.keyId = try await service.generateKey()
            } catch {
                // No key now (the capability missing, an extension, the Secure Enclave busy): not
                // asked again for an hour, so that each report does not cost a challenge.
                DepotLog.error("App Attest could not generate a key (\(error)); reports go unattested, tried again in an hour", category: "report")
                record.pause(until: now.addingTimeInterval(Self.afterFailure))
                return nil
            }
            current.attested = false
            // Recorded at once: a key whose id is lost can never be used.
            try record.save(current)
        }
        guard let bytes = Data(base64Encoded: challenge) else {
            current.challenge = nil
            try record.save(current)
            return nil
        }
        let object: Data
        do {
            object = try await service.attestKey(current.keyId, clientDataHash: Data(SHA256Hasher.hash(bytes)))
        } catch where AppAttestError.code(of: error) == AppAttestError.serverUnavailable {
            DepotLog.notice("App Attest's server unreachable: the attestation is tried again at the next report", category: "report")
            try record.save(current)
            return nil
        } catch where AppAttestError.code(of: error) == AppAttestError.invalidKey {
            DepotLog.notice("App Attest refused to attest the key (invalidKey): a new key at the next report", category: "report")
            record.forget(keyId: current.keyId)
            return nil
        }
        let encoded = object.base64EncodedString()
        current.attestation = encoded
        try record.save(current)
        return try await upload(&current, attestation: encoded, challenge: challenge, again: false)
    }

    /// `POST …/attest/challenges`: a challenge (base64) and its life in seconds, or nil (none now).
    private func newChallenge(_ current: inout AttestationRecord) async throws -> (challenge: String, expiresIn: TimeInterval)? {
        struct Answer: Decodable {
            var challenge: String
            var expiresIn: Double
        }
        let url = reporter.appURL.appendingPathComponent("attest").appendingPathComponent("challenges")
        let response = try await http.send(method: "POST", to: url, headers: reporter.headers, body: nil)
        if response.status == 201, let answer = try? JSONDecoder().decode(Answer.self, from: Data(response.body)) {
            return (answer.challenge, answer.expiresIn)
        }
        try settle(response, &current, "asked for an App Attest challenge")
        return nil
    }

    /// `POST …/attest/keys`: the key id, the challenge and Apple's attestation object. `again`: the
    /// object was kept from an earlier send (whose upload may have reached the origin).
    private func upload(_ current: inout AttestationRecord, attestation: String, challenge: String, again: Bool) async throws -> String? {
        let url = reporter.appURL.appendingPathComponent("attest").appendingPathComponent("keys")
        let body = try JSONEncoder().encode(["keyId": current.keyId, "challenge": challenge, "attestation": attestation])
        var headers = reporter.headers
        headers["Content-Type"] = "application/json"
        let response = try await http.send(method: "POST", to: url, headers: headers, body: body)
        let code = DeviceReporter.errorCode(response.body)
        if response.status == 201 || (response.status == 409 && code == "key_known") || (again && response.status == 400 && code == "unknown_challenge") {
            // Attested (after a 400 on an object sent before: on trust, which the report's own
            // assertion settles — `403 unknown_attested_key` forgets the key).
            current.attested = true
            (current.challenge, current.challengeExpires, current.attestation) = (nil, nil, nil)
            try record.save(current)
            return current.keyId
        }
        if response.status == 400 && code == "unknown_challenge" {
            // The challenge expired or the origin restarted: Apple attested this key already, and
            // attests no key twice.
            DepotLog.notice("the origin no longer held the App Attest challenge: a new key in ten minutes", category: "report")
            record.forget(keyId: current.keyId)
            // Not at once: an origin that keeps losing challenges (restarts, several processes
            // behind one name) would otherwise cost a Secure Enclave key and an Apple attestation per report.
            record.pause(until: now.addingTimeInterval(Self.afterLostChallenge))
            return nil
        }
        if response.status == 422 {
            // Apple: "If your server fails to verify the attestation object, discard the key identifier."
            DepotLog.error("the origin refused the App Attest attestation (\(ResumableUploader.message(response.body))); tried again with a new key in a day", category: "report")
            try record.save(AttestationRecord(app: reporter.app, keyId: "", notBefore: now.addingTimeInterval(Self.afterRefusal)))
            return nil
        }
        try settle(response, &current, "sent the App Attest attestation")
        return nil
    }

    /// Any other answer: unattested this time; `429`/`503` postpone attestation by their
    /// `Retry-After`; `404 attestation_not_configured` is the origin's choice (no attestation for
    /// this app), asked again in ``afterNotConfigured``.
    private func settle(_ response: HTTPTransport.Response, _ current: inout AttestationRecord, _ what: String) throws {
        if response.status == 404 && DeviceReporter.errorCode(response.body) == "attestation_not_configured" {
            current.notBefore = now.addingTimeInterval(Self.afterNotConfigured)
            try record.save(current)
            return
        }
        DepotLog.notice("\(what): HTTP \(response.status); report sent unattested", category: "report")
        if response.status == 429 || response.status == 503 {
            let seconds = response.header("Retry-After").flatMap(TimeInterval.init) ?? 60
            current.notBefore = now.addingTimeInterval(min(max(seconds, 1), 24 * 3600))
            try record.save(current)
        }
    }
}
