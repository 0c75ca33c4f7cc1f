import DepotCore
import Foundation

/// The App Attest environment an app's keys are made in: the `aaguid` of an attestation says which.
public enum AppAttestEnvironment: String, Codable, Sendable, CaseIterable {
    case production, development

    /// The authenticator data's `aaguid` for keys of this environment (16 bytes).
    public var aaguid: [UInt8] {
        switch self {
        case .production: Array("appattest".utf8) + [UInt8](repeating: 0, count: 7)
        case .development: Array("appattestdevelop".utf8)
        }
    }
}

/// Why an attestation or an assertion was refused: the check that refused it (named as Apple's
/// validation steps name them) and what was wrong, with what was expected.
public struct AppAttestRefusal: Error, CustomStringConvertible, Sendable, Equatable {
    /// The check that refused.
    public enum Check: String, Sendable {
        case format, chain, nonce, keyID = "key_id", appID = "app_id", counter, environment, credentialID = "credential_id", signature
    }

    public let check: Check
    /// Says what was wrong and what was expected.
    public let detail: String
    public var description: String { "\(check.rawValue): \(detail)" }

    public init(_ check: Check, _ detail: String) {
        self.check = check
        self.detail = detail
    }
}

/// A key Apple attested: what the origin keeps to verify the key's assertions.
public struct AttestedKey: Codable, Sendable, Equatable {
    /// 32 bytes: SHA-256 of ``publicKey``.
    public var keyID: [UInt8]
    /// 65 bytes: the X9.63 uncompressed P-256 point.
    public var publicKey: [UInt8]
    public var environment: AppAttestEnvironment
    /// The attestation statement's receipt, kept for Apple's fraud-metric service; not checked here.
    public var receipt: [UInt8]

    public init(keyID: [UInt8], publicKey: [UInt8], environment: AppAttestEnvironment, receipt: [UInt8]) {
        self.keyID = keyID
        self.publicKey = publicKey
        self.environment = environment
        self.receipt = receipt
    }
}

/// Verifies App Attest attestations and assertions for one App ID and environment, as Apple's
/// "Validating apps that connect to your server" says, against one pinned anchor.
public struct AppAttestVerifier: Sendable {
    /// The App ID, `TEAMID.BUNDLEID`.
    public let appID: String
    public let environment: AppAttestEnvironment
    /// The only trusted certificate (DER): Apple's root, or a test CA's in tests.
    public let anchor: [UInt8]

    /// A bound checked before any parsing: attestation objects above this are refused (format).
    public static let maximumAttestationBytes = 16_384
    /// A bound checked before any parsing: assertions above this are refused (format).
    public static let maximumAssertionBytes = 1_024
    /// The OID of the leaf certificate's nonce extension.
    static let nonceOID = "1.2.840.113635.100.8.2"

    public init(appID: String, environment: AppAttestEnvironment, anchor: [UInt8] = AppAttestVerifier.appleRoot) {
        self.appID = appID
        self.environment = environment
        self.anchor = anchor
    }

    /// Apple's steps 1-9 of "Validating apps that connect to your server". `clientDataHash` is the
    /// exact bytes the app passed to `attestKey(_:clientDataHash:)`.
    public func attestation(_ object: [UInt8], keyID: [UInt8], clientDataHash: [UInt8], at: Date) throws(AppAttestRefusal) -> AttestedKey {
        let parsed = try AttestationObject(object)
        let leaf: X509Certificate
        do {
            leaf = try X509Certificate(der: parsed.certificates[0])
        } catch {
            throw AppAttestRefusal(.format, "the leaf certificate (x5c[0]) is not a DER certificate: \(error)")
        }
        // 1. The chain leads to the anchor at `at`; only the anchor is trusted, never x5c's certificates.
        do {
            try X509Chain.verify(parsed.certificates, anchor: anchor, at: at)
        } catch {
            throw AppAttestRefusal(.chain, "x5c does not chain to the \(anchorName) at \(Self.iso(at)): \(error)")
        }
        // 2-4. The leaf's nonce extension is SHA-256(authData ‖ clientDataHash).
        let nonce = SHA256Hasher.hash(parsed.authenticatorData + clientDataHash)
        let extensionValue: [UInt8]?
        do {
            extensionValue = try leaf.extensionValue(oid: Self.nonceOID)
        } catch {
            throw AppAttestRefusal(.nonce, "the leaf's nonce extension \(Self.nonceOID) cannot be read: \(error)")
        }
        guard let extensionValue else {
            throw AppAttestRefusal(.nonce, "the leaf certificate has no nonce extension \(Self.nonceOID)")
        }
        guard let certified = DERNonce.octets(extensionValue) else {
            throw AppAttestRefusal(.nonce, "the nonce extension is not SEQUENCE { [1] OCTET STRING (32 bytes) }")
        }
        guard certified == nonce else {
            throw AppAttestRefusal(.nonce, "the certificate's nonce is \(Self.hex(certified)), expected SHA-256(authData ‖ clientDataHash) = \(Self.hex(nonce)) (other client data, or altered authData)")
        }
        // 5. The key id is SHA-256 of the leaf's public key.
        let publicKey: [UInt8]
        do {
            publicKey = try leaf.p256PublicKey()
        } catch {
            throw AppAttestRefusal(.format, "the leaf certificate's key: \(error)")
        }
        let computedKeyID = SHA256Hasher.hash(publicKey)
        guard computedKeyID == keyID else {
            throw AppAttestRefusal(.keyID, "the key id given is \(Self.base64(keyID)), expected SHA-256 of the certificate's public key, \(Self.base64(computedKeyID))")
        }
        let data = parsed.data
        // Not one of Apple's numbered steps: authData's credential public key (WebAuthn's COSE
        // key) must be the certified key, so that no reader of the stored object finds a second one.
        guard data.credentialPublicKey == publicKey else {
            throw AppAttestRefusal(.keyID, "the credential public key in authData is not the certificate's public key")
        }
        // 6. rpIdHash is SHA-256 of the App ID.
        let rpIDHash = SHA256Hasher.hash(Array(appID.utf8))
        guard data.rpIDHash == rpIDHash else {
            throw AppAttestRefusal(.appID, "authData's rpIdHash is \(Self.hex(data.rpIDHash)), expected SHA-256(\"\(appID)\") = \(Self.hex(rpIDHash)) (an attestation for another App ID)")
        }
        // 7. A new key has signed nothing yet.
        guard data.counter == 0 else {
            throw AppAttestRefusal(.counter, "authData's counter is \(data.counter), expected 0 for a new key")
        }
        // 8. The aaguid is the configured environment's.
        guard data.aaguid == environment.aaguid else {
            let other = AppAttestEnvironment.allCases.first { $0.aaguid == data.aaguid }
            throw AppAttestRefusal(.environment, "the aaguid is \(other.map { "\($0.rawValue)'s" } ?? Self.hex(data.aaguid)), expected \(environment.rawValue)'s \(Self.printable(environment.aaguid))")
        }
        // 9. The credential id is the key id.
        guard data.credentialID == keyID else {
            throw AppAttestRefusal(.credentialID, "authData's credential id is \(Self.base64(data.credentialID)), expected the key id \(Self.base64(keyID))")
        }
        return AttestedKey(keyID: keyID, publicKey: publicKey, environment: environment, receipt: parsed.receipt)
    }

    private var anchorName: String { anchor == Self.appleRoot ? "Apple App Attestation Root CA" : "configured test anchor" }

    static func hex(_ bytes: [UInt8]) -> String { Hex.encode(bytes) }
    static func base64(_ bytes: [UInt8]) -> String { Data(bytes).base64EncodedString() }
    static func printable(_ aaguid: [UInt8]) -> String {
        "\"" + String(decoding: aaguid.prefix { $0 != 0 }, as: UTF8.self) + "\"" + (aaguid.contains(0) ? " + zeros" : "")
    }
    static func iso(_ date: Date) -> String { ISO8601DateFormatter().string(from: date) }
}
