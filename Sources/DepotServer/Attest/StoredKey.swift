import DepotCore
import Foundation

/// An App Attest key the origin accepted, as `apps/<app>/attest/<keyIdHex>.json` holds it:
/// `{"keyId", "publicKey", "environment", "receipt", "attestedAt", "counter", "revokedAt"?}`,
/// the byte fields in base64.
public struct StoredKey: Codable, Sendable, Equatable {
    /// What the attestation proved: the key id, its public key, its environment, Apple's receipt.
    public var key: AttestedKey
    /// The highest assertion counter seen (0 at attestation); an assertion must exceed it.
    public var counter: UInt32
    /// When the origin accepted the attestation.
    public var attestedAt: Date
    /// When an operator revoked it (`depot attest revoke`): its reports are refused, and it cannot attest again.
    public var revokedAt: Date?

    public init(key: AttestedKey, counter: UInt32 = 0, attestedAt: Date, revokedAt: Date? = nil) {
        (self.key, self.counter, self.attestedAt, self.revokedAt) = (key, counter, attestedAt, revokedAt)
    }

    /// The key id in base64, as the app's `DCAppAttestService` names it.
    public var keyID: String { Data(key.keyID).base64EncodedString() }
    public var isRevoked: Bool { revokedAt != nil }

    private enum CodingKeys: String, CodingKey { case keyId, publicKey, environment, receipt, attestedAt, counter, revokedAt }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        func bytes(_ field: CodingKeys, count: Int? = nil) throws -> [UInt8] {
            let text = try container.decode(String.self, forKey: field)
            guard let data = Data(base64Encoded: text), count.map({ data.count == $0 }) ?? true else {
                throw DecodingError.dataCorruptedError(forKey: field, in: container, debugDescription: "\(field.rawValue) is not base64\(count.map { " of \($0) bytes" } ?? "")")
            }
            return Array(data)
        }
        key = AttestedKey(
            keyID: try bytes(.keyId, count: 32), publicKey: try bytes(.publicKey, count: 65),
            environment: try container.decode(AppAttestEnvironment.self, forKey: .environment), receipt: try bytes(.receipt)
        )
        counter = try container.decode(UInt32.self, forKey: .counter)
        attestedAt = try container.decode(Date.self, forKey: .attestedAt)
        revokedAt = try container.decodeIfPresent(Date.self, forKey: .revokedAt)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(keyID, forKey: .keyId)
        try container.encode(Data(key.publicKey).base64EncodedString(), forKey: .publicKey)
        try container.encode(key.environment, forKey: .environment)
        try container.encode(Data(key.receipt).base64EncodedString(), forKey: .receipt)
        try container.encode(attestedAt, forKey: .attestedAt)
        try container.encode(counter, forKey: .counter)
        try container.encodeIfPresent(revokedAt, forKey: .revokedAt)
    }
}
