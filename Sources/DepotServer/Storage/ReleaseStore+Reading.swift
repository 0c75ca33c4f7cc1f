import DepotCore
import DepotHTTP
import Foundation
import Synchronization

/// What anonymous readers of an app's releases get, at a bounded cost per request: no release
/// file is decoded per request. A release's own route sends its bytes from memory (or its file
/// by `sendfile` once the kept bytes are full) with its ETag and date kept per file version (a
/// few stats per request). The listings' facts are ``ReleaseHistory``'s.
/// The count of release files decoded (``ReleaseStore/load(path:_:)``).
extension ReleaseStore {
    /// Release files (and signed copies) read and decoded in this process: what background
    /// passes are counted by (`BackgroundCostTests`).
    static let releaseFilesRead = Atomic<Int>(0)

    /// The same count for the calling task alone (a test counting one call among others running).
    final class ReadCount: Sendable {
        let value = Atomic<Int>(0)
    }
    @TaskLocal static var taskReads: ReadCount?
}

extension ReleaseStore {
    /// The ETag and publication date of one release file (kept per file version).
    struct ReleaseFileFacts: Sendable {
        var etag: String
        var publishedAt: Date
        var size: Int64
    }

    /// What the release route sends: the bytes kept in memory, or the file (by `sendfile`).
    enum ReleaseBody {
        case kept(SharedBytes)
        case file(FileDescriptor)
    }

    /// Release `version` of `app` as it is sent, or nil if there is none (see ``release(_:_:)``).
    /// A request costs a few `stat`s: whether the release is visible is known from the stamps of
    /// `head`, the production pointer and the channels folder; its facts from its own stamp; its
    /// bytes (up to 1 MiB each, 8 MiB in all) are kept. Once 8 MiB are kept, other releases go
    /// by `sendfile` (a descriptor per request, no buffer): nothing a client asks for evicts
    /// what is kept, so walking every release costs what `sendfile` costs, never an allocation.
    func releaseFile(_ app: String, _ version: Int) throws -> (body: ReleaseBody, facts: ReleaseFileFacts)? {
        guard version <= visibleHead(app) else { return nil }
        let path = folder.release(app, version)
        guard let facts = reading.files.value(at: path, load: { path in
            let loaded = try load(path: path, version)
            return ReleaseFileFacts(etag: loaded.etag, publishedAt: loaded.publishedAt, size: Int64(loaded.size))
        }) else { return nil }
        if let kept = reading.bodies.withLock({ $0.byPath[path] }), kept.etag == facts.etag { return (.kept(kept.body), facts) }
        guard let file = try? FileDescriptor.openForReading(path) else { return nil }
        // Replaced between the stat and the open (a release file never is, but a hand may):
        // the facts must be those of the bytes sent.
        guard (try? file.size()) == facts.size else { throw DepotError(.failure, "storage_error", "release \(version) of app \(app) changed while it was read") }
        // Kept only where there is room (a replaced file's old bytes give theirs back).
        let size = Int(facts.size)
        let room = reading.bodies.withLock { bodies in
            size <= ReleaseReadingCaches.keptBodyLimit && bodies.bytes - (bodies.byPath[path]?.body.count ?? 0) + size <= ReleaseReadingCaches.keptBodiesLimit
        }
        guard room, let bytes = Self.readWhole(file, count: size) else { return (.file(file), facts) }
        let body = SharedBytes(bytes)
        reading.bodies.withLock { bodies in
            let freed = bodies.byPath[path]?.body.count ?? 0
            // Another thread took the room meanwhile: these bytes are sent, and not kept.
            guard bodies.bytes - freed + size <= ReleaseReadingCaches.keptBodiesLimit else { return }
            bodies.byPath[path] = (facts.etag, body)
            bodies.bytes += size - freed
        }
        return (.kept(body), facts)
    }

    /// The `count` bytes of `file` from its start, or nil if it has fewer or cannot be read.
    private static func readWhole(_ file: FileDescriptor, count: Int) -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: count)
        let read = bytes.withUnsafeMutableBytes { buffer in
            var done = 0
            while done < count {
                guard let got = try? file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]), at: Int64(done)), got > 0 else { break }
                done += got
            }
            return done
        }
        return read == count ? bytes : nil
    }

    /// The highest release number made visible, as ``head(_:)`` says, read again only when the
    /// `head` file, the production pointer or the channels folder changed (each is replaced by
    /// a rename, which gives it a new stamp or its folder a new one).
    func visibleHead(_ app: String) -> Int {
        let stamps = [folder.head(app), folder.currentPointer(app), folder.channels(app)].map { FileStampCache<Int>.stamp($0) }
        if let known = reading.heads.withLock({ $0[app] }), known.stamps == stamps { return known.head }
        let head = head(app)
        reading.heads.withLock { heads in
            // Keyed by app ids the route checked exist: bounded by the apps.
            if heads.count >= 4096 && heads[app] == nil { heads.remove(at: heads.startIndex) }
            heads[app] = (stamps, head)
        }
        return head
    }
}

/// The caches behind ``ReleaseStore``'s reading routes.
final class ReleaseReadingCaches: Sendable {
    /// A few hundred bytes per release file: 262,144 of them (every release of every app, on any
    /// real origin) is under 100 MiB at worst, so that walking every release of every app does not
    /// empty it.
    let files = FileStampCache<ReleaseStore.ReleaseFileFacts>(limit: 262_144)
    /// Per app, ``ReleaseStore/visibleHead(_:)`` and the stamps it was read under.
    let heads = Mutex<[String: (stamps: [FileStamp?], head: Int)]>([:])
    /// Release files' bytes by path (with the ETag they were read under), sent from memory.
    let bodies = Mutex<(bytes: Int, byPath: [String: (etag: String, body: SharedBytes)])>((0, [:]))
    /// A release file larger than this is sent from its file.
    static let keptBodyLimit = 1 << 20
    /// The kept bytes in all; past it, release files are sent from their file (the page cache
    /// keeps them then). Small, so that it fills within minutes of a busy origin's start and
    /// memory then stays level (at 32 MiB, a soak with a release of 90 KiB a minute still rose
    /// after an hour).
    static let keptBodiesLimit = 8 << 20
}

/// Serving a channel's live release: from memory, or from its file past the memory budget.
extension ReleaseStore {
    /// What a channel serves and the source of its bytes: memory, or its file opened (past the
    /// memory budget). A file replaced underneath since it was kept (a re-signed copy written by
    /// another process) is read again, once; nil before the channel has a release.
    func served(_ app: String, channel: String) throws -> (LiveManifest, Representation.Source)? {
        for _ in 0..<2 {
            guard let live = try current(app, channel: channel) else { return nil }
            if let body = live.body { return (live, .shared(body)) }
            if let opened = live.file?.open() { return (live, .file(opened)) }
            dropLive(live, app: app, channel: channel)
        }
        throw LiveManifest.replaced
    }

    /// Forgets `live` as what `channel` serves (its file was replaced underneath): read again next time.
    func dropLive(_ live: LiveManifest, app: String, channel: String) {
        let key = app + "\u{0}" + channel
        self.live.withLock { cache in if cache[key]?.etag == live.etag { cache[key] = nil } }
    }
}
