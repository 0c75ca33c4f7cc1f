import DepotCore
import Foundation

/// What the flow handed the system to download, noted so that the extension's scheduling
/// callback need not ask the system.
///
/// Apple's header: while `downloads(for:manifestURL:extensionInfo:)` runs the manager refuses
/// to schedule, and `fetchCurrentDownloads()` "can block". So the extension does not fetch
/// there: each download ``ExtensionFlow/schedule(manifestFile:kind:allowance:essentialAllowance:scheduled:languages:now:)``
/// returns is noted (`.depot/scheduled/pack@revision`, under the packs' folder, holding the
/// time), the note goes when the file arrives (``ExtensionFlow/receive(identifier:file:)``) or
/// the download fails (``ExtensionFlow/downloadFailed(identifier:error:)``), and a noted
/// download is not asked for again for ``ExtensionFlow/scheduledNoteLifetime``. The app, which
/// may wait, tells the flow what the system really has
/// (``ExtensionFlow/noteCurrentDownloads(_:fetchedAt:)``), so a download the system dropped is
/// asked for again at the next event, not after the lifetime.
///
/// Every doubt asks again rather than holds back (a download asked for twice costs bytes; one
/// held back leaves the device behind): the notes live with the packs in `Library/Caches` (a
/// purge, a restore from a backup take them), an `install` event ignores them, and a note dated
/// in the future (a clock set back) counts for nothing.
extension ExtensionFlow {
    /// How long a noted download is taken as still held by the system (a day), unless the app
    /// says otherwise sooner.
    public static let scheduledNoteLifetime: TimeInterval = 86_400
    /// How far in the future a note may be dated (clocks differ a little between processes).
    static let noteClockSkew: TimeInterval = 300

    var scheduledNotes: String { store.metadata + "/scheduled" }

    /// Notes `identifiers` as handed to the system at `now`: what ``schedule(manifestFile:kind:allowance:essentialAllowance:scheduled:languages:now:)``
    /// returns is noted already; the app or the extension notes what it schedules itself (a
    /// failed essential download scheduled again as non-essential, a foreground download). One
    /// small file each, not synced: a note lost to a power cut costs at most a download asked for twice.
    public func noteScheduled(_ identifiers: [String], now: Date = Date()) {
        guard !identifiers.isEmpty else { return }
        try? FileSystem.createDirectory(scheduledNotes)
        let stamp = Array(String(Int64(now.timeIntervalSince1970)).utf8)
        for identifier in identifiers where Self.isIdentifier(identifier) {
            // Not through a link, never blocking on a FIFO someone left there.
            guard let file = try? FileDescriptor(path: scheduledNotes + "/" + identifier, flags: O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK) else { continue }
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
            if let noted, now.timeIntervalSince(noted) <= Self.scheduledNoteLifetime, noted <= now.addingTimeInterval(Self.noteClockSkew) {
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
            if let noted, noted >= fetchedAt.addingTimeInterval(-1), noted <= fetchedAt.addingTimeInterval(Self.noteClockSkew) { continue }
            forgetScheduled(identifier)
        }
    }

    /// Every note: identifier → the time it holds (nil if unreadable).
    private func notes() -> [(String, Date?)] {
        FileSystem.contents(of: scheduledNotes).filter(Self.isIdentifier).map { identifier in
            (identifier, Self.readNote(scheduledNotes + "/" + identifier).map { Date(timeIntervalSince1970: TimeInterval($0)) })
        }
    }

    /// A note's time: at most 32 bytes read, not through a link, never blocking.
    private static func readNote(_ path: String) -> Int64? {
        readSmallFile(path).flatMap { Int64(String(decoding: $0, as: UTF8.self)) }
    }

    /// The first bytes (at most 32) of a small file this flow wrote in a shared folder: not
    /// through a link, never blocking on a FIFO left there; nil if it cannot be read.
    static func readSmallFile(_ path: String) -> [UInt8]? {
        guard let file = try? FileDescriptor(path: path, flags: O_RDONLY | O_NOFOLLOW | O_NONBLOCK) else { return nil }
        defer { try? file.close() }
        var bytes = [UInt8](repeating: 0, count: 32)
        guard let count = try? bytes.withUnsafeMutableBytes({ try file.read(into: $0) }), count > 0 else { return nil }
        return Array(bytes[..<count])
    }
}
