import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// A zip's central directory is a publisher's claim: whatever sizes it declares, reading it
/// must not trap the origin.
@Suite("Zip directories that lie about sizes")
struct ZipDirectoryTests {
    /// A stored (uncompressed) zip whose entries carry no data and declare, through ZIP64 extra
    /// fields, `sizes` as their uncompressed and compressed sizes.
    static func lyingZip(names: [String], size: UInt64) -> [UInt8] {
        func le16(_ v: Int) -> [UInt8] { [UInt8(v & 0xff), UInt8((v >> 8) & 0xff)] }
        func le32(_ v: UInt32) -> [UInt8] { (0..<4).map { UInt8((v >> (8 * $0)) & 0xff) } }
        func le64(_ v: UInt64) -> [UInt8] { (0..<8).map { UInt8((v >> (8 * UInt64($0))) & 0xff) } }
        let extra = le16(1) + le16(16) + le64(size) + le64(size)
        var out: [UInt8] = []
        var central: [UInt8] = []
        for name in names {
            let offset = UInt32(out.count)
            let bytes = Array(name.utf8)
            out += le32(0x0403_4b50) + le16(45) + le16(0) + le16(0) + le16(0) + le16(0x21) + le32(0) + le32(0xffff_ffff) + le32(0xffff_ffff)
                + le16(bytes.count) + le16(extra.count) + bytes + extra
            central += le32(0x0201_4b50) + le16(45) + le16(45) + le16(0) + le16(0) + le16(0) + le16(0x21) + le32(0) + le32(0xffff_ffff) + le32(0xffff_ffff)
                + le16(bytes.count) + le16(extra.count) + le16(0) + le16(0) + le16(0) + le32(0) + le32(offset) + bytes + extra
        }
        let start = UInt32(out.count)
        out += central
        out += le32(0x0605_4b50) + le16(0) + le16(0) + le16(names.count) + le16(names.count) + le32(UInt32(central.count)) + le32(start) + le16(0)
        return out
    }

    @Test("A zip whose directory declares sizes that overflow when summed (two entries of 2⁶³ - 1 bytes) is refused as damaged, by the reader and by the origin, which goes on serving")
    func overflowingSizes() async throws {
        let work = TemporaryDirectory("depot-zip-sizes")
        defer { work.remove() }
        let path = work.path + "/lying.zip"
        try FileSystem.writeAtomically(Self.lyingZip(names: ["a.bin", "b.bin"], size: UInt64(Int64.max)), to: path)
        #expect(throws: ZipPackError.self) { try ZipPack.inspect(path) }
        do {
            _ = try ZipPack.inspect(path)
        } catch {
            #expect("\(error)".contains("add up to more than"), "\(error)")
        }
        try await withServer { origin in
            let answer = try upload(origin, pack: "level", try FileSystem.readFile(path), headers: ["Content-Type: application/zip"])
            #expect((400..<500).contains(answer.status), "\(answer.status) \(answer.bodyText)")
            #expect(try request(origin, "GET", "/healthz").status == 200)
        }
    }
}
