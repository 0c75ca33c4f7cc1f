import DepotCore
import Foundation

/// The layout of the data folder. Every write is crash-safe (temporary file, fsync, rename,
/// fsync of the folder); see docs/Operating.md, "Data folder".
///
/// ```
/// blobs/ab/abcdef…         encrypted packs, named by SHA-256 of the container; immutable
/// apps/<app>/app.json      settings
/// apps/<app>/releases/NNNNNN.json   signed envelopes, immutable
/// apps/<app>/current       the live release number
/// apps/<app>/catalog, patch-state, retained   caches of the release files (``ReleaseCatalog``, ``RetainedBlobs``)
/// apps/<app>/roots/NNNNNN.json      root documents (signed offline), immutable
/// apps/<app>/statements/<channel>/NNNNNN.json   release statements accepted for a protected channel
/// apps/<app>/staging/      the draft of the next release, a file per staged pack
/// apps/<app>/attest/<keyIdHex>.json   App Attest keys the origin accepted (``AttestedKeys``)
/// uploads/                 uploads in progress, never served
/// keys/                    0700: pack master keys (<app>.json), manifest signing key
/// tokens.json              publish tokens as SHA-256 hashes
/// format.json              the folder's format version (``DataFolder/formatVersion``)
/// ```
public struct DataFolder: Sendable {
    /// The folder's path.
    public let root: String

    public init(_ root: String) {
        self.root = root.hasSuffix("/") && root.count > 1 ? String(root.dropLast()) : root
    }

    var blobs: String { root + "/blobs" }
    var apps: String { root + "/apps" }
    var uploads: String { root + "/uploads" }
    var keys: String { root + "/keys" }
    var tokens: String { root + "/tokens.json" }
    var signingKey: String { keys + "/manifest-signing.json" }

    func app(_ id: String) -> String { apps + "/" + id }
    func appSettings(_ id: String) -> String { app(id) + "/app.json" }
    func releases(_ id: String) -> String { app(id) + "/releases" }
    func release(_ id: String, _ version: Int) -> String { releases(id) + "/" + Self.releaseName(version) }
    func currentPointer(_ id: String) -> String { app(id) + "/current" }
    func head(_ id: String) -> String { app(id) + "/head" }
    /// The app's releases in compact form (``ReleaseCatalog``).
    func catalog(_ id: String) -> String { app(id) + "/catalog" }
    /// The blobs the sweep found the retention's releases using (``RetainedBlobs``).
    func retainedBlobs(_ id: String) -> String { app(id) + "/retained" }
    func channels(_ id: String) -> String { app(id) + "/channels" }
    /// Releases signed again for a channel they were promoted to: `signed/<channel>/NNNNNN.json`.
    func signedCopies(_ id: String, channel: String) -> String { app(id) + "/signed/" + channel }
    /// The draft's first format, one file, converted on first read (``DraftStore``).
    func staging(_ id: String) -> String { app(id) + "/staging.json" }
    /// The app's OIDC trust rules (trusted publishing from CI).
    func trustRules(_ id: String) -> String { app(id) + "/trust-rules.json" }
    /// A channel's rollout record (``RolloutRecord``).
    func rollout(_ id: String, channel: String) -> String { app(id) + "/rollouts/" + channel + ".json" }
    /// The app's root documents, as signed envelopes by version: `roots/NNNNNN.json` (``RootStore``).
    func roots(_ id: String) -> String { app(id) + "/roots" }
    func rootDocument(_ id: String, version: Int) -> String { roots(id) + "/" + Self.releaseName(version) }
    /// Release statements accepted for a channel, by release: `statements/<channel>/NNNNNN.json`.
    func statements(_ id: String, channel: String) -> String { app(id) + "/statements/" + channel }
    func statement(_ id: String, channel: String, release: Int) -> String { statements(id, channel: channel) + "/" + Self.releaseName(release) }
    /// The App Attest keys the origin accepted for the app, a file each (``AttestedKeys``).
    func attestedKeys(_ id: String) -> String { app(id) + "/attest" }
    /// This origin's daily aggregates of device reports (``ReportBook``).
    func reports(_ id: String) -> String { app(id) + "/reports" }
    /// This origin's id among the origins of one bucket (its reports' key prefix there).
    var originID: String { root + "/origin-id" }
    func packKeys(_ id: String) -> String { keys + "/" + id + ".json" }
    /// `blobs/ab/abcdef…`, in one allocation (every blob GET makes one).
    func blob(_ sha256: String) -> String {
        TextAssembler.text(capacity: root.utf8.count + 11 + 2 * sha256.utf8.count) { path in
            path.append(root)
            path.append("/blobs/")
            var name = sha256
            name.withUTF8 { bytes in
                path.append(UnsafeBufferPointer(rebasing: bytes.prefix(2)))
                path.append(byte: UInt8(ascii: "/"))
                path.append(bytes)
            }
        }
    }

    static func releaseName(_ version: Int) -> String {
        let digits = String(version)
        return String(repeating: "0", count: max(0, 6 - digits.count)) + digits + ".json"
    }

    /// Takes the folder's exclusive lock (`serve.lock`), held by a running server and by offline
    /// maintenance, so that neither runs on a folder the other is using. Closing the descriptor releases it.
    public func lockExclusively() throws -> FileDescriptor {
        try FileSystem.createDirectory(root)
        let lock = try openLock("serve.lock", flags: O_RDWR, mode: 0o600)
        guard flock(lock.rawValue, LOCK_EX | LOCK_NB) == 0 else {
            throw DepotError.conflict("data_folder_busy", "\(root) is in use by another depot process (a running `depot serve`?)")
        }
        return lock
    }

    /// Opens the lock file `name` at the folder's root, making it if missing, as root may open a
    /// file in a folder another user controls (`depot backup` and `depot restore` keep root's
    /// rights): never through a link (`O_NOFOLLOW`), never a FIFO or anything but a plain file
    /// (`O_NONBLOCK`, then `fstat`), and given to the folder's owner only when this call made it
    /// (`O_EXCL`): a file that was there — a hard link to another file, say — is never chowned.
    func openLock(_ name: String, flags: Int32, mode: mode_t) throws -> FileDescriptor {
        let path = root + "/" + name
        let safe = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
        var fd = open(path, flags | O_CREAT | O_EXCL | safe, mode)
        let made = fd >= 0
        if !made {
            guard errno == EEXIST else { throw SystemError(call: "open", errno: errno, path: path) }
            fd = open(path, flags | safe)
            guard fd >= 0 else {
                if errno == ELOOP {
                    throw DepotError.conflict("lock_not_a_file", "\(path) is a symbolic link, not the lock file depot makes: refused, nothing was opened through it. Remove it (someone with the folder's rights made it)")
                }
                throw SystemError(call: "open", errno: errno, path: path)
            }
        }
        let lock = FileDescriptor(adopting: fd, path: path)
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw SystemError(call: "fstat", errno: errno, path: path) }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw DepotError.conflict("lock_not_a_file", "\(path) is not a plain file (a FIFO, a folder, a device): refused. Remove it (someone with the folder's rights made it)")
        }
        if made { giveToOwner(lock) }
        return lock
    }

    /// When root makes a file in a folder another user owns (`depot backup`, `depot restore`,
    /// which keep root's rights): gives it to that user, so the origin running as it can open it.
    public func giveToOwner(_ file: FileDescriptor) {
        guard geteuid() == 0 else { return }
        var info = stat()
        guard stat(root, &info) == 0, info.st_uid != 0 else { return }
        _ = fchown(file.rawValue, info.st_uid, info.st_gid)
    }

    /// A new file in `uploads/` for bytes on their way to becoming a blob; start-up removes any
    /// that a crash left.
    func scratchFile(suffix: String = ".upload") throws -> (path: String, file: FileDescriptor) {
        let path = uploads + "/" + Hex.encode(SecureRandom.bytes(12)) + suffix
        return (path, try FileDescriptor(path: path, flags: O_WRONLY | O_CREAT | O_EXCL, mode: 0o644))
    }

    /// Whether the folder has been initialised.
    public var exists: Bool { FileSystem.isDirectory(apps) }

    /// The newest format of the data folder this build reads and writes. A folder without
    /// `format.json` (made before formats were recorded) is format 1; a change that an older
    /// `depot` would misread raises the number, and that older `depot` then refuses the folder
    /// rather than half-reading it.
    ///
    /// Format 2 (issue 52): staged and retired pack keys (the key file's second form) and roots
    /// of trust. A folder is raised to it the first time one is written (``raiseFormat(to:)``), so
    /// an upgrade alone keeps the previous `depot` able to roll back: an older `depot keys rotate`
    /// would drop the staged keys builds carry, and an older origin would serve manifests without
    /// the root chain and release statements devices that pin a root require.
    ///
    /// Format 3 (issue 62): App Attest settings in `app.json`. An older `depot` that rewrites
    /// `app.json` (any settings change) would drop them, and `--require` would silently go off;
    /// a folder is raised to it the first time an app's App Attest settings are written.
    public static let formatVersion = 3
    /// The format a new folder is recorded with: the oldest whose files it holds.
    public static let baseFormat = 1
    var formatFile: String { root + "/format.json" }

    /// What `format.json` holds.
    struct FormatRecord: Codable {
        var format: Int
        /// The `depot` version that wrote the record (for the operator: which build to go back to).
        var writtenBy: String?
    }

    /// The folder's format, as recorded (nil: not recorded, a folder from before formats, or none).
    public func recordedFormat() throws -> Int? {
        guard FileSystem.exists(formatFile) else { return nil }
        do {
            return try StoredJSON.read(FormatRecord.self, from: formatFile).format
        } catch {
            throw DepotError(.failure, "data_folder_format", "\(formatFile) cannot be read (\(error)): fix its owner or mode (the data folder's files belong to the user depot serve runs as); nothing was read or changed")
        }
    }

    /// Refuses a folder whose format is newer than this build knows, before anything else of it
    /// is read; records the format when `record` and the folder has none yet.
    public func checkFormat(record: Bool) throws {
        if let format = try recordedFormat() {
            guard format <= Self.formatVersion else {
                let writer = (try? StoredJSON.read(FormatRecord.self, from: formatFile).writtenBy).flatMap { $0 }.map { " (written by depot \($0))" } ?? ""
                throw DepotError.conflict("data_folder_too_new", "\(root) is data-folder format \(format)\(writer); this depot \(AssetDepotVersion.current) reads format \(Self.formatVersion) at most: run the newer depot (or restore a backup taken before the upgrade); nothing was read or changed")
            }
            return
        }
        guard record, FileSystem.isDirectory(root) else { return }
        try StoredJSON.write(FormatRecord(format: Self.baseFormat, writtenBy: AssetDepotVersion.current), to: formatFile)
    }

    /// Raises the recorded format to `format` before a file only that format describes is
    /// written (a crash between the two leaves a folder of the newer format holding older
    /// files, which this build reads).
    /// Under `format.lock` (`flock`): two processes raising at once never lower it.
    public func raiseFormat(to format: Int) throws {
        precondition(format <= Self.formatVersion)
        guard try (recordedFormat() ?? 1) < format else { return }
        let lock = try openLock("format.lock", flags: O_RDONLY, mode: 0o644)
        defer { try? lock.close() }
        while flock(lock.rawValue, LOCK_EX) != 0 {
            guard errno == EINTR else { throw SystemError(call: "flock", errno: errno, path: root + "/format.lock") }
        }
        guard try (recordedFormat() ?? 1) < format else { return }
        try StoredJSON.write(FormatRecord(format: format, writtenBy: AssetDepotVersion.current), to: formatFile)
    }

    /// The folder's format as recorded, or the one a folder without a record has.
    public func currentFormat() throws -> Int { try recordedFormat() ?? Self.baseFormat }

    /// Creates the folders (keys/ with mode 0700) and removes temporary files that a crash left:
    /// only while holding ``lockExclusively()`` (the origin at start-up, offline maintenance), as
    /// the files it removes may be a live origin's writes in progress.
    public func prepare() throws {
        try checkFormat(record: false)
        try makeFolders()
        cleanTemporaryFiles()
    }

    /// Creates the folders (keys/ with mode 0700), removing nothing: what an admin command does
    /// beside a running origin.
    public func makeFolders() throws {
        try checkFormat(record: false)
        try FileSystem.createDirectory(root)
        for folder in [blobs, apps, uploads] { try FileSystem.createDirectory(folder) }
        try FileSystem.createDirectory(keys, mode: 0o700)
        chmod(keys, 0o700)
        try checkFormat(record: true)
    }

    /// Removes what interrupted writes and uploads left behind: nothing there was ever visible.
    @discardableResult
    public func cleanTemporaryFiles() -> Int {
        var removed = FileSystem.removeTemporaryFiles(in: root) + FileSystem.removeTemporaryFiles(in: keys)
        // Resumable uploads (`*.tus`) survive; ResumableUploads.repair() checks them. Everything
        // else goes, folders too: a patch's unpacked trees (`patch-*.new-tree`) a crash left.
        for name in FileSystem.contents(of: uploads) where !name.hasSuffix(".tus") {
            try? FileManager.default.removeItem(atPath: uploads + "/" + name)
            removed += 1
        }
        for prefix in FileSystem.contents(of: blobs) { removed += FileSystem.removeTemporaryFiles(in: blobs + "/" + prefix) }
        for app in FileSystem.contents(of: apps) {
            removed += FileSystem.removeTemporaryFiles(in: self.app(app))
            removed += FileSystem.removeTemporaryFiles(in: releases(app))
            removed += FileSystem.removeTemporaryFiles(in: channels(app))
            removed += FileSystem.removeTemporaryFiles(in: self.app(app) + "/staging")
            removed += FileSystem.removeTemporaryFiles(in: self.app(app) + "/rollouts")
            removed += FileSystem.removeTemporaryFiles(in: reports(app))
            removed += FileSystem.removeTemporaryFiles(in: roots(app))
            removed += FileSystem.removeTemporaryFiles(in: attestedKeys(app))
            let statements = self.app(app) + "/statements"
            removed += FileSystem.removeTemporaryFiles(in: statements)
            for channel in FileSystem.contents(of: statements) { removed += FileSystem.removeTemporaryFiles(in: statements + "/" + channel) }
            // Envelopes re-signed for a channel (a promotion killed before its rename).
            let signed = self.app(app) + "/signed"
            removed += FileSystem.removeTemporaryFiles(in: signed)
            for channel in FileSystem.contents(of: signed) { removed += FileSystem.removeTemporaryFiles(in: signed + "/" + channel) }
        }
        return removed
    }
}

/// JSON helpers for the data folder's small files.
enum StoredJSON {
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }()

    /// Sorted keys, no whitespace (what goes to the bucket in bulk).
    static let compact: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }()

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }()

    static func read<T: Decodable>(_ type: T.Type, from path: String) throws -> T {
        try decoder.decode(type, from: Data(FileSystem.readFile(path)))
    }

    static func write<T: Encodable>(_ value: T, to path: String, mode: mode_t = 0o644) throws {
        try FileSystem.writeAtomically(Array(encoder.encode(value)) + [10], to: path, mode: mode)
    }
}
