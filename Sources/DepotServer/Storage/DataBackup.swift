import DepotCore
import Foundation

/// What `backup.json` in a backup says: written last, just before the backup gets its name.
public struct BackupRecord: Codable, Sendable {
    /// This record's format (1).
    public var format: Int
    /// The `depot` that took it (``AssetDepotVersion``).
    public var depotVersion: String
    /// When the copy began.
    public var takenAt: Date
    /// Each app's highest release in the copy (the highest number its pointers name).
    public var apps: [String: Int]

    public static let currentFormat = 1
    /// The record's name in a backup (and in a data folder a backup was copied back into by hand).
    public static let fileName = "backup.json"
}

/// A consistent copy of a data folder into a new folder, safe while `depot serve` runs on it and
/// publishes: `depot backup`.
///
/// Consistency comes from the order, not from stopping writers. Every file of the folder is
/// written once and renamed into place, and a record is written only after what it names is
/// durable: a release before the pointer (`head`, `current`, `channels/*`) that names it, a key
/// before anything signed or encrypted with it, a blob before any release or draft that names
/// it. So the copy takes the pointers of every app first, then the rest of `apps/` (releases,
/// signed copies, drafts, rollouts, settings, reports, trust rules, attested keys), then `keys/`, `tokens.json`
/// and the other files of the root, and `blobs/` last: whatever a copied file names was on disk
/// before it, and is copied after it. Blobs are never removed meanwhile: the copy holds
/// `backup.lock` shared (``BackupLock``), and the origin's sweep and `depot gc` skip their
/// removals while it does. Left out: temporary files (`.tmp-…`), lock files (`*.lock`, made
/// again when needed) and `uploads/` (uploads in flight: a client resuming one against a
/// restored origin is answered 404 and starts again).
///
/// Every file copied and every folder is fsynced; the copy is made in `DEST.partial-…` and
/// renamed to `DEST` once whole, with `backup.json` (``BackupRecord``) its last file, so a
/// backup that crashed is never taken for a good one.
public enum DataBackup {
    /// What a backup copied.
    public struct Summary: Sendable {
        public var record: BackupRecord
        public var files: Int
        public var bytes: Int64
    }

    /// Copies the data folder at `data` into the new folder `destination` (which must not exist,
    /// or be empty).
    public static func take(data: String, to destination: String) throws -> Summary {
        let folder = DataFolder(data)
        guard folder.exists else { throw DepotError.notFound("a data folder at \(data)") }
        let destination = destination.count > 1 && destination.hasSuffix("/") ? String(destination.dropLast()) : destination
        if FileSystem.isDirectory(destination) {
            guard FileSystem.contents(of: destination).isEmpty else {
                throw DepotError.conflict("destination_not_empty", "\(destination) exists and is not empty: a backup goes into a new folder")
            }
        } else if FileSystem.exists(destination) {
            throw DepotError.conflict("destination_not_empty", "\(destination) exists and is not a folder")
        }
        let source = URL(fileURLWithPath: folder.root).standardizedFileURL.path + "/"
        let target = URL(fileURLWithPath: destination).standardizedFileURL.path + "/"
        guard !target.hasPrefix(source), !source.hasPrefix(target) else {
            throw DepotError.badRequest("the backup \(destination) must lie outside the data folder \(data)")
        }
        let lock = try BackupLock.shared(folder)
        defer { try? lock.close() }
        let takenAt = Date()
        let partial = destination + ".partial-" + Hex.encode(SecureRandom.bytes(6))
        let copier = TreeCopier()
        try copier.makeFolder(partial, like: folder.root)
        do {
            // 1. Every app's pointers, before anything they may name.
            try copier.makeFolder(partial + "/apps", like: folder.apps)
            var pointed = Set<String>()
            let apps = FileSystem.contents(of: folder.apps)
            for app in apps where isApp(folder, app) { try copyPointers(folder, app, into: partial, copier: copier, copied: &pointed) }
            // 2. The rest of apps/ (an app made meanwhile: its pointers first, too).
            for name in FileSystem.contents(of: folder.apps) where !skipped(name) {
                if isApp(folder, name) && !apps.contains(name) { try copyPointers(folder, name, into: partial, copier: copier, copied: &pointed) }
                try copier.copy(folder.apps + "/" + name, to: partial + "/apps/" + name, excluding: pointed)
            }
            try FileSystem.syncDirectory(partial + "/apps")
            // 3. Keys, then tokens.json and whatever else the root holds.
            try copier.copy(folder.keys, to: partial + "/keys")
            for name in FileSystem.contents(of: folder.root) where !["apps", "blobs", "keys", "uploads", BackupRecord.fileName].contains(name) && !skipped(name) {
                try copier.copy(folder.root + "/" + name, to: partial + "/" + name)
            }
            // 4. Blobs last: every blob a copied release or draft names is on disk by now.
            try copier.copy(folder.blobs, to: partial + "/blobs")
            let record = BackupRecord(
                format: BackupRecord.currentFormat, depotVersion: AssetDepotVersion.current, takenAt: takenAt,
                apps: ReleaseFloor.highestReleases(DataFolder(partial), pointersOnly: true)
            )
            try StoredJSON.write(record, to: partial + "/" + BackupRecord.fileName, mode: 0o600)
            try FileSystem.syncDirectory(partial)
            try FileSystem.durableRename(partial, to: destination)
            return Summary(record: record, files: copier.files, bytes: copier.bytes)
        } catch {
            // Nothing half made is left under a name that looks like a backup.
            try? FileManager.default.removeItem(atPath: partial)
            throw error
        }
    }

    /// Names never copied: temporary files and lock files.
    static func skipped(_ name: String) -> Bool { name.hasPrefix(".tmp-") || name.hasSuffix(".lock") }

    private static func isApp(_ folder: DataFolder, _ name: String) -> Bool { !skipped(name) && FileSystem.isDirectory(folder.app(name)) }

    /// Copies `current`, `head` and `channels/*` of `app`, recording their source paths in `copied`.
    private static func copyPointers(_ folder: DataFolder, _ app: String, into partial: String, copier: TreeCopier, copied: inout Set<String>) throws {
        let into = partial + "/apps/" + app
        try copier.makeFolder(into, like: folder.app(app))
        for pointer in [folder.currentPointer(app), folder.head(app)] where FileSystem.exists(pointer) {
            if try copier.copyFile(pointer, to: into + "/" + FileSystem.lastComponent(of: pointer)) { copied.insert(pointer) }
        }
        guard FileSystem.isDirectory(folder.channels(app)) else { return }
        try copier.makeFolder(into + "/channels", like: folder.channels(app))
        for name in FileSystem.contents(of: folder.channels(app)) where !skipped(name) {
            let pointer = folder.channels(app) + "/" + name
            if try copier.copyFile(pointer, to: into + "/channels/" + name) { copied.insert(pointer) }
        }
    }
}

/// Copies files and folders with their permission bits, each file fsynced, each folder fsynced
/// once its entries are in; skips temporary and lock files, and what vanishes while it copies.
final class TreeCopier {
    private(set) var files = 0
    private(set) var bytes: Int64 = 0
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)

    deinit { buffer.deallocate() }

    /// The permission bits of `path`, and whether it is a folder, a file or something else (nil: gone).
    static func kind(_ path: String) -> (mode: mode_t, folder: Bool, file: Bool)? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        let type = info.st_mode & S_IFMT
        return (info.st_mode & 0o7777, type == S_IFDIR, type == S_IFREG)
    }

    /// Makes `path` (if missing) with the permission bits of `model`.
    func makeFolder(_ path: String, like model: String) throws {
        let mode = Self.kind(model)?.mode ?? 0o755
        if !FileSystem.isDirectory(path) { try FileSystem.createDirectory(path, mode: mode) }
        FileSystem.setMode(path, mode)
    }

    /// Copies `from` (a file, or a folder and everything in it) to `to`, leaving out the paths
    /// in `excluding`, temporary files and lock files. Something that vanished is left out.
    func copy(_ from: String, to: String, excluding: Set<String> = []) throws {
        guard let kind = Self.kind(from) else { return }
        if kind.file {
            if !excluding.contains(from) { _ = try copyFile(from, to: to) }
            return
        }
        guard kind.folder else { return }
        try makeFolder(to, like: from)
        for name in FileSystem.contents(of: from) where !DataBackup.skipped(name) {
            try copy(from + "/" + name, to: to + "/" + name, excluding: excluding)
        }
        try FileSystem.syncDirectory(to)
    }

    /// The file at `path` opened for reading, or nil if it is gone (removed since it was listed).
    private static func openIfPresent(_ path: String) throws -> FileDescriptor? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw SystemError(call: "open", errno: errno, path: path)
        }
        return FileDescriptor(adopting: fd, path: path)
    }

    /// Copies one file with its permission bits and fsyncs it; false if it was gone.
    @discardableResult
    func copyFile(_ from: String, to: String) throws -> Bool {
        guard let input = try Self.openIfPresent(from) else { return false }
        var info = stat()
        guard fstat(input.rawValue, &info) == 0 else { throw SystemError(call: "fstat", errno: errno, path: from) }
        let mode = info.st_mode & 0o7777
        let output = try FileDescriptor(path: to, flags: O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode: mode)
        // The exact bits, whatever the umask (keys stay 0600).
        guard fchmod(output.rawValue, mode) == 0 else { throw SystemError(call: "fchmod", errno: errno, path: to) }
        while true {
            let n = try input.read(into: buffer)
            if n == 0 { break }
            try output.write(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            bytes += Int64(n)
        }
        try output.sync()
        try output.close()
        files += 1
        return true
    }
}
