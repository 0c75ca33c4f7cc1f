// A stand-in for the part of Apple's UIKit that the integration guide's app code uses, so that
// the guide compiles here (GuideCompileTests builds it as a module named UIKit). Declared as
// Apple's pages declare each symbol: `@MainActor class UIApplication`; its `shared`;
// `nonisolated func beginBackgroundTask(expirationHandler:)` and `endBackgroundTask(_:)` (iOS 4.0;
// the latter "can be safely called on a non-main thread"); `struct UIBackgroundTaskIdentifier`
// (Hashable, RawRepresentable, Sendable) and its `invalid`. Bodies do the least; they are not
// UIKit's behaviour.

@MainActor
open class UIApplication {
    public static let shared = UIApplication()

    nonisolated public func beginBackgroundTask(expirationHandler handler: (@MainActor @Sendable () -> Void)? = nil) -> UIBackgroundTaskIdentifier {
        UIBackgroundTaskIdentifier(rawValue: 1)
    }

    nonisolated public func endBackgroundTask(_ identifier: UIBackgroundTaskIdentifier) {}
}

public struct UIBackgroundTaskIdentifier: RawRepresentable, Hashable, Sendable {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public static let invalid = UIBackgroundTaskIdentifier(rawValue: 0)
}
