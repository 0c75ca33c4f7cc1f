import DepotCore
import Foundation
import Logging
import Synchronization

/// Signed releases and channel pointers in the bucket, beside the blobs, so that read-only
/// origins on the same bucket can serve them with no keys and no tokens:
///
///     <prefix>apps/<app>/app.json              the app's settings (no key, no token)
///     <prefix>apps/<app>/releases/000042.json  the signed envelopes, immutable
///     <prefix>apps/<app>/channels/<channel>    "42\n": the release a channel serves
///
/// The writer pushes an app after each change (envelopes first, pointers last, so a replica
/// never finds a pointer to a release it cannot fetch) and every app at each maintenance pass;
/// replicas pull on an interval.
final class ReleaseMirror: Sendable {
    let client: S3Client
    let folder: DataFolder
    let logger: Logger
    private let queue = DispatchQueue(label: "assetdepot.release-mirror")
    /// Per app, the release numbers known to be in the bucket.
    private let pushed = Mutex<[String: Set<Int>]>([:])
    /// The signed copies of promoted releases already in the bucket, by key.
    private let pushedCopies = Mutex<Set<String>>([])

    /// Lists the bucket's objects (under the location's prefix).
    private let bucket: S3BlobStore

    init(client: S3Client, folder: DataFolder, logger: Logger) {
        (self.client, self.folder, self.logger) = (client, folder, logger)
        bucket = S3BlobStore(client: client, spool: folder.uploads)
    }

    static func appKey(_ app: String) -> String { "apps/\(app)/app.json" }
    static func releaseKey(_ app: String, _ version: Int) -> String { "apps/\(app)/releases/" + DataFolder.releaseName(version) }
    static func pointerKey(_ app: String, _ channel: String) -> String { "apps/\(app)/channels/\(channel)" }
    static func signedCopyKey(_ app: String, _ channel: String, _ version: Int) -> String {
        "apps/\(app)/signed/\(channel)/" + DataFolder.releaseName(version)
    }

    // MARK: writer

    /// Pushes `app` soon, off the request's thread.
    func schedule(_ app: String) {
        queue.async { [self] in
            do { try push(app) } catch { logger.warning("could not push releases to the object store", metadata: ["app": .string(app), "error": .string("\(error)")]) }
        }
    }

    /// Pushes every app now (the maintenance pass).
    func pushAll() throws {
        try queue.sync {
            for app in FileSystem.contents(of: folder.apps) where Identifier.isValidApp(app) && FileSystem.exists(folder.appSettings(app)) { try push(app) }
        }
    }

    /// The writer's lease, renewed (each maintenance pass).
    func renewLease(interval: TimeInterval) throws {
        try BucketState(client: client, bucket: bucket).renewLease(folder, interval: interval)
    }

    private func put(_ bytes: [UInt8], _ key: String) throws {
        try S3Client.check(client.call("PUT", key: key, headers: ["content-type": "application/json"], body: .bytes(bytes), payloadSHA256: Hex.encode(SHA256Hasher.hash(bytes))), "writing \(key)")
    }

    /// The app's settings, any release not in the bucket yet, then its channel pointers.
    private func push(_ app: String) throws {
        try put(FileSystem.readFile(folder.appSettings(app), limit: 1 << 20), Self.appKey(app))
        var known = try pushed.withLock { $0[app] } ?? Set(bucket.list(prefix: "apps/\(app)/releases/").compactMap { object in
            Int(object.key.split(separator: "/").last?.dropLast(5) ?? "")
        })
        let head = Int(String(decoding: (try? FileSystem.readFile(folder.head(app), limit: 64)) ?? [], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        for version in ReleaseStore.versions(in: folder.releases(app)) where version <= head && !known.contains(version) {
            try put(FileSystem.readFile(folder.release(app, version), limit: 256 << 20), Self.releaseKey(app, version))
            known.insert(version)
        }
        pushed.withLock { $0[app] = known }
        var pointers: [String: Int] = [:]
        if let production = Self.number(folder.currentPointer(app)) { pointers[ReleaseStore.production] = production }
        for name in FileSystem.contents(of: folder.channels(app)) where Identifier.isValidChannel(name) {
            if let version = Self.number(folder.channels(app) + "/" + name) { pointers[name] = version }
        }
        for (channel, version) in pointers.sorted(by: { $0.key < $1.key }) {
            // A promoted release as the channel serves it (signed naming the channel), before the pointer.
            let copy = folder.signedCopies(app, channel: channel) + "/" + DataFolder.releaseName(version)
            let key = Self.signedCopyKey(app, channel, version)
            if FileSystem.exists(copy), !pushedCopies.withLock({ $0.contains(key) }) {
                try put(FileSystem.readFile(copy, limit: 256 << 20), key)
                pushedCopies.withLock { _ = $0.insert(key) }
            }
            try put(Array("\(version)\n".utf8), Self.pointerKey(app, channel))
        }
        // Channels removed here go from the bucket too.
        for object in try bucket.list(prefix: "apps/\(app)/channels/") {
            let name = String(object.key.split(separator: "/").last ?? "")
            if pointers[name] == nil { _ = try? client.call("DELETE", key: object.key) }
        }
    }

    static func number(_ path: String) -> Int? {
        guard let bytes = try? FileSystem.readFile(path, limit: 64) else { return nil }
        return Int(String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    // MARK: device reports (every origin, writer and replicas)

    static func reportKey(_ app: String, origin: String, day: String) -> String { "apps/\(app)/reports/\(origin)/\(day).json" }

    /// Writes this origin's figures of one day (its own object: origins never write each other's).
    func putReports(_ app: String, origin: String, day: String, bytes: [UInt8]) throws {
        try put(bytes, Self.reportKey(app, origin: origin, day: day))
    }

    /// Removes one of this origin's day objects (past the retention).
    func deleteReports(_ app: String, origin: String, day: String) throws {
        _ = try client.call("DELETE", key: Self.reportKey(app, origin: origin, day: day))
    }

    /// One origin's day object in the bucket.
    struct ReportObject: Sendable {
        var key: String
        var origin: String
        var day: String
        var size: Int64
        var modified: Date
    }

    /// The other origins' day objects of `app` (listed, not read).
    func reportObjects(_ app: String, excluding origin: String) throws -> [ReportObject] {
        try bucket.list(prefix: "apps/\(app)/reports/").compactMap { object in
            let parts = object.key.split(separator: "/")
            guard parts.count == 5, parts[3] != origin, parts[4].hasSuffix(".json") else { return nil }
            let day = String(parts[4].dropLast(5))
            guard DayFigures.isDay(day) else { return nil }
            return ReportObject(key: object.key, origin: String(parts[3]), day: day, size: object.size, modified: object.modified)
        }
    }

    /// One day object's bytes (at most 32 MiB).
    func reportObject(_ key: String) throws -> [UInt8] {
        try S3Client.check(client.call("GET", key: key, limit: 32 << 20), "reading \(key)").body
    }

    /// Removes a day object (any origin's, past the retention).
    func deleteReportObject(_ key: String) throws {
        _ = try client.call("DELETE", key: key)
    }

    // MARK: replica

    /// A replica's pass: every app's settings and missing releases from the bucket into the
    /// local folder, then its pointers (and `head`); returns the apps whose pointers moved.
    @discardableResult
    func pull(into releases: ReleaseStore) throws -> [String] {
        let objects = try bucket.list(prefix: "apps/")
        var byApp: [String: [String]] = [:]
        for object in objects {
            let parts = object.key.split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count >= 3, Identifier.isValidApp(String(parts[1])) else { continue }
            byApp[String(parts[1]), default: []].append(object.key)
        }
        var moved: [String] = []
        for (app, keys) in byApp.sorted(by: { $0.key < $1.key }) {
            guard keys.contains(Self.appKey(app)) else { continue }
            try FileSystem.createDirectory(folder.releases(app))
            let settings = try get(Self.appKey(app))
            if (try? FileSystem.readFile(folder.appSettings(app), limit: 1 << 20)) != settings {
                try FileSystem.writeAtomically(settings, to: folder.appSettings(app))
            }
            var changed = false
            for key in keys where key.hasPrefix("apps/\(app)/releases/") && key.hasSuffix(".json") {
                guard let version = Int(key.split(separator: "/").last!.dropLast(5)), !FileSystem.exists(folder.release(app, version)) else { continue }
                try FileSystem.writeAtomically(try get(key), to: folder.release(app, version))
                changed = true
            }
            for key in keys where key.hasPrefix("apps/\(app)/signed/") && key.hasSuffix(".json") {
                let parts = key.split(separator: "/")
                guard parts.count == 5, Identifier.isValidChannel(String(parts[3])), let version = Int(parts[4].dropLast(5)) else { continue }
                let path = folder.signedCopies(app, channel: String(parts[3])) + "/" + DataFolder.releaseName(version)
                guard !FileSystem.exists(path) else { continue }
                try FileSystem.createDirectory(folder.signedCopies(app, channel: String(parts[3])))
                try FileSystem.writeAtomically(try get(key), to: path)
                changed = true
            }
            var highest = Self.number(folder.head(app)) ?? 0
            var remote: Set<String> = []
            for key in keys where key.hasPrefix("apps/\(app)/channels/") {
                let channel = String(key.split(separator: "/").last ?? "")
                guard Identifier.isValidChannel(channel), let version = Int(String(decoding: try get(key), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)),
                      FileSystem.exists(folder.release(app, version)) else { continue }
                remote.insert(channel)
                highest = max(highest, version)
                let path = releases.pointerPath(app, channel)
                if Self.number(path) != version {
                    if channel != ReleaseStore.production { try FileSystem.createDirectory(folder.channels(app)) }
                    if highest > (Self.number(folder.head(app)) ?? 0) { try FileSystem.writeAtomically(Array("\(highest)\n".utf8), to: folder.head(app)) }
                    try FileSystem.writeAtomically(Array("\(version)\n".utf8), to: path)
                    changed = true
                }
            }
            for name in FileSystem.contents(of: folder.channels(app)) where !remote.contains(name) {
                FileSystem.remove(folder.channels(app) + "/" + name)
                changed = true
            }
            if changed {
                releases.forget(app)
                moved.append(app)
            }
        }
        return moved
    }

    private func get(_ key: String) throws -> [UInt8] {
        try S3Client.check(client.call("GET", key: key, limit: 256 << 20), "reading \(key)").body
    }
}
