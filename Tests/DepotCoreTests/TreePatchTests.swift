import DepotCore
import Foundation
import Testing

/// Tree patches (a zip pack kept unpacked): kept, moved, patched, new and removed entries; the
/// result is exactly the target tree; hostile paths and wrong bytes are refused.
@Suite("Tree patches")
struct TreePatchTests {
    static func random(_ count: Int, seed: UInt64) -> [UInt8] {
        var state = seed
        return (0..<count).map { _ in
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return UInt8(truncatingIfNeeded: state >> 33)
        }
    }

    static func write(_ files: [String: [UInt8]], under root: String) throws {
        for (path, bytes) in files {
            try FileSystem.createDirectory(FileSystem.directory(of: root + "/" + path))
            try FileSystem.writeAtomically(bytes, to: root + "/" + path)
        }
    }

    static func read(_ root: String, _ prefix: String = "") throws -> [String: [UInt8]] {
        var out: [String: [UInt8]] = [:]
        for name in FileSystem.contents(of: root + (prefix.isEmpty ? "" : "/" + prefix)) {
            let path = prefix.isEmpty ? name : prefix + "/" + name
            if FileSystem.isDirectory(root + "/" + path) { out.merge(try read(root, path)) { $1 } } else { out[path] = try FileSystem.readFile(root + "/" + path) }
        }
        return out
    }

    @Test("Kept, moved, patched, new and removed entries: the result is the target tree, and the patch carries about the changed bytes")
    func roundTrip() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("depot-tree-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let big = Self.random(300_000, seed: 1)
        var changed = big
        for k in 0..<2000 { changed[100_000 + k] ^= 0x55 }
        let base: [String: [UInt8]] = [
            "levels/1.bin": big, "levels/2.bin": Self.random(80_000, seed: 2), "old/moved.bin": Self.random(50_000, seed: 3), "gone.txt": Array("bye".utf8),
        ]
        let target: [String: [UInt8]] = [
            "levels/1.bin": changed, "levels/2.bin": base["levels/2.bin"]!, "new/place.bin": base["old/moved.bin"]!, "fresh.txt": Array("hello".utf8),
        ]
        try Self.write(base, under: dir + "/base")
        try Self.write(target, under: dir + "/target")
        let summary = try TreePatch.make(base: dir + "/base", target: dir + "/target", to: dir + "/patch")
        #expect(summary.kept == 2 && summary.patched == 1 && summary.sent == 1, "\(summary)")
        #expect(summary.size < 2000 + 1000, "about the changed bytes: \(summary.size)")
        try TreePatch.apply(patch: dir + "/patch", base: dir + "/base", into: dir + "/result")
        #expect(try Self.read(dir + "/result") == target)
    }

    @Test("A path that leaves the tree, bytes that are not the stated file, or bytes after the last entry are refused")
    func refusals() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("depot-tree-bad-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileSystem.createDirectory(dir)
        try FileSystem.createDirectory(dir + "/base")
        func entry(_ path: String, _ bytes: [UInt8], digest: [UInt8]? = nil) -> [UInt8] {
            DeltaFormat.varint(UInt64(path.utf8.count)) + Array(path.utf8) + [3] + (digest ?? SHA256Hasher.hash(bytes))
                + DeltaFormat.varint(UInt64(bytes.count)) + DeltaFormat.varint(UInt64(bytes.count)) + bytes
        }
        let cases: [([UInt8], DeltaError.Kind)] = [
            (TreePatch.magic + [1, 0, 1] + entry("../escape", [1]), .malformed),
            (TreePatch.magic + [1, 0, 1] + entry("ok.bin", [1], digest: [UInt8](repeating: 0, count: 32)), .resultMismatch),
            (TreePatch.magic + [1, 0, 1] + entry("ok.bin", [1]) + [0], .malformed),
            (TreePatch.magic + [2, 0, 0], .malformed),
            // An entry that states 1 byte and sends 100: stopped at the first byte past its size.
            (TreePatch.magic + [1, 0, 1] + DeltaFormat.varint(7) + Array("big.bin".utf8) + [3] + SHA256Hasher.hash([UInt8](repeating: 9, count: 100))
                + DeltaFormat.varint(1) + DeltaFormat.varint(100) + [UInt8](repeating: 9, count: 100), .resultMismatch),
            // More entries than any tree may have.
            (TreePatch.magic + [1, 0] + DeltaFormat.varint(2_000_000), .malformed),
        ]
        for (index, (bytes, kind)) in cases.enumerated() {
            try FileSystem.writeAtomically(bytes, to: dir + "/patch\(index)")
            #expect { try TreePatch.apply(patch: dir + "/patch\(index)", base: dir + "/base", into: dir + "/out\(index)") } throws: {
                ($0 as? DeltaError)?.kind == kind
            }
            #expect(!FileSystem.exists(dir + "/escape"))
        }
    }

    @Test("A base file that is missing fails as the wrong base (the device then asks for the whole pack), and a tree past its size limit is refused before the file is written")
    func baseAndLimit() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("depot-tree-base-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let base: [String: [UInt8]] = ["a.bin": Self.random(40_000, seed: 7), "b.bin": Self.random(40_000, seed: 8)]
        var target = base
        target["a.bin"]![5] ^= 1
        try Self.write(base, under: dir + "/base")
        try Self.write(target, under: dir + "/target")
        try TreePatch.make(base: dir + "/base", target: dir + "/target", to: dir + "/patch")
        // b.bin purged from the installed tree: a base mismatch, not an I/O error.
        try FileManager.default.removeItem(atPath: dir + "/base/b.bin")
        #expect { try TreePatch.apply(patch: dir + "/patch", base: dir + "/base", into: dir + "/out1") } throws: {
            ($0 as? DeltaError)?.kind == .baseMismatch
        }
        // The limit: the two files declare 80,000 bytes; 79,999 allowed refuses the second before it exists.
        try Self.write(["b.bin": base["b.bin"]!], under: dir + "/base")
        #expect { try TreePatch.apply(patch: dir + "/patch", base: dir + "/base", into: dir + "/out2", limit: 79_999) } throws: {
            ($0 as? DeltaError)?.kind == .malformed
        }
        #expect(FileSystem.exists(dir + "/out2/a.bin") && !FileSystem.exists(dir + "/out2/b.bin"))
        try TreePatch.apply(patch: dir + "/patch", base: dir + "/base", into: dir + "/out3", limit: 80_000)
        #expect(try Self.read(dir + "/out3") == target)
    }

    @Test("A file delta's header is shown to the caller before anything is written: refused there, the sink never runs")
    func headerFirst() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("depot-delta-head-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileSystem.createDirectory(dir)
        var changed = Self.random(100_000, seed: 9)
        try FileSystem.writeAtomically(changed, to: dir + "/base")
        changed[10] ^= 1
        try FileSystem.writeAtomically(changed, to: dir + "/target")
        try DeltaEncoder.encode(base: dir + "/base", target: dir + "/target", to: dir + "/delta")
        struct Refused: Error {}
        var written = 0
        #expect(throws: Refused.self) {
            try DeltaDecoder.apply(patch: FileDescriptor.openForReading(dir + "/delta"), base: FileDescriptor.openForReading(dir + "/base"), accepting: { header in
                if header.targetSize == 100_000 { throw Refused() }
            }) { written += $0.count }
        }
        #expect(written == 0)
    }
}
