import DepotCore
import Foundation

/// What the flow handed the system to download, noted so that the extension's scheduling
/// callback need not ask the system.
///
/// Apple's header: while `downloads(for:manifestURL:extensionInfo:)` runs the manager refuses
/// to schedule, and `fetchCurrentDownloads()` "can block". So the extension does not fetch
/// there: each download ``ExtensionFlow/schedule(manifestFile:kind:allowance:essentialAllowance:scheduled:languages:now:)``
/// returns is noted (`scheduled/pack@revision` beside the state, holding the time), the note goes when the
/// file arrives (``ExtensionFlow/receive(identifier:file:)``) or the download fails
/// (``ExtensionFlow/downloadFailed(identifier:error:)``), and a noted download is not asked for
/// again for ``ExtensionFlow/scheduledNoteLifetime``. The app, which may wait, tells the flow
/// what the system really has (``ExtensionFlow/noteCurrentDownloads(_:fetchedAt:)``), so a
/// download the system dropped is asked for again at the next event, not after the lifetime.
extension ExtensionFlow {
    /// How long a noted download is taken as still held by the system (three days: a
    /// non-essential download may wait that long for Wi-Fi and power), unless the app says otherwise.
    public static let scheduledNoteLifetime: TimeInterval = 3 * 86_400

    /// Beside the state (outside `Library/Caches`): a purge of the packs leaves the system's queue as it was.
    var scheduledNotes: String { store.stateFolder + "/scheduled" }

    /// Notes `identifiers` as handed to the system at `now`. One small file each, not synced: a
    /// note lost to a power cut costs at most a download asked for twice.
    func noteScheduled(_ identifiers: [String], now: Date) {
        guard !identifiers.isEmpty else { return }
        try? FileSystem.createDirectory(scheduledNotes)
        let stamp = Array(String(Int64(now.timeIntervalSince1970)).utf8)
        for identifier in identifiers where Self.isIdentifier(identifier) {
            guard let file = try? FileDescriptor(path: scheduledNotes + "/" + identifier, flags: O_WRONLY | O_CREAT | O_TRUNC) else { continue }
            try? file.write(stamp)
            try? file.close()
        }
    }

    func forgetScheduled(_ identifier: String) {
        guard Self.isIdentifier(identifier) else { return }
        FileSystem.remove(scheduledNotes + "/" + identifier)
    }

    /// The downloads noted as scheduled and not older than the lifetime; older or unreadable
    /// notes are removed.
    func notedScheduled(now: Date) -> Set<String> {
        var held: Set<String> = []
        for (identifier, noted) in notes() {
            if let noted, now.timeIntervalSince(noted) <= Self.scheduledNoteLifetime, noted <= now.addingTimeInterval(Self.scheduledNoteLifetime) {
                held.insert(identifier)
            } else {
                forgetScheduled(identifier)
            }
        }
        return held
    }

    /// What the system has (the identifiers of `BADownloadManager.shared.fetchCurrentDownloads()`,
    /// fetched by the app off the main thread at `fetchedAt`): a noted download it no longer has
    /// is forgotten, so the next event asks for it again. Notes made after `fetchedAt` stay (the
    /// extension may have scheduled them since).
    public func noteCurrentDownloads(_ identifiers: Set<String>, fetchedAt: Date) {
        for (identifier, noted) in notes() where !identifiers.contains(identifier) {
            if let noted, noted >= fetchedAt.addingTimeInterval(-1) { continue }
            forgetScheduled(identifier)
        }
    }

    /// Every note: identifier → the time it holds (nil if unreadable).
    private func notes() -> [(String, Date?)] {
        FileSystem.contents(of: scheduledNotes).filter(Self.isIdentifier).map { identifier in
            let text = (try? FileSystem.readFile(scheduledNotes + "/" + identifier, limit: 32)).map { String(decoding: $0, as: UTF8.self) }
            return (identifier, text.flatMap(Int64.init).map { Date(timeIntervalSince1970: TimeInterval($0)) })
        }
    }
}
