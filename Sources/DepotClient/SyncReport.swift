import DepotCore

/// What a sync did.
public struct SyncReport: Hashable, Sendable {
    /// The manifest version the destination now follows.
    public var manifestVersion: Int
    /// The server answered `304 Not Modified`: the manifest accepted before still holds.
    public var notModified: Bool
    /// Packs downloaded and installed.
    public var installed: [String]
    /// Packs removed: the manifest no longer lists them, or (localized) the device's language
    /// changed and their replacement is installed.
    public var removed: [String]
    /// Packs already current.
    public var unchanged: [String]
    /// Packs left for a later sync: over the allowance, or on-demand packs nobody asked for.
    public var deferred: [String]
    /// Why each deferred pack waits, in words: which allowance and by how many bytes, or on demand.
    public var waiting: [String: String] = [:]
    /// Essential downloads that failed and were tried again as non-essential.
    public var rescheduled: [String]
    /// Packs that could not be installed, with the reason; their previous revision (if any) stays.
    public var failed: [String: String]
    /// Container bytes transferred in this sync, including downloads refused afterwards.
    public var bytesDownloaded: Int64
    /// Packs installed by applying a patch to the installed revision (also in ``installed``).
    public var patched: [String] = []
    /// Bytes the patches saved: each patched pack's container size less its patch's.
    public var bytesSaved: Int64 = 0
    /// Patches that failed (with why); each of those packs was downloaded whole instead.
    public var patchFallbacks: [String: String] = [:]
    /// Localized packs of languages this device does not take.
    public var otherLanguages: [String] = []
    /// What an app that opts in may send about this step (``DeviceReporter``): each pack the
    /// step installed, patched, failed or deferred for the allowance, with its revision; nil
    /// when the step did nothing to report. It names no device.
    public var deviceReport: DeviceReport?

    /// A one-line summary.
    public var summary: String {
        var parts = ["\(installed.count) installed", "\(removed.count) removed", "\(unchanged.count) unchanged"]
        if !deferred.isEmpty { parts.append("\(deferred.count) deferred") }
        if !patched.isEmpty { parts.append("\(patched.count) patched (\(bytesSaved) bytes saved)") }
        if !failed.isEmpty { parts.append("\(failed.count) failed") }
        return "manifest \(manifestVersion)\(notModified ? " (not modified)" : ""): " + parts.joined(separator: ", ") + ", \(bytesDownloaded) bytes downloaded"
    }
}

/// What a sync reports while it runs.
public enum SyncEvent: Sendable {
    /// The plan, once the manifest is accepted.
    case planned(Plan)
    /// A download's progress.
    case download(DownloadEvent)
    /// A pack is installed (or failed to).
    case installed(String)
    case failed(String, String)
    case removed(String)
}
