import DepotCore
import Foundation
import Testing

@Suite("Apple Archive walker")
struct AppleArchiveTests {
    static func le(_ value: Int, _ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
    static func entry(_ fields: [UInt8], blobs: [UInt8] = []) -> [UInt8] { Array("AA01".utf8) + le(6 + fields.count, 2) + fields + blobs }

    static func inspect(_ bytes: [UInt8]) throws -> AppleArchive.Contents {
        let path = NSTemporaryDirectory() + "aar-\(UUID().uuidString)"
        try FileSystem.writeAtomically(bytes, to: path)
        defer { FileSystem.remove(path) }
        let file = try FileDescriptor.openForReading(path)
        defer { try? file.close() }
        return try AppleArchive.inspect(file, size: Int64(bytes.count))
    }

    @Test("Every field type is read; the file bytes are the DAT blobs, other blobs are skipped")
    func fieldTypes() throws {
        let fields = Array("TYP1F".utf8) + Array("UID4".utf8) + Self.le(501, 4) + Array("INO8".utf8) + Self.le(7, 8) + Array("SH2H".utf8) + [UInt8](repeating: 0, count: 32)
            + Array("CKSF".utf8) + Self.le(1, 4) + Array("SH1G".utf8) + [UInt8](repeating: 0, count: 20) + Array("SH3I".utf8) + [UInt8](repeating: 0, count: 48)
            + Array("SH5J".utf8) + [UInt8](repeating: 0, count: 64) + Array("MTMT".utf8) + [UInt8](repeating: 0, count: 12) + Array("CTMS".utf8) + Self.le(0, 8)
            + Array("FLG*".utf8) + Array("PATP".utf8) + Self.le(3, 2) + Array("a/b".utf8) + Array("XATA".utf8) + Self.le(2, 2) + Array("DATC".utf8) + Self.le(5, 8)
        let archive = Self.entry(fields, blobs: [9, 9] + Array("hello".utf8)) + Self.entry(Array("TYP1D".utf8) + Array("PATP".utf8) + Self.le(0, 2))
        let contents = try Self.inspect(archive)
        #expect(contents.entries == 2 && contents.fileBytes == 5)
        #expect(AppleArchive.kind(ofPrefix: archive) == .uncompressed)
        #expect(AppleArchive.kind(ofPrefix: Array("pbzx....".utf8)) == .lzma)
        #expect(AppleArchive.kind(ofPrefix: Array("PK\u{3}\u{4}".utf8)) == nil)
        #expect(AppleArchive.kind(ofPrefix: Array("AA0".utf8)) == nil)
    }

    @Test("Refused: a blob past the end, bytes after the last entry, an unknown field type, a field past its header, an impossible header size, nothing at all")
    func refusals() throws {
        let file = Self.entry(Array("TYP1F".utf8) + Array("DATB".utf8) + Self.le(10, 4), blobs: Array("0123456789".utf8))
        #expect(throws: AppleArchive.ArchiveError.self) { try Self.inspect(Array(file.dropLast())) }
        #expect(throws: AppleArchive.ArchiveError.self) { try Self.inspect(file + [0x41]) }
        #expect(throws: AppleArchive.ArchiveError.self) { try Self.inspect(Self.entry(Array("TYP1F".utf8) + Array("ABCZ".utf8))) }
        #expect(throws: AppleArchive.ArchiveError.self) { try Self.inspect(Self.entry(Array("UID4".utf8) + [1, 2])) }
        #expect(throws: AppleArchive.ArchiveError.self) { try Self.inspect(Array("AA01".utf8) + Self.le(5, 2)) }
        #expect(throws: AppleArchive.ArchiveError.self) { try Self.inspect(Array("AA01".utf8) + Self.le(200, 2) + [0, 0]) }
        #expect(throws: AppleArchive.ArchiveError.self) { try Self.inspect([]) }
        #expect(try Self.inspect(file).fileBytes == 10)
    }
}
