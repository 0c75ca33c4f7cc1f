import Foundation

/// What ``DeviceReporter`` needs of App Attest: exactly the `async` forms of DeviceCheck's
/// `DCAppAttestService` (iOS 14+, macOS 11+, tvOS 15+, watchOS 9+, visionOS 1+), as Apple's pages
/// declare them — `var isSupported: Bool { get }`, `func generateKey() async throws -> String`,
/// `func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data`,
/// `func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data` — so that
/// on Apple platforms `DCAppAttestService.shared` is one (DepotClient declares the conformance),
/// and tests pass a software device in its place.
///
/// Apple: `isSupported` is false on a Mac (Catalyst and iOS apps on Apple silicon included), and
/// `generateKey` fails in an app extension whatever `isSupported` says: attest from the app, never
/// from the Background Assets extension.
public protocol AppAttesting: Sendable {
    /// Whether this device offers App Attest.
    var isSupported: Bool { get }
    /// A new key in the Secure Enclave; its identifier (base64 of the SHA-256 of its public key).
    func generateKey() async throws -> String
    /// Apple's attestation of `keyId`, over `clientDataHash` (the hash of data that embeds the
    /// server's one-time challenge).
    func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data
    /// An assertion by `keyId` over `clientDataHash`: the key's signature and its counter.
    func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data
}

/// DeviceCheck's errors, read from any `Error` by domain and code (`DCErrorDomain`,
/// `DCError.Code`), so that DepotClient needs the framework nowhere but in the conformance below.
enum AppAttestError {
    /// `DCErrorDomain`.
    static let domain = "com.apple.devicecheck.error"
    /// `DCError.Code.invalidKey`: Apple — the key was already attested (attestKey), is not attested
    /// (generateAssertion), or the service rejects it. The key is of no further use.
    static let invalidKey = 3
    /// `DCError.Code.serverUnavailable`: Apple — retry the attestation later "using the same key
    /// and the same value for the `clientDataHash` parameter".
    static let serverUnavailable = 4

    static func code(of error: any Error) -> Int? {
        let error = error as NSError
        return error.domain == domain ? error.code : nil
    }
}
