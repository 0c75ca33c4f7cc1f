import Foundation
import ZIPFoundation

/// Packs whose content type is `application/zip`: the origin counts their unpacked size (the
/// manifest's `installSize`) and the client installs them unpacked.
///
/// One rule set for both sides: every entry is a regular file or a folder, with a relative
/// path that stays inside the destination (no leading `/`, no `..` component, no `\`, no NUL).
/// Links of any kind are refused.
public enum ZipPack {
    /// The content type that marks a pack as a zip archive.
    public static let contentType = "application/zip"

    /// What an archive holds.
    public struct Contents: Sendable, Equatable {
        /// The sum of the uncompressed sizes of its files: the manifest's `installSize`.
        public var installSize: Int64
        /// The number of files (folders not counted).
        public var files: Int
    }

    /// Whether a content type names a zip archive (parameters ignored).
    public static func isZip(contentType: String) -> Bool {
        contentType.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased() == Self.contentType
    }

    /// Reads the archive's central directory, checking every entry against the rules.
    public static func inspect(_ path: String) throws(ZipPackError) -> Contents {
        let archive = try open(path)
        var contents = Contents(installSize: 0, files: 0)
        var layout = Layout()
        for entry in archive {
            try check(entry)
            try layout.add(entry)
            if entry.type == .file {
                // A directory may declare any sizes (ZIP64: up to 2⁶⁴ - 1 each): their sum must
                // not trap the reader. No real pack unpacks to 8 EiB.
                let (sum, overflow) = contents.installSize.addingReportingOverflow(Int64(clamping: entry.uncompressedSize))
                guard !overflow else { throw .damaged("the entries' declared sizes add up to more than 2⁶³ - 1 bytes") }
                contents.installSize = sum
                contents.files += 1
            }
        }
        return contents
    }

    /// Unpacks the archive into `directory` (created if missing; an empty one the caller made
    /// is used as it is); the CRC-32 of every file is checked. Files are written with mode 0644
    /// and folders 0755 whatever the archive says. `limit`, when given, is asked after each
    /// entry's folders are made and before each chunk is written, with the bytes written so far
    /// (the chunk's included) and the files and folders made so far, and stops the extraction
    /// (``ZipPackError/limitReached(_:)``) by returning a reason: the bytes an archive really
    /// unpacks to are counted as they come, whatever its directory declares. On error, what was
    /// unpacked so far stays for the caller to remove.
    public static func extract(_ path: String, into directory: String, limit: ((_ written: Int64, _ entries: Int) -> String?)? = nil) throws(ZipPackError) {
        let archive = try open(path)
        do {
            // (Fsynced whole with everything in it by ``syncTree(_:)`` at the end.)
            try FileSystem.createDirectory(directory, durable: false)
        } catch {
            if error.isNoSpace { throw .noSpace }
            throw .io("cannot create \(directory): \(error)")
        }
        var layout = Layout()
        var written: Int64 = 0
        var entries = 0
        for entry in archive {
            try check(entry)
            try layout.add(entry)
            // Split as the file system does, by bytes: `/` and a combining mark are one Character.
            let parts = entry.path.utf8.split(separator: UInt8(ascii: "/")).map { String(decoding: $0, as: UTF8.self) }
            guard !parts.isEmpty else { continue }
            do {
                var folder = directory
                for part in entry.type == .directory ? parts : parts.dropLast() {
                    folder += "/" + part
                    // One mkdir: the parent was made just before, or exists. Each folder made counts
                    // as an entry (a deep path makes many from one entry).
                    if System.makeFolder(folder) {
                        entries += 1
                    } else if System.errno != EEXIST {
                        throw SystemError(call: "mkdir", errno: System.errno, path: folder)
                    }
                }
                if entry.type == .file { entries += 1 }
                if let refusal = limit?(written, entries) { throw ZipPackError.limitReached(refusal) }
                guard entry.type == .file else { continue }
                let target = folder + "/" + parts.last!
                let file = try FileDescriptor(path: target, flags: O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
                let crc = try archive.extract(entry, bufferSize: 256 << 10, skipCRC32: false) { chunk in
                    written += Int64(chunk.count)
                    if let refusal = limit?(written, entries) { throw ZipPackError.limitReached(refusal) }
                    try chunk.withUnsafeBytes { try file.write($0) }
                }
                try file.close()
                guard crc == entry.checksum else { throw ZipPackError.damaged("entry \(entry.path): its CRC-32 does not match the archive's") }
            } catch let error as ZipPackError {
                throw error
            } catch let error as SystemError {
                if error.isNoSpace { throw .noSpace }
                throw .io("cannot write entry \(entry.path): \(error)")
            } catch {
                throw .damaged("entry \(entry.path): \(error)")
            }
        }
        try syncTree(directory)
    }

    /// fsyncs every file and folder under `directory`, deepest first, so that the tree switched
    /// in after extraction is on disk whole: a crash cannot leave a truncated entry recorded as
    /// installed. Each file and folder below gets an ordered sync and `directory` itself a
    /// `level` one: on Apple platforms one drive flush (`F_FULLFSYNC`) for the whole tree, which
    /// commits every sync before it, not one per file (``SyncLevel``).
    static func syncTree(_ directory: String, _ level: SyncLevel = .full) throws(ZipPackError) {
        do {
            for name in FileSystem.contents(of: directory) {
                let path = directory + "/" + name
                if FileSystem.isDirectory(path) {
                    try syncTree(path, .ordered)
                } else {
                    try FileDescriptor.openForReading(path).sync(.ordered)
                }
            }
            try FileSystem.syncDirectory(directory, level)
        } catch let error as SystemError {
            if error.isNoSpace { throw .noSpace }
            throw .io("cannot write \(directory) durably: \(error)")
        } catch {
            throw .io("cannot write \(directory) durably: \(error)")
        }
    }

    private static func open(_ path: String) throws(ZipPackError) -> Archive {
        do {
            return try Archive(url: URL(fileURLWithPath: path), accessMode: .read)
        } catch {
            throw .notAZip
        }
    }

    private static func check(_ entry: Entry) throws(ZipPackError) {
        if let why = ZipEntryPath.refusal(entry.path, isLink: entry.type == .symlink) { throw .unsafeEntry(entry.path, why) }
    }

    /// The paths seen so far: a file listed twice, or a path that is a file in one entry and a
    /// folder in another, would unpack to fewer bytes than the archive counts (the manifest's
    /// `installSize`), and a device would refuse the pack at every event. Compared ignoring case,
    /// as Apple platforms' default volumes do.
    struct Layout {
        var files = Set<String>()
        var folders = Set<String>()

        mutating func add(_ entry: Entry) throws(ZipPackError) {
            // By bytes, as the file system and `extract` split: `/` and a combining mark are one Character.
            let parts = entry.path.lowercased().utf8.split(separator: UInt8(ascii: "/")).map { String(decoding: $0, as: UTF8.self) }
            guard !parts.isEmpty else { return }
            for depth in 1..<max(1, parts.count) {
                let folder = parts[0..<depth].joined(separator: "/")
                guard !files.contains(folder) else { throw .unsafeEntry(entry.path, "a file of the archive has the path of its folder") }
                folders.insert(folder)
            }
            let path = parts.joined(separator: "/")
            if entry.type == .directory {
                guard !files.contains(path) else { throw .unsafeEntry(entry.path, "listed as a file and as a folder") }
                folders.insert(path)
            } else {
                guard !folders.contains(path) else { throw .unsafeEntry(entry.path, "listed as a file and as a folder") }
                guard files.insert(path).inserted else { throw .unsafeEntry(entry.path, "listed twice (letter case aside)") }
            }
        }
    }
}

/// Why a zip pack was refused.
public enum ZipPackError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Not a zip archive, or one whose central directory cannot be read.
    case notAZip
    /// An entry that would land outside the destination, or a link.
    case unsafeEntry(String, String)
    /// A file whose data is damaged (CRC-32 mismatch, bad compression).
    case damaged(String)
    /// The destination's disk is full.
    case noSpace
    /// Extraction was stopped by its caller's limit (the reason given).
    case limitReached(String)
    /// Another file system error.
    case io(String)

    public var description: String {
        switch self {
        case .notAZip: "the pack is marked application/zip but is not a readable zip archive"
        case .unsafeEntry(let path, let why): "zip entry \"\(path)\" refused: \(why)"
        case .damaged(let what): "the zip archive is damaged: \(what)"
        case .noSpace: "no space left on the device while unpacking the zip archive"
        case .limitReached(let why): "unpacking the zip archive stopped: \(why)"
        case .io(let what): what
        }
    }
}
