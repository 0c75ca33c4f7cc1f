import DepotCore
import Foundation

/// What ``DeviceReporter`` keeps about its App Attest key, in `attest-key.json` in its state
/// folder: the key's id and whether the origin accepted its attestation; while an attestation is
/// under way, the origin's challenge (kept after DeviceCheck's `serverUnavailable`, whose page asks
/// for a retry "using the same key and the same value for the `clientDataHash` parameter") and
/// then Apple's attestation object (kept until the origin answers: DeviceCheck attests a key once
/// and refuses it afterwards with `invalidKey`).
///
/// Each change is written atomically and durably (``FileSystem/writeAtomically(_:to:mode:_:)``)
/// before the next step that depends on it, and no lock is held across an `await`: iOS may
/// suspend or end the app anywhere in a send. A key is made only once the origin gave a challenge
/// (an origin that does not attest the app costs no key). Where a send stops decides what the
/// next one does:
/// - after `generateKey`, before the record: that key is never used (one unused key in the
///   Secure Enclave); the next send generates another.
/// - after the record, before `attestKey` returned: the next send attests the same key.
/// - after `attestKey` returned, before the object was kept: the next send's `attestKey` of the
///   same key fails with `invalidKey` (attested already); the key is forgotten and replaced at the
///   send after.
/// - after the object was kept, before the origin's `201` arrived: the next send posts the same
///   object again. `201` (it never arrived) or `409 key_known` make the key attested; `400
///   unknown_challenge` (the origin took the challenge — its `201` was lost — or dropped it, or it
///   expired) makes it attested on trust, and that send's own report settles it: the origin
///   answers `403 unknown_attested_key` for a key it does not hold, and the key is replaced.
/// Two sends at once in one app (the guide runs one install step at a time) can each generate a
/// key: the last record written wins, the other key stays unused on the device and, attested,
/// on the origin (where `depot attest revoke` can end it).
struct AttestationRecord: Codable, Equatable, Sendable {
    /// The app the key was attested for.
    var app: String
    /// The key's id, as `generateKey` returned it (base64).
    var keyId: String
    /// Whether the origin accepted the key's attestation.
    var attested = false
    /// The origin's challenge (base64) and when it expires, while `attestKey` waits to be retried.
    var challenge: String?
    var challengeExpires: Date?
    /// Apple's attestation object (base64), from `attestKey`, until the origin accepted it.
    var attestation: String?
    /// No attestation is tried before then (the origin refused one, or asked to wait).
    var notBefore: Date?

    /// Whether a key is recorded (a forgotten one leaves its id empty).
    var hasKey: Bool { !keyId.isEmpty }

    /// The record's file.
    struct File: Sendable {
        var folder: String
        var app: String

        var path: String { folder + "/attest-key.json" }

        /// The record for this app; nil when there is none, it is another app's, or it is not a
        /// record (then a new key is attested and the record rewritten).
        func load() -> AttestationRecord? { try? read() }

        /// Like ``load()``, but a file that exists and cannot be read now (data protection before
        /// the first unlock, an I/O error, too many open files) throws: that is no reason to
        /// replace an attested key.
        func read() throws -> AttestationRecord? {
            let bytes: [UInt8]
            do {
                bytes = try FileSystem.readFile(path, limit: 64 << 10)
            } catch {
                if error.errno == ENOENT { return nil }
                throw ClientError.state("cannot read the App Attest key's record \(path) now: \(error)")
            }
            guard let record = try? Self.decoder.decode(AttestationRecord.self, from: Data(bytes)),
                  record.app.utf8.elementsEqual(app.utf8) else { return nil }
            return record
        }

        /// Keeps the record's key and state, and tries no signing or attestation before `date`.
        func pause(until date: Date) {
            guard var record = try? read() ?? AttestationRecord(app: app, keyId: "") else { return }
            record.notBefore = date
            do {
                try save(record)
            } catch {
                DepotLog.error("\(error)", category: "report")
            }
        }

        func save(_ record: AttestationRecord) throws {
            do {
                try FileSystem.createDirectory(folder)
                try FileSystem.writeAtomically(Array(try Self.encoder.encode(record)), to: path)
            } catch {
                throw ClientError.state("cannot keep the App Attest key's record in \(path): \(error)")
            }
        }

        /// Forgets `keyId` (if it is still the recorded key): the next send attests a new one.
        func forget(keyId: String) {
            guard let record = load(), record.keyId == keyId else { return }
            do {
                try save(AttestationRecord(app: app, keyId: "", notBefore: record.notBefore))
            } catch {
                DepotLog.error("\(error)", category: "report")
            }
        }

        static var encoder: JSONEncoder {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            encoder.dateEncodingStrategy = .iso8601
            return encoder
        }
        static var decoder: JSONDecoder {
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            return decoder
        }
    }
}
