/// Apple Archive, the format `ba-package` builds a managed asset pack in (`.aar`). The origin
/// stores such packs as uploaded (the system unpacks them); it recognises them by their first
/// four bytes and, for an uncompressed archive, walks every entry to check its structure and
/// to count the bytes it unpacks to.
///
/// An uncompressed archive is a sequence of entries. Each starts with a header: the magic
/// `AA01`, the header's total size (UInt16, little-endian), then fields, each a three-letter
/// key and a subtype letter followed by its value: `*` none; `1 2 4 8` an unsigned integer of
/// that many bytes; `A B C` the size (2, 4 or 8 bytes) of a blob that follows the header, in
/// field order; `F G H I J` a 4, 20, 32, 48 or 64-byte hash; `S T` an 8 or 12-byte time; `P` a
/// string (UInt16 length, then the bytes). The file contents are the `DAT` blobs.
public enum AppleArchive {
    /// How an archive's bytes are laid out, by its magic.
    public enum Kind: String, Sendable, CaseIterable {
        /// Entries as they are (`AA01`): checked and measured here.
        case uncompressed = "AA01"
        /// A compressed stream of entries (LZFSE, LZMA, LZ4, zlib): taken as the publisher declares it.
        case lzfse = "pbze", lzma = "pbzx", lz4 = "pbz4", zlib = "pbzz"
    }

    /// The kind of archive whose first bytes are `prefix` (at least four), or nil.
    public static func kind(ofPrefix prefix: some Collection<UInt8>) -> Kind? {
        guard prefix.count >= 4 else { return nil }
        return Kind(rawValue: String(decoding: prefix.prefix(4), as: UTF8.self))
    }

    /// What an uncompressed archive holds.
    public struct Contents: Sendable, Hashable {
        /// Entries (files, folders, links).
        public var entries: Int
        /// Bytes of file data (`DAT` blobs): what it takes on disk once unpacked.
        public var fileBytes: Int64
    }

    /// Why an archive was refused.
    public struct ArchiveError: Error, Sendable, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    /// Walks the uncompressed archive in `file` (`size` bytes) from the start: every header well
    /// formed, every blob inside the file, nothing after the last entry.
    public static func inspect(_ file: FileDescriptor, size: Int64) throws -> Contents {
        var contents = Contents(entries: 0, fileBytes: 0)
        var offset: Int64 = 0
        var header = [UInt8](repeating: 0, count: 65_536)
        while offset < size {
            guard size - offset >= 6 else { throw ArchiveError("entry \(contents.entries + 1) at byte \(offset): the archive ends inside a header") }
            let read = try header.withUnsafeMutableBytes { try file.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<6]), at: offset) }
            guard read == 6 else { throw ArchiveError("the archive ends inside a header at byte \(offset)") }
            guard header[0] == 0x41, header[1] == 0x41, header[2] == 0x30, header[3] == 0x31 else {
                throw ArchiveError("entry \(contents.entries + 1) at byte \(offset) does not start with AA01")
            }
            let headerSize = Int(header[4]) | Int(header[5]) << 8
            guard headerSize >= 6, Int64(headerSize) <= size - offset else {
                throw ArchiveError("entry \(contents.entries + 1) at byte \(offset): header size \(headerSize) is impossible")
            }
            let rest = try header.withUnsafeMutableBytes { buffer in
                try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[6..<headerSize]), at: offset + 6)
            }
            guard rest == headerSize - 6 else { throw ArchiveError("the archive ends inside a header at byte \(offset)") }
            let blobs = try fields(header[0..<headerSize], entry: contents.entries + 1)
            offset += Int64(headerSize)
            for (key, length) in blobs {
                guard length <= size - offset else {
                    throw ArchiveError("entry \(contents.entries + 1): its \(key) blob of \(length) bytes goes past the end of the archive")
                }
                if key == "DAT" { contents.fileBytes += length }
                offset += length
            }
            contents.entries += 1
        }
        guard contents.entries > 0 else { throw ArchiveError("the archive has no entry") }
        return contents
    }

    /// The blobs a header announces (key, size), in order; throws on a malformed field.
    static func fields(_ header: ArraySlice<UInt8>, entry: Int) throws -> [(String, Int64)] {
        var blobs: [(String, Int64)] = []
        var i = header.startIndex + 6
        func value(_ count: Int) throws -> UInt64 {
            guard header.endIndex - i >= count else { throw ArchiveError("entry \(entry): a field runs past its header") }
            var v: UInt64 = 0
            for k in 0..<count { v |= UInt64(header[i + k]) << (8 * UInt64(k)) }
            i += count
            return v
        }
        func skip(_ count: Int) throws -> Int {
            guard header.endIndex - i >= count else { throw ArchiveError("entry \(entry): a field runs past its header") }
            return count
        }
        while i < header.endIndex {
            guard header.endIndex - i >= 4 else { throw ArchiveError("entry \(entry): a field runs past its header") }
            let keyBytes = header[i..<i + 3]
            guard keyBytes.allSatisfy({ $0 >= 0x30 && $0 <= 0x5A }) else { throw ArchiveError("entry \(entry): a field key is not three capitals") }
            let key = String(decoding: keyBytes, as: UTF8.self)
            let subtype = header[i + 3]
            i += 4
            switch subtype {
            case UInt8(ascii: "*"): break
            case UInt8(ascii: "1"): _ = try value(1)
            case UInt8(ascii: "2"): _ = try value(2)
            case UInt8(ascii: "4"): _ = try value(4)
            case UInt8(ascii: "8"): _ = try value(8)
            case UInt8(ascii: "A"): blobs.append((key, Int64(try value(2))))
            case UInt8(ascii: "B"): blobs.append((key, Int64(try value(4))))
            case UInt8(ascii: "C"):
                let length = try value(8)
                guard length <= UInt64(Int64.max) else { throw ArchiveError("entry \(entry): blob \(key) is impossibly large") }
                blobs.append((key, Int64(length)))
            case UInt8(ascii: "F"): _ = try value(4)
            case UInt8(ascii: "G"): i += try skip(20)
            case UInt8(ascii: "H"): i += try skip(32)
            case UInt8(ascii: "I"): i += try skip(48)
            case UInt8(ascii: "J"): i += try skip(64)
            case UInt8(ascii: "S"): _ = try value(8)
            case UInt8(ascii: "T"): i += try skip(12)
            case UInt8(ascii: "P"): i += try skip(Int(try value(2)))
            default: throw ArchiveError("entry \(entry): field \(key) has an unknown type")
            }
        }
        return blobs
    }
}
