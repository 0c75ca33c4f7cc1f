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
    /// `func extensionWillTerminate()` — deprecated in iOS 16.4: "extensionWillTerminate will not
    /// be invoked in all applicable circumstances and should not be relied upon."
    @available(iOS, introduced: 16.1, deprecated: 16.4, message: "extensionWillTerminate will not be invoked in all applicable circumstances and should not be relied upon.")
    @available(macOS, introduced: 13.0, deprecated: 13.3, message: "extensionWillTerminate will not be invoked in all applicable circumstances and should not be relied upon.")
    func extensionWillTerminate()
}

extension BADownloaderExtension {
    public func downloads(for request: BAContentRequest, manifestURL: URL, extensionInfo: BAAppExtensionInfo) -> Set<BADownload> { [] }
    public func backgroundDownload(_ finishedDownload: BADownload, finishedWithFileURL fileURL: URL) {}
    public func backgroundDownload(_ failedDownload: BADownload, failedWithError error: any Error) {}
    public func backgroundDownload(_ download: BADownload, didReceive challenge: URLAuthenticationChallenge) async -> (URLSession.AuthChallengeDisposition, URLCredential?) {
        (.performDefaultHandling, nil)
    }
    @available(iOS, introduced: 16.1, deprecated: 16.4)
    @available(macOS, introduced: 13.0, deprecated: 13.3)
    public func extensionWillTerminate() {}
}

/// `protocol BADownloadManagerDelegate : NSObjectProtocol` (iOS 16.1+); every method
/// `optional` (an Objective-C protocol: modelled here by default implementations). Apple's
/// `BADownloaderExtension.h`: the extension's finished and failed callbacks are called only when
/// no download manager delegate handles the event.
public protocol BADownloadManagerDelegate: NSObjectProtocol {
    /// `optional func downloadDidBegin(_ download: BADownload)`
    func downloadDidBegin(_ download: BADownload)
    /// `optional func downloadDidPause(_ download: BADownload)`
    func downloadDidPause(_ download: BADownload)
    /// `optional func download(_ download: BADownload, didWriteBytes bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite totalExpectedBytes: Int64)`
    func download(_ download: BADownload, didWriteBytes bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite totalExpectedBytes: Int64)
    /// `optional func download(_ download: BADownload, didReceive challenge: URLAuthenticationChallenge) async -> (URLSession.AuthChallengeDisposition, URLCredential?)`
    func download(_ download: BADownload, didReceive challenge: URLAuthenticationChallenge) async -> (URLSession.AuthChallengeDisposition, URLCredential?)
    /// `optional func download(_ download: BADownload, failedWithError error: any Error)`
    func download(_ download: BADownload, failedWithError error: any Error)
    /// `optional func download(_ download: BADownload, finishedWithFileURL fileURL: URL)`
    func download(_ download: BADownload, finishedWithFileURL fileURL: URL)
}

extension BADownloadManagerDelegate {
    public func downloadDidBegin(_ download: BADownload) {}
    public func downloadDidPause(_ download: BADownload) {}
    public func download(_ download: BADownload, didWriteBytes bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite totalExpectedBytes: Int64) {}
    public func download(_ download: BADownload, didReceive challenge: URLAuthenticationChallenge) async -> (URLSession.AuthChallengeDisposition, URLCredential?) {
        (.performDefaultHandling, nil)
    }
    public func download(_ download: BADownload, failedWithError error: any Error) {}
    public func download(_ download: BADownload, finishedWithFileURL fileURL: URL) {}
}

// MARK: The manager

/// `class BADownloadManager` (iOS 16.1+).
open class BADownloadManager: NSObject, @unchecked Sendable {
    /// `class var shared: BADownloadManager { get }` (iOS 16.1+): get-only.
    public static let shared = BADownloadManager()
    /// `weak var delegate: (any BADownloadManagerDelegate)? { get set }` (iOS 16.1+).
    public weak var delegate: (any BADownloadManagerDelegate)?
    /// What a test says the system has scheduled (not Apple's API).
    public var scheduledForTests: [BADownload] = []
    /// Who a test says is calling (not Apple's API): the header's refusals depend on it.
    public enum CallerForTests: Sendable { case foregroundApp, backgroundApp, downloaderExtension }
    /// The calling process, for ``startForegroundDownload(_:)`` (not Apple's API).
    public var callerForTests = CallerForTests.foregroundApp

    /// `func scheduleDownload(_ download: BADownload) throws` (iOS 16.1+).
    open func scheduleDownload(_ download: BADownload) throws { scheduledForTests.append(download) }
    /// `func startForegroundDownload(_ download: BADownload) throws` (iOS 16.1+).
    /// Apple's page: starts a new download now, or promotes "existing, queued downloads that are
    /// yet to start". Apple's header (`BADownloadManager.h`): from the download extension it fails
    /// with `BAErrorCode.callFromExtensionNotAllowed`, from an app in the background with
    /// `BAErrorCode.callFromInactiveProcessNotAllowed`. What a second object with an identifier
    /// already scheduled does is not documented (`downloadAlreadyScheduled` exists; no page says
    /// which call gives it): this stand-in promotes the held download, and the guide never relies
    /// on it (it passes the object `fetchCurrentDownloads()` returned).
    open func startForegroundDownload(_ download: BADownload) throws {
        switch callerForTests {
        case .downloaderExtension: throw NSError(domain: BAErrorDomain, code: BAErrorCode.callFromExtensionNotAllowed.rawValue)
        case .backgroundApp: throw NSError(domain: BAErrorDomain, code: BAErrorCode.callFromInactiveProcessNotAllowed.rawValue)
        case .foregroundApp: break
        }
        if scheduledForTests.contains(where: { $0.identifier == download.identifier }) { return }
        scheduledForTests.append(download)
    }
    /// `func cancel(_ download: BADownload) throws` (iOS 16.1+).
    open func cancel(_ download: BADownload) throws { scheduledForTests.removeAll { $0.identifier == download.identifier } }
    /// `func fetchCurrentDownloads() throws -> [BADownload]` (iOS 16.4+; Apple's header: "This
    /// method can block and should not be called from the main thread").
    open func fetchCurrentDownloads() throws -> [BADownload] { scheduledForTests }
    /// `func fetchCurrentDownloads(completionHandler: @escaping @Sendable ([BADownload], (any Error)?) -> Void)` (iOS 16.1+).
    open func fetchCurrentDownloads(completionHandler: @escaping @Sendable ([BADownload], (any Error)?) -> Void) { completionHandler(scheduledForTests, nil) }
    /// Its `async` form: `var currentDownloads: [BADownload] { get async throws }` (iOS 16.1+).
    open var currentDownloads: [BADownload] { get async throws { scheduledForTests } }

    /// `func withExclusiveControl(_ performHandler: @escaping (Bool, (any Error)?) -> Void)`
    /// (iOS 16.1–27.0: deprecated in iOS 27 for the `async` form; a deployment target below 27
    /// sees no warning).
    @available(iOS, introduced: 16.1, deprecated: 27.0)
    @available(macOS, introduced: 13.0, deprecated: 27.0)
    open func withExclusiveControl(_ performHandler: @escaping (Bool, (any Error)?) -> Void) { performHandler(true, nil) }
    /// `func withExclusiveControl(beforeDate date: Date, perform performHandler: @escaping (Bool, (any Error)?) -> Void)` (iOS 16.1–27.0).
    @available(iOS, introduced: 16.1, deprecated: 27.0)
    @available(macOS, introduced: 13.0, deprecated: 27.0)
    open func withExclusiveControl(beforeDate date: Date, perform performHandler: @escaping (Bool, (any Error)?) -> Void) { performHandler(true, nil) }

    #if BA_SDK_27
    /// iOS 27 SDK, back-deployed: `@backDeployed(before: iOS 27) final func withExclusiveControl<ReturnType>(_ body: @escaping () throws -> sending ReturnType) async throws -> sending ReturnType`
    public final func withExclusiveControl<ReturnType>(_ body: @escaping () throws -> sending ReturnType) async throws -> sending ReturnType { try body() }
    #endif
}

// MARK: Errors (iOS 17.0+; an Objective-C NS_ENUM)

/// Apple: `let BAErrorDomain: String` (iOS 17.0+). (iOS 16 reported the same codes in
/// `com.apple.backgroundassets.error`.)
@available(iOS 17.0, macOS 14.0, *)
public let BAErrorDomain = "BAErrorDomain"

/// Apple: `enum BAErrorCode` (iOS 17.0+), raw values as the SDK's.
@available(iOS 17.0, macOS 14.0, *)
public enum BAErrorCode: Int, Sendable {
    case downloadInvalid = 0
    case callFromExtensionNotAllowed = 50
    case callFromInactiveProcessNotAllowed = 51
    case callerConnectionNotAccepted = 55
    case callerConnectionInvalid = 56
    case downloadAlreadyScheduled = 100
    case downloadNotScheduled = 101
    case downloadFailedToStart = 102
    case downloadAlreadyFailed = 103
    case downloadEssentialDownloadNotPermitted = 109
    case downloadBackgroundActivityProhibited = 111
    case downloadWouldExceedAllowance = 112
    case downloadDoesNotExist = 113
    case sessionDownloadDisallowedByDomain = 202
    case sessionDownloadDisallowedByAllowance = 203
    case sessionDownloadAllowanceExceeded = 204
    case sessionDownloadNotPermittedBeforeAppLaunch = 206
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
