// A stand-in for Apple's BackgroundAssets framework, which Linux lacks, so that the integration
// guide's code compiles here. Written from Apple's documentation pages, symbol by symbol, with
// the same names, argument labels, types, optionality, `async`/`throws` and class-or-struct
// shape, and each symbol's availability beside it. Only what the guide uses, plus its close
// neighbours. Two SDKs: the iOS 26 SDK (Xcode 26) by default, the iOS 27 SDK with
// `-D BA_SDK_27`. Bodies do the least that lets a test drive the guide's code; they are not
// the framework's behaviour.
//
// Not mirrored: the ExtensionFoundation plumbing behind `AppExtension` (its configuration
// type), Objective-C bridging, `Sendable` annotations of the real headers.

@_exported import Foundation
#if canImport(FoundationNetworking)
@_exported import FoundationNetworking
#endif

// MARK: ExtensionFoundation (what BADownloaderExtension refines)

/// ExtensionFoundation's `AppExtension` (iOS 16.1+), reduced to what an `@main` extension needs.
public protocol AppExtension {
    /// Apple: `@MainActor @preconcurrency init()` (ExtensionFoundation, iOS 16.0+).
    @MainActor @preconcurrency init()
}

extension AppExtension {
    public static func main() {}
}

// MARK: Downloads

/// `class BADownload` (iOS 16.1+).
open class BADownload: NSObject, @unchecked Sendable {
    /// `struct BADownload.Priority` (iOS 16.1+): `min`, `default`, `max`.
    public struct Priority: RawRepresentable, Hashable, Sendable {
        public var rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        public static let min = Priority(rawValue: -100)
        public static let `default` = Priority(rawValue: 0)
        public static let max = Priority(rawValue: 100)
    }

    /// `var identifier: String { get }` (iOS 16.1+).
    public let identifier: String
    /// `var uniqueIdentifier: String { get }` (iOS 16.1+).
    public let uniqueIdentifier = UUID().uuidString
    /// `var priority: BADownload.Priority { get }` (iOS 16.1+).
    public let priority: Priority
    /// `var isEssential: Bool { get }` (iOS 16.4+).
    public let isEssential: Bool

    init(identifier: String, essential: Bool, priority: Priority) {
        (self.identifier, isEssential, self.priority) = (identifier, essential, priority)
    }

    /// `func removingEssential() -> Self` (iOS 16.4+).
    open func removingEssential() -> Self { self }

    open override func isEqual(_ object: Any?) -> Bool { (object as? BADownload)?.identifier == identifier }
    open override var hash: Int { identifier.hashValue }
}

/// `class BAURLDownload` (iOS 16.1+).
open class BAURLDownload: BADownload, @unchecked Sendable {
    public let request: URLRequest
    public let fileSize: Int
    public let applicationGroupIdentifier: String

    /// `init(identifier: String, request: URLRequest, essential: Bool, fileSize: Int,
    /// applicationGroupIdentifier: String, priority: BADownload.Priority)` (iOS 16.4+).
    public required init(identifier: String, request: URLRequest, essential: Bool, fileSize: Int, applicationGroupIdentifier: String, priority: BADownload.Priority) {
        (self.request, self.fileSize, self.applicationGroupIdentifier) = (request, fileSize, applicationGroupIdentifier)
        super.init(identifier: identifier, essential: essential, priority: priority)
    }

    /// `init(identifier: String, request: URLRequest, fileSize: Int, applicationGroupIdentifier: String)` (iOS 16.4+).
    public convenience init(identifier: String, request: URLRequest, fileSize: Int, applicationGroupIdentifier: String) {
        self.init(identifier: identifier, request: request, essential: false, fileSize: fileSize, applicationGroupIdentifier: applicationGroupIdentifier, priority: .default)
    }

    open override func removingEssential() -> Self {
        Self(identifier: identifier, request: request, essential: false, fileSize: fileSize, applicationGroupIdentifier: applicationGroupIdentifier, priority: priority)
    }
}

// MARK: The extension

/// `enum BAContentRequest` (iOS 16.1+), imported from an Objective-C `NS_ENUM`: not frozen, so
/// a switch over it needs a `default` and never counts as exhaustive. Modelled as a raw-value
/// struct, which a switch matches case by case in exactly that way (a Swift enum here would be
/// frozen, and the compiler would call the `default` dead).
public struct BAContentRequest: RawRepresentable, Hashable, Sendable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let install = BAContentRequest(rawValue: 1)
    public static let update = BAContentRequest(rawValue: 2)
    public static let periodic = BAContentRequest(rawValue: 3)
    #if BA_SDK_27
    /// iOS 27+: a content request resulting from someone changing the app's preferred language.
    public static let languageChange = BAContentRequest(rawValue: 4)
    #endif
}

/// `class BAAppExtensionInfo` (iOS 16.1+).
open class BAAppExtensionInfo: NSObject, @unchecked Sendable {
    /// `var restrictedDownloadSizeRemaining: Int? { get }` (iOS 16.1+): nil when not restricted.
    public internal(set) var restrictedDownloadSizeRemaining: Int?
    /// `var restrictedEssentialDownloadSizeRemaining: Int? { get }` (iOS 16.4+).
    public internal(set) var restrictedEssentialDownloadSizeRemaining: Int?

    public init(restrictedDownloadSizeRemaining: Int? = nil, restrictedEssentialDownloadSizeRemaining: Int? = nil) {
        (self.restrictedDownloadSizeRemaining, self.restrictedEssentialDownloadSizeRemaining) = (restrictedDownloadSizeRemaining, restrictedEssentialDownloadSizeRemaining)
    }
}

/// `protocol BADownloaderExtension : AppExtension` (iOS 16.1+); every requirement has a default.
public protocol BADownloaderExtension: AppExtension {
    /// `func downloads(for request: BAContentRequest, manifestURL: URL, extensionInfo: BAAppExtensionInfo) -> Set<BADownload>`
    func downloads(for request: BAContentRequest, manifestURL: URL, extensionInfo: BAAppExtensionInfo) -> Set<BADownload>
    /// `func backgroundDownload(_ finishedDownload: BADownload, finishedWithFileURL fileURL: URL)`
    func backgroundDownload(_ finishedDownload: BADownload, finishedWithFileURL fileURL: URL)
    /// `func backgroundDownload(_ failedDownload: BADownload, failedWithError error: any Error)`
    func backgroundDownload(_ failedDownload: BADownload, failedWithError error: any Error)
    /// `func backgroundDownload(_ download: BADownload, didReceive challenge: URLAuthenticationChallenge) async -> (URLSession.AuthChallengeDisposition, URLCredential?)`
    func backgroundDownload(_ download: BADownload, didReceive challenge: URLAuthenticationChallenge) async -> (URLSession.AuthChallengeDisposition, URLCredential?)
    /// `func extensionWillTerminate()`
    func extensionWillTerminate()
}

extension BADownloaderExtension {
    public func downloads(for request: BAContentRequest, manifestURL: URL, extensionInfo: BAAppExtensionInfo) -> Set<BADownload> { [] }
    public func backgroundDownload(_ finishedDownload: BADownload, finishedWithFileURL fileURL: URL) {}
    public func backgroundDownload(_ failedDownload: BADownload, failedWithError error: any Error) {}
    public func backgroundDownload(_ download: BADownload, didReceive challenge: URLAuthenticationChallenge) async -> (URLSession.AuthChallengeDisposition, URLCredential?) {
        (.performDefaultHandling, nil)
    }
    public func extensionWillTerminate() {}
}

// MARK: The manager

/// `class BADownloadManager` (iOS 16.1+).
open class BADownloadManager: NSObject, @unchecked Sendable {
    /// `class var shared: BADownloadManager { get }`
    nonisolated(unsafe) public static var shared = BADownloadManager()
    /// What a test says the system has scheduled (not Apple's API).
    public var scheduledForTests: [BADownload] = []

    /// `func scheduleDownload(_ download: BADownload) throws` (iOS 16.1+).
    open func scheduleDownload(_ download: BADownload) throws { scheduledForTests.append(download) }
    /// `func startForegroundDownload(_ download: BADownload) throws` (iOS 16.1+).
    /// Apple: promotes a download the system already has (one it returned, from
    /// `fetchCurrentDownloads()`); another object with a scheduled identifier fails with
    /// `BAErrorCode.downloadAlreadyScheduled`.
    open func startForegroundDownload(_ download: BADownload) throws {
        if let held = scheduledForTests.first(where: { $0.identifier == download.identifier }) {
            guard held === download else { throw NSError(domain: BAErrorDomain, code: BAErrorCode.downloadAlreadyScheduled.rawValue) }
            return
        }
        scheduledForTests.append(download)
    }
    /// `func cancel(_ download: BADownload) throws` (iOS 16.1+).
    open func cancel(_ download: BADownload) throws { scheduledForTests.removeAll { $0.identifier == download.identifier } }
    /// `func fetchCurrentDownloads() throws -> [BADownload]` (iOS 16.4+; it may block: not on the main thread).
    open func fetchCurrentDownloads() throws -> [BADownload] { scheduledForTests }

    /// `func withExclusiveControl(_ performHandler: @escaping (Bool, (any Error)?) -> Void)`
    /// (iOS 16.1+; deprecated in the iOS 27 SDK for the `async` form).
    open func withExclusiveControl(_ performHandler: @escaping (Bool, (any Error)?) -> Void) { performHandler(true, nil) }
    /// `func withExclusiveControl(beforeDate date: Date, perform performHandler: @escaping (Bool, (any Error)?) -> Void)` (iOS 16.1+).
    open func withExclusiveControl(beforeDate date: Date, perform performHandler: @escaping (Bool, (any Error)?) -> Void) { performHandler(true, nil) }

    #if BA_SDK_27
    /// iOS 27 SDK, back-deployed: `@backDeployed(before: iOS 27) final func withExclusiveControl<ReturnType>(_ body: @escaping () throws -> sending ReturnType) async throws -> sending ReturnType`
    public final func withExclusiveControl<ReturnType>(_ body: @escaping () throws -> sending ReturnType) async throws -> sending ReturnType { try body() }
    #endif
}

// MARK: Errors (iOS 17.0+; an Objective-C NS_ENUM)

/// Apple: `let BAErrorDomain: String`.
public let BAErrorDomain = "BAErrorDomain"

/// Apple: `enum BAErrorCode` (only the cases the guide meets; raw values as the SDK's).
public enum BAErrorCode: Int, Sendable {
    case downloadInvalid = 0
    case downloadAlreadyScheduled = 100
    case downloadNotScheduled = 101
    case downloadFailedToStart = 102
}

// MARK: Foundation on Apple platforms only

#if os(Linux)
extension FileManager {
    /// Apple platforms' `containerURL(forSecurityApplicationGroupIdentifier:)`, which Linux's
    /// Foundation lacks: a folder under the temporary directory here.
    public func containerURL(forSecurityApplicationGroupIdentifier groupIdentifier: String) -> URL? {
        URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("app-groups/" + groupIdentifier)
    }
}
#endif
