import DepotCore
import Foundation
import Logging
import Synchronization

/// The resumable uploads in `uploads/`: created, appended to by one request at a time,
/// terminated, expired.
final class ResumableUploads: Sendable {
    let folder: DataFolder
    /// Uploads a request is working on; another request for one of them gets 409.
    private let busy = Mutex<Set<String>>([])

    init(folder: DataFolder) { self.folder = folder }

    func directory(_ id: String) -> String { folder.uploads + "/" + id + ".tus" }
    func statePath(_ id: String) -> String { directory(id) + "/state.json" }
    func containerPath(_ id: String) -> String { directory(id) + "/container" }

    static func isValidID(_ id: String) -> Bool { id.utf8.count == 32 && Hex.decode(id) != nil && id == id.lowercased() }

    /// Creates an upload: its folder, the container's header (nothing, for an archive), and the state.
    func create(
        _ parameters: UploadParameters, metadata: String?, length: Int64, header: PackHeader, archive: Bool = false, expiry: TimeInterval
    ) throws -> ResumableState {
        let state = ResumableState(
            id: Hex.encode(SecureRandom.bytes(16)), parameters: parameters, metadata: metadata, length: length, header: header,
            archive: archive, expires: WallClock.now().addingTimeInterval(expiry)
        )
        // Claimed while half made, so that the expiry sweep leaves it alone.
        _ = claim(state.id)
        defer { release(state.id) }
        try FileSystem.createDirectory(directory(state.id), mode: 0o700)
        do {
            try FileSystem.writeAtomically(archive ? [] : header.encoded, to: containerPath(state.id), mode: 0o600)
            try save(state)
        } catch {
            remove(state.id)
            throw error
        }
        return state
    }

    /// The upload `id` of `app`: not found when there is none, gone (and removed) past its expiry.
    func find(_ id: String, app: String, now: Date = WallClock.now()) throws -> ResumableState {
        guard let state = load(id, app: app) else { throw DepotError.notFound("upload \(id) of app \(app)") }
        guard state.expires > now else {
            _ = withExclusiveAccess(id) { remove(id) }
            throw DepotError(.gone, "upload_expired", "upload \(id) expired; start a new one")
        }
        return state
    }

    /// Removes an upload unless a request is working on it.
    func terminate(_ id: String) throws {
        guard withExclusiveAccess(id, { remove(id) }) != nil else { throw Self.busy(id) }
    }

    static func busy(_ id: String) -> DepotError {
        DepotError.conflict("upload_busy", "another request is writing upload \(id); ask for its offset again in a moment")
    }

    func save(_ state: ResumableState) throws {
        try StoredJSON.write(state, to: statePath(state.id), mode: 0o600)
    }

    /// The state of an upload of `app`, or nil if there is none (or it belongs to another app).
    func load(_ id: String, app: String) -> ResumableState? {
        guard Self.isValidID(id), let state = try? StoredJSON.read(ResumableState.self, from: statePath(id)), state.app == app else {
            return nil
        }
        return state
    }

    /// Runs `body` while no other request works on upload `id`; nil if one does.
    func withExclusiveAccess<T>(_ id: String, _ body: () throws -> T) rethrows -> T? {
        guard claim(id) else { return nil }
        defer { release(id) }
        return try body()
    }

    /// Marks an upload busy; false if it already was.
    func claim(_ id: String) -> Bool { busy.withLock { $0.insert(id).inserted } }
    func release(_ id: String) { _ = busy.withLock { $0.remove(id) } }

    func remove(_ id: String) {
        FileSystem.remove(containerPath(id))
        FileSystem.remove(statePath(id))
        for name in FileSystem.contents(of: directory(id)) { FileSystem.remove(directory(id) + "/" + name) }
        FileSystem.removeDirectory(directory(id))
    }

    /// Removes uploads past their expiry (and any that cannot be read); returns how many.
    @discardableResult
    func removeExpired(now: Date = WallClock.now()) -> Int {
        var removed = 0
        for name in FileSystem.contents(of: folder.uploads) where name.hasSuffix(".tus") {
            let id = String(name.dropLast(4))
            let state = try? StoredJSON.read(ResumableState.self, from: statePath(id))
            guard state.map({ $0.expires < now }) ?? true else { continue }
            guard claim(id) else { continue }
            remove(id)
            release(id)
            removed += 1
        }
        return removed
    }

    /// Crash recovery: cuts each container back to what its state covers. Returns the uploads
    /// whose pack was verified and recorded (`finishing`) but not yet stored and staged (the crash
    /// came in the request that finished them), for ``finishAfterCrash(_:publisher:expiry:now:)``.
    func repair() -> [String] {
        var unfinished: [String] = []
        for name in FileSystem.contents(of: folder.uploads) where name.hasSuffix(".tus") {
            let id = String(name.dropLast(4))
            _ = FileSystem.removeTemporaryFiles(in: directory(id))
            guard let state = try? StoredJSON.read(ResumableState.self, from: statePath(id)), state.result == nil else {
                // Unreadable, or finished (the blob is stored): only the record matters.
                if !FileSystem.exists(statePath(id)) { remove(id) } else { FileSystem.remove(containerPath(id)) }
                continue
            }
            if let file = try? FileDescriptor(path: containerPath(id), flags: O_WRONLY), let size = try? file.size() {
                if size > state.containerLength { try? file.truncate(to: state.containerLength) }
                if size < state.containerLength { remove(id); continue }
            } else if state.finishing == nil {
                remove(id)
                continue
            }
            // (No container, but a finishing record: it moved into the blob store.)
            if state.finishing != nil && state.offset == state.length { unfinished.append(id) }
        }
        return unfinished
    }

    /// The blobs of uploads verified and recorded but not yet staged (``ResumableState/finishing``).
    func finishingBlobs() -> Set<String> {
        var out: Set<String> = []
        for name in FileSystem.contents(of: folder.uploads) where name.hasSuffix(".tus") {
            if let state = try? StoredJSON.read(ResumableState.self, from: statePath(String(name.dropLast(4)))), state.result == nil,
               let finishing = state.finishing {
                out.insert(finishing.summary.sha256)
            }
        }
        return out
    }

    /// Finishes an upload that a crash interrupted after its pack was verified and recorded: the
    /// container stored and the pack staged (or released) as the request would have; a container
    /// already moved into the blob store is staged from the state's record. The store not
    /// answering leaves the upload for the next start (or the client's PATCH with no body); a
    /// pack refused now goes as it would have in the request. Expired uploads are left to the sweep.
    func finishAfterCrash(_ id: String, publisher: Publisher, expiry: TimeInterval, now: Date = WallClock.now()) {
        guard let state = try? StoredJSON.read(ResumableState.self, from: statePath(id)), state.result == nil,
              state.finishing != nil, state.expires > now else { return }
        let log = { (message: String, error: (any Error)?) in
            var metadata: Logger.Metadata = ["app": .string(state.app), "pack": .string(state.pack), "upload": .string(id)]
            if let error { metadata["error"] = .string("\(error)") }
            publisher.logger.notice(Logger.Message(stringLiteral: message), metadata: metadata)
        }
        do {
            if FileSystem.exists(containerPath(id)) {
                try ResumableSession(claiming: id, app: state.app, at: nil, uploads: self, publisher: publisher, expiry: expiry).finish()
            } else {
                // (A request for it meanwhile is answered 409, busy: tus clients ask again.)
                guard try withExclusiveAccess(id, { try restageMoved(id, app: state.app, publisher: publisher) }) != nil else { return }
            }
            log("upload finished after a crash", nil)
        } catch {
            log("upload could not be finished after a crash", error)
        }
    }

    /// An upload whose verified container already moved into the blob store (a crash came, or the
    /// store could not answer at start-up): its pack staged (or released) from the state's record
    /// and the result saved; nil when the upload is not in that state. The caller holds its claim.
    /// A release this upload asked for with `base` that was made before the crash is not made again.
    func restageMoved(_ id: String, app: String, publisher: Publisher) throws -> ResumableState? {
        guard var state = load(id, app: app), state.result == nil, let finishing = state.finishing,
              state.offset == state.length, !FileSystem.exists(containerPath(id)) else { return nil }
        var parameters = state.parameters
        if let base = parameters.base, let live = try publisher.releases.current(state.app, channel: parameters.channel),
           live.version > base, try live.manifest[pack: state.pack]?.sha256 == finishing.summary.sha256 {
            parameters.base = nil
        }
        let result: PublishResult?
        do {
            result = try publisher.restage(finishing.summary, installSize: finishing.installSize, for: parameters)
        } catch {
            if ResumableSession.isRefusal(error) { remove(id) }
            throw error
        }
        guard let result else {
            remove(id)
            throw DepotError(.failure, "upload_lost", "upload \(id): neither its container nor its blob is there any more; start a new upload")
        }
        state.publishResult = result
        (state.tail, state.finishing) = ("", nil)
        try save(state)
        return state
    }
}
