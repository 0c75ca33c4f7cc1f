// TEMPORARY: the verifier's public API as the design fixes it, until i53-verifier is merged
// (then this file goes). Its attestation refuses everything.
import Foundation

public enum AppAttestEnvironment: String, Codable, Sendable, CaseIterable { case production, development }

public struct AppAttestRefusal: Error, CustomStringConvertible, Sendable, Equatable {
    public enum Check: String, Sendable { case format, chain, nonce, keyID = "key_id", appID = "app_id", counter, environment, credentialID = "credential_id", signature }
    public let check: Check
    public let detail: String
    public var description: String { "\(check.rawValue): \(detail)" }
}

public struct AttestedKey: Codable, Sendable, Equatable {
    public var keyID: [UInt8]
    public var publicKey: [UInt8]
    public var environment: AppAttestEnvironment
    public var receipt: [UInt8]
}

public struct AppAttestVerifier: Sendable {
    public static let appleRootSHA256 = "1cb9823ba28ba6ad2d33a006941de2ae4f513ef1d4e831b9f7e0fa7b6242c932"
    public static let appleRoot: [UInt8] = []
    public init(appID: String, environment: AppAttestEnvironment, anchor: [UInt8] = AppAttestVerifier.appleRoot) {}
    public func attestation(_ object: [UInt8], keyID: [UInt8], clientDataHash: [UInt8], at: Date) throws(AppAttestRefusal) -> AttestedKey {
        throw AppAttestRefusal(check: .format, detail: "not built yet")
    }
    public static let maximumAttestationBytes = 16_384
    public static let maximumAssertionBytes = 1_024
    public static func anchorFromEnvironment() -> [UInt8] { appleRoot }
}
