import DepotCore
import Foundation

/// The install state of one destination folder, shared by every process that uses it (on a
/// device, the app and its Background Assets extension, through an App Group folder).
///
/// The state lives in `DEST/.depot/state.json`, or in a folder of its own (``stateFolder``; on
/// iOS under the App Group's `Library/Application Support`, which the system never purges, while
/// the packs stay in `Library/Caches`): the channels' floors, the install id and the accepted
/// envelopes then survive a purge of the packs. It changes only inside
/// ``withExclusiveControl(timeout:app:_:)`` — an exclusive `flock` on `state.lock` beside it,
/// with a timeout, as the framework's `withExclusiveControl` — and is saved, atomically and
/// durably, before the lock is released. The lock is held only for that moment: never across a
/// download, an `await` or an install (iOS terminates a suspended app that holds a file lock in
/// a shared container). Readers take no lock (``read(app:timeout:)``). A sync also holds `DEST/.depot/sync.lock` for its
/// whole run, so that two syncs of one folder take turns while readers never wait for a download.
public final class StateStore: Sendable {
    /// The destination folder.
    public let destination: String

    /// Where the state, its lock and the accepted envelopes live: `DEST/.depot` unless given.
    public let stateFolder: String
    /// Whether ``stateFolder`` is another folder than `DEST/.depot` (compared by identity: the
    /// same folder named another way is the same).
    let stateIsApart: Bool

    var metadata: String { destination + "/.depot" }
    var statePath: String { stateFolder + "/state.json" }
    /// Where pack downloads wait, possibly partial, until they are verified.
    var downloads: String { metadata + "/downloads" }
    /// Where finished downloads the system delivered wait for the install step
    /// (``ExtensionFlow/installArrived(languages:now:)``), each named by its identifier (`pack@revision`).
    public var arrived: String { metadata + "/arrived" }
    /// Where the last accepted envelope of each channel is kept (for `304 Not Modified`).
    public func cachedEnvelope(channel: String) -> String { stateFolder + "/manifest-" + channel + ".json" }
    /// Where installed packs live.
    public var packs: String { destination + "/packs" }

    /// Opens (creating) the destination's folders. With `stateFolder`, the state lives there
    /// instead of `DEST/.depot`; a state a former build kept in `DEST/.depot` is moved over
    /// the first time (under the state's lock; the floors and the install id carried across).
    public init(destination: String, stateFolder: String? = nil) throws {
        self.destination = destination
        self.stateFolder = stateFolder ?? destination + "/.depot"
        do {
            try FileSystem.createDirectory(destination)
            Self.protect(destination)
            try FileSystem.createDirectory(destination + "/.depot")
            try FileSystem.createDirectory(destination + "/.depot/downloads")
            try FileSystem.createDirectory(destination + "/.depot/arrived")
            try FileSystem.createDirectory(destination + "/packs")
            if let stateFolder { try FileSystem.createDirectory(stateFolder) }
        } catch {
            throw ClientError.state("cannot open \(destination): \(error)")
        }
        // By what the paths lead to (links followed): one folder named two ways is one folder.
        stateIsApart = System.resolvedIdentity(self.stateFolder) != System.resolvedIdentity(destination + "/.depot")
        if stateIsApart {
            Self.protect(self.stateFolder)
            try migrate()
        }
    }

    /// What a former build's layout keeps in `DEST/.depot` and this one in ``stateFolder``.
    private func movable() -> [String] {
        FileSystem.contents(of: metadata).filter { $0 == "state.json" || ($0.hasPrefix("manifest-") && $0.hasSuffix(".json")) }
    }

    /// Moves a state kept in `DEST/.depot` (a former build's layout) into ``stateFolder``, under
    /// the state's lock: the state first (the floor is what a purge must not take), then the
    /// accepted envelopes, each by one durable rename (one container, one volume; nothing read,
    /// whatever an envelope's size). Killed in between, the next open moves the rest. A copy
    /// already in the state folder is newer than the old one: the old one goes.
    private func migrate() throws {
        guard !movable().isEmpty else { return }
        try holdingLock(timeout: 10) { try moveFormerState() }
    }

    private func moveFormerState() throws {
        do {
            let names = movable()
            for name in names.filter({ $0 == "state.json" }) + names.filter({ $0 != "state.json" }) {
                let (old, new) = (metadata + "/" + name, stateFolder + "/" + name)
                // One file reached both ways (a link somewhere): nothing to move, nothing to remove.
                if let here = System.resolvedIdentity(old), here == System.resolvedIdentity(new) { continue }
                if System.identity(new) != nil {
                    FileSystem.remove(old)
                    continue
                }
                do {
                    try FileSystem.durableRename(old, to: new)
                } catch where error.errno == EXDEV {
                    // Another volume (a command-line user's choice): copied in pieces, then removed.
                    let temporary = FileSystem.temporaryPath(besides: new)
                    try FileSystem.copyDurably(old, to: temporary)
                    try FileSystem.durableRename(temporary, to: new)
                    FileSystem.remove(old)
                }
            }
        } catch {
            throw ClientError.state("cannot move the install state of \(destination) to \(stateFolder): \(error)")
        }
    }

    /// On iOS and its kin: the folder's data protection class becomes
    /// `completeUntilFirstUserAuthentication` (what it creates inherits it), so that the
    /// extension can open the state, the lock and the packs while the phone is locked, after the
    /// first unlock since boot. An app whose default class is `complete` would otherwise make
    /// every background event fail. Elsewhere there are no classes.
    static func protect(_ folder: String) {
        #if canImport(Darwin) && !os(macOS)
        try? FileManager.default.setAttributes([.protectionKey: FileProtectionType.completeUntilFirstUserAuthentication], ofItemAtPath: folder)
        #endif
    }

    /// Takes an exclusive lock on `path`, waiting up to `timeout` seconds; the lock lasts as long as the descriptor.
    static func lock(_ path: String, timeout: TimeInterval, what: String) throws -> FileDescriptor {
        let file: FileDescriptor
        do {
            file = try FileDescriptor(path: path, flags: O_RDWR | O_CREAT, mode: 0o644)
        } catch {
            throw ClientError.state("cannot open \(path): \(error)")
        }
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            do {
                if try System.tryLock(file.rawValue) { break }
            } catch {
                throw ClientError.state("cannot lock \(path): \(error)")
            }
            guard Date() < deadline else { throw ClientError.state("\(what) is locked by another process (waited \(Int(timeout)) s)") }
            // Suspended meanwhile (the app's background time ran out): stop waiting.
            if StateLockGate.shared.isSuspended(FileSystem.directory(of: path)) { throw Self.suspendedError }
            Thread.sleep(forTimeInterval: 0.01)
        }
        return file
    }

    static let suspendedError = ClientError(.cancelled, "cancelled: the install state's lock is suspended in this process (the app's background time ran out); the step runs again at the next launch or return to the foreground")

    /// Runs `body` with the state's lock held, counted by this process's gate
    /// (``suspendLocking(waitingUpTo:)``); throws `cancelled` while locking is suspended.
    func holdingLock<T>(timeout: TimeInterval, _ body: () throws -> T) throws -> T {
        guard StateLockGate.shared.enter(stateFolder) else { throw Self.suspendedError }
        defer { StateLockGate.shared.leave(stateFolder) }
        let lock = try Self.lock(stateFolder + "/state.lock", timeout: timeout, what: "the install state of \(destination)")
        defer { _ = lock }
        return try body()
    }

    /// Stops this process from taking the state's lock (each ``withExclusiveControl(timeout:app:_:)``
    /// from now on throws a `cancelled` `ClientError`, and one waiting for the lock stops) and
    /// waits, at most `seconds`, for its threads that hold the lock to release it: a record holds
    /// it for a small write, a switch for two around one exchange. Returns whether none holds it. What an app's
    /// background-task expiration handler calls before it ends the task, so that iOS never
    /// suspends the app holding a file lock in the App Group (it terminates it: 0xdead10cc);
    /// ``resumeLocking()`` when the app runs again. Other processes (the extension) are not
    /// affected. Call it on any thread; it blocks at most `seconds`.
    @discardableResult
    public func suspendLocking(waitingUpTo seconds: TimeInterval) -> Bool {
        StateLockGate.shared.suspend(stateFolder, timeout: seconds)
    }

    /// Lets this process take the state's lock again after ``suspendLocking(waitingUpTo:)``.
    public func resumeLocking() {
        StateLockGate.shared.resume(stateFolder)
    }

    /// Runs `body` on the state under the exclusive lock and saves what it leaves, before unlocking.
    /// Throws a `cancelled` `ClientError` while this process's locking is suspended
    /// (``suspendLocking(waitingUpTo:)``).
    public func withExclusiveControl<T>(timeout: TimeInterval = 10, app: String, _ body: (inout InstalledState) throws -> T) throws -> T {
        try holdingLock(timeout: timeout) { try exclusive(app: app, body) }
    }

    private func exclusive<T>(app: String, _ body: (inout InstalledState) throws -> T) throws -> T {
        var state = try load(app: app)
        let before = state
        // Switches whose copy is on disk are recorded (``switchIn(_:as:app:now:)``); the others
        // wait for an install step.
        settleSwitches(&state, completing: false)
        let result = try body(&state)
        if state != before { try save(state) }
        return result
    }

    /// The state as last saved. It takes no lock and never waits: `state.json` is only ever
    /// replaced whole (written beside it, then renamed over it), so a reader sees one saved state
    /// or the next, never half of one. (`timeout` is kept for source compatibility and unused.)
    /// Reading does not block; opening the store (``init(destination:stateFolder:)``) may: the
    /// first open with a state folder moves a former build's state under the lock — open it off
    /// the main thread.
    /// A switch in progress is read as the disk has it: its record when its copy is the one at
    /// `packs/<id>` (``InstalledState/Switch``).
    public func read(app: String, timeout: TimeInterval = 10) throws -> InstalledState {
        resolvingSwitches(try load(app: app))
    }

    /// This folder's install id (the state's install id): read without a lock once it
    /// exists; made under the exclusive lock the first time, so that the app and its extension,
    /// asking at once, end up with the same one.
    ///
    /// It lives in `state.json`, so it goes when the state's folder does: with the state in
    /// `Library/Application Support` (``stateFolder``) only a reinstall makes a new one; with the
    /// state under the packs' folder in `Library/Caches`, a purge does too, and the device may
    /// fall on the other side of a running rollout.
    public func installID(app: String) throws -> String {
        if let known = try read(app: app).installID { return known }
        return try withExclusiveControl(app: app) { state in
            if let known = state.installID { return known }
            let made = Rollout.newInstallID()
            state.installID = made
            return made
        }
    }

    /// Takes the folder's sync lock for a whole sync; released when the descriptor goes.
    func syncLock(timeout: TimeInterval) throws -> FileDescriptor {
        try Self.lock(metadata + "/sync.lock", timeout: timeout, what: "\(destination) (another sync is running)")
    }

    func load(app: String) throws -> InstalledState {
        guard FileSystem.exists(statePath) else { return InstalledState(app: app) }
        do {
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            let state = try decoder.decode(InstalledState.self, from: Data(FileSystem.readFile(statePath)))
            guard state.app == app else { throw ClientError.state("\(destination) holds packs of app \(state.app)") }
            return state
        } catch let error as ClientError {
            throw error
        } catch {
            throw ClientError.state("\(statePath) is unreadable: \(error)")
        }
    }

    /// Saves the state atomically: durably (`.full`), or ordered before what follows (`.ordered`).
    func save(_ state: InstalledState, _ level: SyncLevel = .full) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        encoder.dateEncodingStrategy = .iso8601
        do {
            try FileSystem.writeAtomically(Array(try encoder.encode(state)) + [10], to: statePath, level)
        } catch let error as SystemError where error.isNoSpace {
            throw ClientError.noSpace(destination)
        }
    }

    /// The installed copy of a pack: a file, or a folder for an unpacked zip.
    public func packPath(_ id: String) -> String { packs + "/" + id }

    /// Moves the installed copy of pack `id` aside (one rename, to a `.tmp-` name this process
    /// owns) and returns where it went, or nil if none was there. Called under the exclusive lock
    /// after the record's removal was saved; the caller deletes the returned tree once the lock is
    /// released (``Installer/removeTree(_:)``) — a deletion can take seconds, and iOS terminates a
    /// suspended app that holds a file lock in a shared container. Killed in between, the next
    /// install step removes it (its owner is gone).
    public func detach(_ id: String) throws -> String? {
        let path = packPath(id)
        guard System.identity(path) != nil else { return nil }
        let aside = FileSystem.temporaryPath(besides: path)
        do {
            try FileSystem.durableRename(path, to: aside)
        } catch {
            throw ClientError.state("cannot remove pack \(id): \(error)")
        }
        return aside
    }

    /// Whether the copy of pack `id` is on disk as `recorded` says (``InstalledCopy``): what the
    /// planner asks before it counts a pack as installed or patches it.
    public func isWhole(_ id: String, _ recorded: InstalledState.Pack) -> Bool {
        InstalledCopy.isWhole(at: packPath(id), recorded: recorded)
    }
}
