import DepotCore
import Foundation

/// An app's releases in compact form, written as they are made: `apps/<app>/catalog`, one line
/// per release made visible (appended under the publish lock, one `write` per line), holding
/// what the listings show of it (dates, pack count, channel) and only the pack entries that
/// were new to the app (a changed container, new patches). Start-up reads it instead of every
/// release file: what the origin keeps of its history (``ReleaseIndex``, ``ReleaseHistory``) is
/// rebuilt from a few hundred bytes a release.
///
/// A cache of the release files, never the record: lines the files do not back (a release not
/// in the folder, above `head`, or a torn last line) are ignored, and releases it lacks (made
/// by an older version, a crash between `head` and the line, a replica's pull) are read from
/// their files and appended, once. Everything it feeds is order-independent (highest
/// revisions, sets of blobs, the newest revisions of each pack), so lines appended by two
/// processes in either order read the same.
struct ReleaseCatalog {
    struct Line: Codable {
        var version: Int
        var publishedAt: Date
        var expiresAt: Date
        var packs: Int
        var channel: String
        /// The release's entries (its packs and rollout candidates) new to the app's index.
        var entries: [PackEntry]

        /// The line of release `manifest`, with the entries `index` does not know.
        init(_ manifest: Manifest, newTo index: ReleaseIndex) {
            (version, publishedAt, expiresAt, packs) = (manifest.version, manifest.publishedAt, manifest.expiresAt, manifest.packs.count)
            channel = manifest.channel ?? ReleaseStore.production
            entries = manifest.allEntries.filter { !index.knows($0) }
        }
    }

    /// Only the facts the listings need: the entries are skipped, not built.
    private struct Summary: Decodable {
        var version: Int
        var publishedAt: Date
        var expiresAt: Date
        var packs: Int
        var channel: String
    }

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }()

    let path: String

    /// The lines that can be read, in file order (a torn one is skipped).
    func lines() -> [Line] { Self.split(path).compactMap { try? Self.decoder.decode(Line.self, from: Data($0)) } }

    /// Each release's listing facts, by version.
    func summaries() -> [Int: ReleaseHistory.Release] {
        var out: [Int: ReleaseHistory.Release] = [:]
        for bytes in Self.split(path) {
            guard let line = try? Self.decoder.decode(Summary.self, from: Data(bytes)) else { continue }
            out[line.version] = ReleaseHistory.Release(version: line.version, publishedAt: line.publishedAt, expiresAt: line.expiresAt, packs: line.packs, channel: line.channel)
        }
        return out
    }

    private static func split(_ path: String) -> [ArraySlice<UInt8>] {
        guard let bytes = read(path) else { return [] }
        return bytes.split(separator: 10, omittingEmptySubsequences: true)
    }

    /// A plain file's bytes (bounded: a year of a hundred releases a day is a few MB), opened
    /// without following a link or waiting on a FIFO: nil for anything else.
    static func read(_ path: String, limit: Int = 1 << 30) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        let file = FileDescriptor(adopting: fd, path: path)
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, Int(info.st_size) <= limit else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        guard let count = try? bytes.withUnsafeMutableBytes({ try file.readFully(into: $0) }) else { return nil }
        return Array(bytes[0..<count])
    }

    /// Whether the folder holding `path` is a directory (not a link to one) this process's user
    /// owns: only then does a cache get written into it.
    static func ownFolder(of path: String) -> Bool {
        var folder = stat()
        return lstat(String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)]), &folder) == 0
            && folder.st_mode & S_IFMT == S_IFDIR && folder.st_uid == geteuid()
    }

    /// Appends lines with one `write` (`O_APPEND`): a reader sees whole lines, or a torn last
    /// one it ignores. Not synced: a line lost to a power cut is read from its release file at
    /// the next start.
    /// Only the folder's owner appends: a command run as root beside the origin never leaves a
    /// catalog the service user cannot write.
    func append(_ lines: [Line]) throws {
        guard !lines.isEmpty else { return }
        guard Self.ownFolder(of: path) else { return }
        let file = try FileDescriptor(path: path, flags: O_RDWR | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, mode: 0o644)
        defer { try? file.close() }
        // After a torn last line (a crash mid-append), a new line starts on its own.
        var last: UInt8 = 10
        let size = lseek(file.rawValue, 0, SEEK_END)
        if size > 0 { _ = pread(file.rawValue, &last, 1, size - 1) }
        var bytes: [UInt8] = last == 10 ? [] : [10]
        for line in lines {
            bytes += Array(try StoredJSON.compact.encode(line))
            bytes.append(10)
        }
        try file.write(bytes)
    }
}
