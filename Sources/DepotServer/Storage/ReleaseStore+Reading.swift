import DepotCore
import Foundation
import Synchronization

/// What anonymous readers of an app's releases get, at a bounded cost per request: no release
/// file is decoded per request. A release's own route sends its file by `sendfile` with its
/// ETag and date kept per file version (a stat per request); the release list is made once per
/// change of the releases folder and kept (a small summary per release).
extension ReleaseStore {
    /// The ETag and publication date of one release file (kept per file version).
    struct ReleaseFileFacts: Sendable {
        var etag: String
        var publishedAt: Date
        var size: Int64
    }

    /// One release's summary in the list (without its channels, which are read per request).
    struct ReleaseFacts: Sendable {
        var version: Int
        var publishedAt: Date
        var expiresAt: Date
        var packs: Int
    }

    /// Release `version` of `app` as a file to send, or nil if there is none (see ``release(_:_:)``).
    func releaseFile(_ app: String, _ version: Int) throws -> (file: FileDescriptor, facts: ReleaseFileFacts)? {
        guard version <= head(app) else { return nil }
        let path = folder.release(app, version)
        guard let facts = reading.files.value(at: path, load: { path in
            let loaded = try load(path: path, version)
            return ReleaseFileFacts(etag: loaded.etag, publishedAt: loaded.manifest.publishedAt, size: Int64(loaded.envelope.count))
        }) else { return nil }
        guard let file = try? FileDescriptor.openForReading(path) else { return nil }
        // Replaced between the stat and the open (a release file never is, but a hand may):
        // the facts must be those of the bytes sent.
        guard (try? file.size()) == facts.size else { throw DepotError(.failure, "storage_error", "release \(version) of app \(app) changed while it was read") }
        return (file, facts)
    }

    /// Every visible release of `app`, oldest first, as the list shows it: made again only when
    /// the releases folder or `head` changed.
    func releaseFacts(_ app: String) throws -> [ReleaseFacts] {
        let head = head(app)
        let stamp = FileStampCache<Int>.stamp(folder.releases(app))
        if let known = reading.lists.withLock({ $0[app] }), known.head == head, known.stamp == stamp { return known.facts }
        let facts = try list(app).map { ReleaseFacts(version: $0.version, publishedAt: $0.publishedAt, expiresAt: $0.expiresAt, packs: $0.packs.count) }
        reading.lists.withLock { lists in
            // Keyed by app ids the route checked exist: bounded by the apps.
            if lists.count >= 4096 { lists.removeAll() }
            lists[app] = (head, stamp, facts)
        }
        return facts
    }
}

/// The caches behind ``ReleaseStore``'s reading routes.
final class ReleaseReadingCaches: Sendable {
    /// A few hundred bytes per release file: 262,144 of them (every release of every app, on any
    /// real origin) is under 100 MiB at worst, so that walking every release of every app does not
    /// empty it.
    let files = FileStampCache<ReleaseStore.ReleaseFileFacts>(limit: 262_144)
    let lists = Mutex<[String: (head: Int, stamp: FileStamp?, facts: [ReleaseStore.ReleaseFacts])]>([:])
}
