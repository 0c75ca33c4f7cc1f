// A stand-in for Apple's DeviceCheck framework (App Attest), which Linux lacks, so that the
// integration guide's code compiles here. Written from Apple's documentation pages and the
// framework's header (DCAppAttestService.h, DCError.h), symbol by symbol: the same names,
// argument labels, types, optionality, `async`/`throws`, class-or-struct shape and Sendable-ness
// (`DCAppAttestService` is not `NS_SWIFT_SENDABLE` in the header, so it is not `Sendable` here; its
// completion handlers are `@Sendable`, as its pages show), each symbol's availability beside it.
// Only what the guide uses, plus its close neighbours. Bodies do the least: this "device" does not
// support App Attest (`isSupported` is false, as on a Mac or a simulator, and the calls fail with
// `featureUnsupported`); they are not the framework's behaviour.
//
// Not mirrored: `DCDevice` (DeviceCheck tokens), Objective-C bridging of `DCError` to `NSError`
// (the `_BridgedStoredNSError` machinery: here a `CustomNSError` with the same domain and codes),
// and `DCError.Code` being non-frozen (an imported `NS_ERROR_ENUM`; here a Swift enum).

@_exported import Foundation

/// `let DCErrorDomain: String` (iOS 11.0+, macOS 10.15+, tvOS 11.0+, watchOS 9.0+, visionOS 1.0+).
public let DCErrorDomain = "com.apple.devicecheck.error"

/// `struct DCError` (iOS 11.0+, macOS 10.15+, Mac Catalyst 13.1+, tvOS 11.0+, watchOS 9.0+, visionOS 1.0+).
public struct DCError: CustomNSError, Hashable, Sendable {
    /// `enum Code` — "DeviceCheck error codes." Raw values as in DCError.h.
    public enum Code: Int, Hashable, Sendable {
        /// `case unknownSystemFailure` — "A failure has occurred, such as the failure to generate a token."
        case unknownSystemFailure = 0
        /// `case featureUnsupported` — "DeviceCheck is unavailable on this device."
        case featureUnsupported = 1
        /// `case invalidInput` — "…your app provides data that isn't formatted correctly."
        case invalidInput = 2
        /// `case invalidKey` — "An error caused by a failed attempt to use the App Attest key."
        case invalidKey = 3
        /// `case serverUnavailable` — "…a failed attempt to contact the App Attest service during an attestation."
        case serverUnavailable = 4
    }

    /// The error's code.
    public let code: Code

    /// `init(_ code: DCError.Code, userInfo: [String : Any] = [:])`, as every imported error struct has.
    public init(_ code: Code, userInfo: [String: Any] = [:]) {
        self.code = code
    }

    /// `static var errorDomain: String { get }`
    public static var errorDomain: String { DCErrorDomain }
    public var errorCode: Int { code.rawValue }

    /// `static var unknownSystemFailure: DCError.Code { get }`
    public static var unknownSystemFailure: Code { .unknownSystemFailure }
    /// `static var featureUnsupported: DCError.Code { get }`
    public static var featureUnsupported: Code { .featureUnsupported }
    /// `static var invalidInput: DCError.Code { get }`
    public static var invalidInput: Code { .invalidInput }
    /// `static var invalidKey: DCError.Code { get }`
    public static var invalidKey: Code { .invalidKey }
    /// `static var serverUnavailable: DCError.Code { get }`
    public static var serverUnavailable: Code { .serverUnavailable }
}

/// `catch DCError.invalidKey`, as imported error structs allow (Swift's `_BridgedStoredNSError`).
public func ~= (match: DCError.Code, error: any Error) -> Bool {
    let error = error as NSError
    return error.domain == DCErrorDomain && error.code == match.rawValue
}

/// `class DCAppAttestService` (iOS 14.0+, iPadOS 14.0+, Mac Catalyst 14.0+, macOS 11.0+, tvOS 15.0+,
/// visionOS 1.0+, watchOS 9.0+). Not `Sendable` (the header does not say so).
open class DCAppAttestService: NSObject {
    /// `class var shared: DCAppAttestService { get }`
    open class var shared: DCAppAttestService { DCAppAttestService() }

    /// `var isSupported: Bool { get }` — false here, as on a Mac; Apple: `generateKey` fails in an
    /// app extension whatever this says.
    open var isSupported: Bool { false }

    /// `func generateKey(completionHandler: @escaping @Sendable (String?, (any Error)?) -> Void)`
    open func generateKey(completionHandler: @escaping @Sendable (String?, (any Error)?) -> Void) {
        completionHandler(nil, DCError(.featureUnsupported))
    }

    /// Its `async` form: `func generateKey() async throws -> String`
    open func generateKey() async throws -> String {
        throw DCError(.featureUnsupported)
    }

    /// `func attestKey(_ keyId: String, clientDataHash: Data, completionHandler: @escaping @Sendable (Data?, (any Error)?) -> Void)`
    open func attestKey(_ keyId: String, clientDataHash: Data, completionHandler: @escaping @Sendable (Data?, (any Error)?) -> Void) {
        completionHandler(nil, DCError(.featureUnsupported))
    }

    /// Its `async` form: `func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data`
    open func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data {
        throw DCError(.featureUnsupported)
    }

    /// `func generateAssertion(_ keyId: String, clientDataHash: Data, completionHandler: @escaping @Sendable (Data?, (any Error)?) -> Void)`
    open func generateAssertion(_ keyId: String, clientDataHash: Data, completionHandler: @escaping @Sendable (Data?, (any Error)?) -> Void) {
        completionHandler(nil, DCError(.featureUnsupported))
    }

    /// Its `async` form: `func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data`
    open func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data {
        throw DCError(.featureUnsupported)
    }
}
