import DepotCore
import Foundation

/// What the sweep keeps of an app between passes (`apps/<app>/retained`), so that a pass reads
/// the releases made since the last one, never every release of the retention again (issue
/// 63): each blob a release published since `from` uses, with the newest publish date of a
/// release using it, and the release up to which releases were read (`through`, with the
/// SHA-256 of its file).
///
/// A cache of the release files, never the record: it is used only when release `through`
/// is still the file it read (a restore of an older folder, or a folder published anew since,
/// is read afresh) and the retention's start is not before `from` (a longer retention, a clock
/// set back: read afresh), and only whole (a trailer with the count and the SHA-256 of what
/// precedes it). Anything else is ignored and the pass reads the retention's releases, as the
/// first pass does. A blob it names that no release needs is kept a pass longer at worst; a
/// blob it lacks is one no release it read used.
///
/// Text, a line each: `retained 1 <through> <sha256 of release through> <from, seconds>`, then
/// `<blob sha256> <newest use, seconds>` per blob, then `end <count> <sha256 of the lines before>`.
struct RetainedBlobs: Equatable {
    /// Releases 1 through `through` are accounted for.
    var through: Int
    /// The SHA-256 of release `through`'s file, as read.
    var digest: String
    /// Uses before this date were left out.
    var from: Date
    /// Each blob and the newest publish date of a release (read) that uses it.
    var lastUsed: [String: Date]

    static let header = "retained 1"
    /// A bound on what is read: a blob's line is 80 bytes, so millions of blobs.
    static let limit = 256 << 20

    /// Records the uses of `manifest`'s blobs (its packs, their patches, rollout candidates)
    /// when it was published at or after `cutoff`.
    mutating func use(_ manifest: Manifest, cutoff: Date) {
        guard manifest.publishedAt >= cutoff else { return }
        for pack in manifest.allEntries {
            for blob in pack.blobs where lastUsed[blob].map({ $0 < manifest.publishedAt }) ?? true { lastUsed[blob] = manifest.publishedAt }
        }
    }

    /// The file's bytes.
    func encoded() -> [UInt8] {
        var text = "\(Self.header) \(through) \(digest) \(Self.seconds(from))\n"
        for (blob, date) in lastUsed.sorted(by: { $0.key < $1.key }) { text += "\(blob) \(Self.seconds(date))\n" }
        let bytes = Array(text.utf8)
        return bytes + Array("end \(lastUsed.count) \(Hex.encode(SHA256Hasher.hash(bytes)))\n".utf8)
    }

    /// The record `bytes` hold, or nil unless they are whole and well formed.
    static func decode(_ bytes: [UInt8]) -> RetainedBlobs? {
        guard bytes.last == 10, let trailerStart = bytes.dropLast().lastIndex(of: 10).map({ $0 + 1 }) else { return nil }
        let body = Array(bytes[..<trailerStart])
        let trailer = String(decoding: bytes[trailerStart..<(bytes.count - 1)], as: UTF8.self).split(separator: " ")
        guard trailer.count == 3, trailer[0] == "end", let count = Int(trailer[1]),
              String(trailer[2]) == Hex.encode(SHA256Hasher.hash(body)) else { return nil }
        let lines = body.split(separator: 10, omittingEmptySubsequences: false).dropLast()
        guard let first = lines.first, lines.count == count + 1 else { return nil }
        let head = String(decoding: first, as: UTF8.self).split(separator: " ")
        guard head.count == 5, "\(head[0]) \(head[1])" == header, let through = Int(head[2]), through >= 1,
              isDigest(head[3]), let from = date(head[4]) else { return nil }
        var lastUsed: [String: Date] = [:]
        lastUsed.reserveCapacity(count)
        for line in lines.dropFirst() {
            let fields = String(decoding: line, as: UTF8.self).split(separator: " ")
            guard fields.count == 2, isDigest(fields[0]), let date = date(fields[1]) else { return nil }
            lastUsed[String(fields[0])] = date
        }
        guard lastUsed.count == count else { return nil }
        return RetainedBlobs(through: through, digest: String(head[3]), from: from, lastUsed: lastUsed)
    }

    /// Reads the record at `path`: a plain file only (no link followed, no FIFO waited on),
    /// nil when there is none or it is not whole.
    static func read(_ path: String) -> RetainedBlobs? {
        ReleaseCatalog.read(path, limit: limit).flatMap(decode)
    }

    /// Writes the record (durably, replacing the file whole). Only the app folder's owner
    /// writes, the folder itself (not a link to one): a command run as root beside the origin
    /// leaves no file the service user cannot replace, and writes nowhere a link points.
    func write(to path: String) throws {
        guard ReleaseCatalog.ownFolder(of: path) else { return }
        try FileSystem.writeAtomically(encoded(), to: path)
    }

    /// A date as whole milliseconds since 1970, so that it reads back as it was written to
    /// within a millisecond (rounded up: a use read back is never earlier than it was, so a
    /// blob is never let go before its time).
    private static func seconds(_ date: Date) -> String {
        let milliseconds = (date.timeIntervalSince1970 * 1000).rounded(.up)
        return String(format: "%.3f", milliseconds / 1000)
    }

    private static func date(_ text: Substring) -> Date? {
        guard let value = Double(text), value.isFinite, value >= 0, value < 1e11 else { return nil }
        return Date(timeIntervalSince1970: value)
    }

    private static func isDigest(_ text: Substring) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }
}
