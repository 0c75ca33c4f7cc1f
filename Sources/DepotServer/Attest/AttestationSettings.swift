import Foundation

/// An app's App Attest settings (`depot attest configure`): the App ID its genuine copies run
/// as, the environment their keys are attested in, and whether its rollouts' guard counts only
/// attested reports.
public struct AttestationSettings: Codable, Sendable, Hashable {
    /// `TEAMID.BUNDLEID`: the App ID whose SHA-256 is an attested key's `rpIdHash`.
    public var appID: String
    /// Where the app's keys are attested: `production` (App Store, TestFlight) or `development`
    /// (builds signed for development, with the `com.apple.developer.devicecheck.appattest-environment`
    /// entitlement so set).
    public var environment: AppAttestEnvironment
    /// Whether a rollout of the app counts only attested reports (``RolloutRecord``'s `attestedOnly`).
    public var required: Bool

    public init(appID: String, environment: AppAttestEnvironment = .production, required: Bool = false) throws {
        guard Self.isValidAppID(appID) else { throw DepotError.badRequest(Self.appIDRule(appID)) }
        (self.appID, self.environment, self.required) = (appID, environment, required)
    }

    /// Whether `text` is `TEAMID.BUNDLEID`: a team ID of 10 upper-case letters and digits, a dot,
    /// and a bundle ID of 1–155 of `A-Z a-z 0-9 . -` that neither starts nor ends with a dot nor
    /// holds two in a row.
    public static func isValidAppID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count >= 12, bytes[10] == UInt8(ascii: "."),
              bytes[0..<10].allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) }) else { return false }
        let bundle = bytes[11...]
        guard bundle.count <= 155, bundle.first != UInt8(ascii: "."), bundle.last != UInt8(ascii: ".") else { return false }
        var previous: UInt8 = 0
        for byte in bundle {
            let allowed = byte == 0x2E || byte == 0x2D || (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
            guard allowed, !(byte == 0x2E && previous == 0x2E) else { return false }
            previous = byte
        }
        return true
    }

    /// What is wrong with an App ID, for the operator.
    static func appIDRule(_ text: String) -> String {
        "\"\(text)\" is not an App ID: give TEAMID.BUNDLEID, the team ID (10 upper-case letters and digits, from your Apple Developer account's Membership page) and the bundle ID, e.g. ABCDE12345.com.example.game"
    }
}
