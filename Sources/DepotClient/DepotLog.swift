import DepotCore
import Foundation
#if canImport(os)
import os
#endif

/// What the client tells about its decisions: each event's plan (what it schedules, what it
/// defers for the allowance, what it leaves for another language), each delivery the install
/// step installs, keeps or drops (with the reason), each pack it removes. On Apple platforms
/// every message goes to the unified log (`os.Logger`, subsystem ``subsystem``, categories
/// `schedule` and `install`: filter on them in Console or with `log stream --predicate
/// 'subsystem == "org.assetdepot.client"'`); elsewhere (Linux) nowhere, unless a handler is set.
/// No message names the person or the device: pack ids, revisions, file paths inside the app's
/// containers and the reasons.
public enum DepotLog {
    /// How much a message matters.
    public enum Level: String, Sendable, Hashable {
        /// What happened as planned (scheduled, installed, removed).
        case info
        /// Something that keeps a pack from the device for now (refused, kept for later, deferred).
        case notice
        /// A failure: a pack refused, a step that could not run.
        case error
    }

    /// Where a message goes: its level, its category (`schedule`, `install`, or the app's) and its text.
    public typealias Handler = @Sendable (_ level: Level, _ category: String, _ message: String) -> Void

    /// The unified log's subsystem of the client's messages on Apple platforms.
    public static let subsystem = "org.assetdepot.client"

    private static let handler = Locked<Handler?>(nil)

    /// Sends every message to `handler` instead of the default (the unified log on Apple
    /// platforms, nowhere on Linux); nil restores the default. Set it once, at launch: an app that
    /// keeps its own log, or a test that reads what the client said.
    public static func setHandler(_ handler: Handler?) {
        Self.handler.withLock { $0 = handler }
    }

    /// Logs `message` at `level` in `category`: through the handler if one is set, else the default.
    public static func log(_ level: Level, _ message: String, category: String) {
        if let handler = handler.withLock({ $0 }) {
            handler(level, category, message)
            return
        }
        #if canImport(os)
        let logger = Logger(subsystem: subsystem, category: category)
        // Public: pack ids, paths inside the app's containers and reasons, nothing personal; a
        // private message would read "<private>" on a device, where it is needed most.
        switch level {
        case .info: logger.info("\(message, privacy: .public)")
        case .notice: logger.notice("\(message, privacy: .public)")
        case .error: logger.error("\(message, privacy: .public)")
        }
        #endif
    }

    /// An error message (``Level/error``), in the app's code: `DepotLog.error("…", category: "extension")`.
    public static func error(_ message: String, category: String) { log(.error, message, category: category) }

    /// A notice (``Level/notice``).
    public static func notice(_ message: String, category: String) { log(.notice, message, category: category) }

    /// An informational message (``Level/info``).
    public static func info(_ message: String, category: String) { log(.info, message, category: category) }
}
