import DepotCore
import DepotServer
import Foundation

/// Apple Archives made by hand, for the managed-app tests: an uncompressed archive (`AA01`
/// entries: a folder, then one file per given path, each with its type, path, mode, times and
/// data blob) and a compressed-magic one (what `ba-package` writes by default; the origin reads
/// only its magic).
public enum ArchiveFixture {
    /// An uncompressed archive of `files`; its unpacked size is the sum of their bytes.
    public static func uncompressed(_ files: [(path: String, bytes: [UInt8])]) -> [UInt8] {
        var out: [UInt8] = []
        func entry(type: UInt8, path: String, data: [UInt8]?) {
            var fields: [UInt8] = Array("TYP1".utf8) + [type]
            fields += Array("PATP".utf8) + le(UInt64(path.utf8.count), 2) + Array(path.utf8)
            fields += Array("MOD2".utf8) + le(type == UInt8(ascii: "D") ? 0o755 : 0o644, 2)
            fields += Array("MTMT".utf8) + le(1_760_000_000, 8) + le(0, 4)
            if let data { fields += Array("DATB".utf8) + le(UInt64(data.count), 4) }
            out += Array("AA01".utf8) + le(UInt64(6 + fields.count), 2) + fields + (data ?? [])
        }
        entry(type: UInt8(ascii: "D"), path: "", data: nil)
        for file in files { entry(type: UInt8(ascii: "F"), path: file.path, data: file.bytes) }
        return out
    }

    /// A stream with a compressed archive's magic (`pbze`, LZFSE) and `payload` after it.
    public static func compressed(_ payload: [UInt8]) -> [UInt8] { Array("pbze".utf8) + payload }

    static func le(_ value: UInt64, _ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: value >> (8 * UInt64($0))) } }

    /// Creates a managed app in the data folder at `path` and a publisher (or `role`) token for it.
    public static func createManagedApp(_ app: String, group: String, in path: String, role: TokenRole = .admin) throws -> String {
        let folder = DataFolder(path)
        try AppStore(folder: folder).create(app, mode: .managed, appGroup: group)
        return try TokenStore(folder: folder).create(app: app, role: role).token
    }
}
