// On Apple platforms, `DCAppAttestService.shared` is what ``DeviceReporter/attestation`` takes.
// Linux has no DeviceCheck: GuideCompileTests compiles this file into the integration guide's app
// target there, against the DeviceCheck stand-in (Tests/DeviceCheck), with DEPOT_DEVICECHECK_STANDIN
// (outside DepotClient, the protocol is imported: hence the second form).
#if canImport(DeviceCheck) && (!os(Linux) || DEPOT_DEVICECHECK_STANDIN)
import DeviceCheck
#if DEPOT_DEVICECHECK_STANDIN
import DepotClient
#endif

// Apple's header declares `DCAppAttestService` without `NS_SWIFT_SENDABLE` (Swift imports it as a
// non-Sendable class), yet it is a service with no mutable state of its own, reached through
// `shared`, whose completion handlers are `@Sendable` (called on queues of its own). The reporter
// keeps it in a `Sendable` value: the conformance says so, unchecked.
@available(iOS 14.0, macOS 11.0, macCatalyst 14.0, tvOS 15.0, watchOS 9.0, visionOS 1.0, *)
extension DCAppAttestService: @retroactive @unchecked Sendable {}

#if DEPOT_DEVICECHECK_STANDIN
@available(iOS 14.0, macOS 11.0, macCatalyst 14.0, tvOS 15.0, watchOS 9.0, visionOS 1.0, *)
extension DCAppAttestService: @retroactive AppAttesting {}
#else
/// The system's App Attest: `DCAppAttestService.shared` is an ``AppAttesting``.
@available(iOS 14.0, macOS 11.0, macCatalyst 14.0, tvOS 15.0, watchOS 9.0, visionOS 1.0, *)
extension DCAppAttestService: AppAttesting {}
#endif
#endif
