@testable import DepotCore
import Foundation
import Testing

/// The delta format: known answers for the decoder (the DocC article's worked example among
/// them), the encoder on the shapes updates take, and every malformed patch refused.
@Suite("Delta format v1")
struct DeltaTests {
    static func hex(_ text: String) -> [UInt8] { Hex.decode(text.filter { !$0.isWhitespace })! }

    /// Applies `patch` to `base` in memory.
    static func apply(_ patch: [UInt8], to base: [UInt8]) throws -> [UInt8] {
        var out: [UInt8] = []
        try DeltaDecoder.apply(patch: MemorySource(patch), base: MemorySource(base)) { out += $0 }
        return out
    }

    static func header(base: [UInt8], target: [UInt8]) -> [UInt8] {
        DeltaFormat.Header(baseSize: Int64(base.count), baseSHA256: SHA256Hasher.hash(base), targetSize: Int64(target.count), targetSHA256: SHA256Hasher.hash(target)).bytes
    }

    @Test("The worked example: base \"Hello, world!\", target \"Hello, brave new world!\" — COPY 0 7, ADD \"brave new \", COPY 7 6, END")
    func workedExample() throws {
        let base = Array("Hello, world!".utf8)
        let target = Array("Hello, brave new world!".utf8)
        // The bytes the DocC article "Delta" shows, header and all.
        let patch = Self.hex("""
            4144444c 01 00 000000000000000d
            315f5bdb76d078c43b8ac0064e4a0164612b1fce77c869345bfc94c75894edd3
            0000000000000017
            fc81a99f5a93bbd882ea888a45b2e85d00ddde7f19842385334ecba44c4609d8
            01 00 07  02 0a 6272617665206e657720  01 07 06  00
            """)
        #expect(patch.count == 86 + 19)
        #expect(Array(patch[0..<86]) == Self.header(base: base, target: target))
        #expect(try Self.apply(patch, to: base) == target)
    }

    @Test("LEB128 numbers: known encodings")
    func varints() {
        #expect(DeltaFormat.varint(0) == [0x00])
        #expect(DeltaFormat.varint(127) == [0x7f])
        #expect(DeltaFormat.varint(128) == [0x80, 0x01])
        #expect(DeltaFormat.varint(300) == [0xac, 0x02])
        #expect(DeltaFormat.varint(1 << 30) == [0x80, 0x80, 0x80, 0x80, 0x04])
    }

    @Test("Malformed patches are refused with a specific error", arguments: [
        ("01 00 07  02 0a 6272617665206e657720  01 07 06", DeltaError.Kind.truncated),         // no END
        ("01 00 07  02 0a 6272617665206e657720  01 07 06  00  00", .malformed),                 // bytes after END
        ("01 00 07  02 0a 6272617665206e657720  01 07 07  00", .malformed),                     // copy past the base
        ("01 00 00  00", .malformed),                                                           // length 0
        ("01 00 07  02 0a 6272617665206e657720  01 07 05  00", .malformed),                     // END short of the target
        ("01 00 07  02 0b 6272617665206e65772020  01 07 06  00", .malformed),                   // past the target
        ("01 00 07  02 0a 6272617665206e657721  01 07 06  00", .resultMismatch),                // one byte changed
        ("05  00", .malformed),                                                                 // unknown instruction
        ("01 80 00 07  00", .malformed),                                                        // an overlong number
        ("01 ffffffffffffffffff01 01  00", .malformed),                                         // a number of 10 bytes
        ("01 ffffffffffffffff7f 01  00", .malformed),                                           // past 2^63
    ])
    func refusals(instructions: String, kind: DeltaError.Kind) throws {
        let base = Array("Hello, world!".utf8)
        let target = Array("Hello, brave new world!".utf8)
        let patch = Self.header(base: base, target: target) + Self.hex(instructions)
        #expect { try Self.apply(patch, to: base) } throws: { ($0 as? DeltaError)?.kind == kind }
    }

    @Test("Not a delta, another version, a base of another size")
    func headers() throws {
        let base = Array("Hello, world!".utf8)
        let patch = Self.header(base: base, target: base) + Self.hex("01 00 0d 00")
        #expect(try Self.apply(patch, to: base) == base)
        #expect { try Self.apply(Array(patch[0..<40]), to: base) } throws: { ($0 as? DeltaError)?.kind == .notADelta }
        var other = patch
        other[4] = 2
        #expect { try Self.apply(other, to: base) } throws: { ($0 as? DeltaError)?.kind == .unsupportedVersion }
        #expect { try Self.apply(patch, to: base + [0]) } throws: { ($0 as? DeltaError)?.kind == .baseMismatch }
    }

    /// Seeded pseudo-random bytes.
    static func random(_ count: Int, seed: UInt64) -> [UInt8] {
        var state = seed
        var out = [UInt8](repeating: 0, count: count)
        for i in 0..<count {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            out[i] = UInt8(truncatingIfNeeded: state >> 33)
        }
        return out
    }

    /// Encodes through files, checks the round trip, returns the patch size.
    static func roundTrip(_ base: [UInt8], _ target: [UInt8]) throws -> (size: Int64, summary: DeltaEncoder.Summary) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("depot-delta-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileSystem.writeAtomically(base, to: dir + "/base")
        try FileSystem.writeAtomically(target, to: dir + "/target")
        let summary = try DeltaEncoder.encode(base: dir + "/base", target: dir + "/target", to: dir + "/patch")
        let patch = try FileSystem.readFile(dir + "/patch", limit: 1 << 30)
        #expect(Int64(patch.count) == summary.size)
        #expect(try apply(patch, to: base) == target, "the round trip gives the target")
        return (summary.size, summary)
    }

    @Test("The shapes updates take (4 MiB of random bytes): changed regions, an insertion, a deletion, an append, everything changed, identical, empty either side")
    func shapes() throws {
        let size = 4 << 20
        let base = Self.random(size, seed: 1)
        var changed = base
        for region in 0..<10 { for k in 0..<(16 << 10) { changed[region * 400_000 + k] ^= 0x5a } }
        let changedCost = try Self.roundTrip(base, changed).size
        #expect(changedCost <= 10 * (16 << 10) + 10 * 1024, "10 changed regions of 16 KiB: \(changedCost)")

        let inserted = Array(base[0..<(size / 10)]) + Self.random(256 << 10, seed: 2) + Array(base[(size / 10)...])
        let insertCost = try Self.roundTrip(base, inserted).size
        #expect(insertCost <= (256 << 10) + 2048, "256 KiB inserted at 10%: \(insertCost)")

        let deleted = Array(base[0..<(size / 2)]) + Array(base[(size / 2 + (256 << 10))...])
        let deleteCost = try Self.roundTrip(base, deleted).size
        #expect(deleteCost <= 2048, "256 KiB deleted at 50%: \(deleteCost)")

        let appended = base + Self.random(1 << 20, seed: 3)
        let appendCost = try Self.roundTrip(base, appended).size
        #expect(appendCost <= (1 << 20) + 2048, "1 MiB appended: \(appendCost)")

        let other = Self.random(size, seed: 4)
        let otherCost = try Self.roundTrip(base, other).size
        #expect(otherCost <= Int64(Double(size) * 1.001) + 1024, "everything changed: \(otherCost)")

        let moved = Array(base[(size / 2)...]) + Array(base[0..<(size / 2)])
        let movedCost = try Self.roundTrip(base, moved).size
        #expect(movedCost <= 2048, "halves swapped: \(movedCost)")

        #expect(try Self.roundTrip(base, base).summary.copies == 1)
        #expect(try Self.roundTrip([], base).summary.addedBytes == Int64(size))
        #expect(try Self.roundTrip(base, []).size == Int64(DeltaFormat.headerSize + 1))
        #expect(try Self.roundTrip([], []).size == Int64(DeltaFormat.headerSize + 1))
    }

    @Test("A match across the encoder's 16 MiB segments (the next read ahead on a second thread) continues as one copy")
    func acrossSegments() throws {
        let base = Self.random(40 << 20, seed: 5)
        var target = base
        target[100] ^= 1
        let result = try Self.roundTrip(base, target)
        #expect(result.summary.copies == 2 && result.size < 200, "\(result.summary)")
    }

    @Test("A large base with known digests (indexed in two halves on two threads): a change across the halves' boundary, and one in each half, cost about their bytes")
    func twoHalves() throws {
        let size = 72 << 20
        let base = Self.random(size, seed: 12)
        var target = base
        for at in [size / 2 - 3000, size / 4, size * 3 / 4] { for k in 0..<6000 { target[at + k] ^= 0x3c } }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("depot-delta-halves-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileSystem.writeAtomically(base, to: dir + "/base")
        try FileSystem.writeAtomically(target, to: dir + "/target")
        let summary = try DeltaEncoder.encode(
            base: dir + "/base", target: dir + "/target", to: dir + "/patch", baseSHA256: SHA256Hasher.hash(base), targetSHA256: SHA256Hasher.hash(target)
        )
        #expect(summary.size < 3 * 6000 + 2048, "\(summary)")
        #expect(try Self.apply(FileSystem.readFile(dir + "/patch", limit: 1 << 30), to: base) == target)
    }

    @Test("The gear hash in four lanes finds the same anchors, in the same order, as one byte after another", arguments: [0, 1, 1023, 1024, 4096 + 3, 1 << 20])
    func gearLanes(count: Int) {
        let bytes = Self.random(count, seed: UInt64(count))
        let (shift, carried): (UInt64, UInt64) = (64 - 6, 0x1234_5678_9abc_def0)
        var expected: [(UInt64, Int)] = []
        var h = carried
        for (i, byte) in bytes.enumerated() {
            h = (h << 1) &+ Gear.table[Int(byte)]
            if h >> shift == 0 { expected.append((h, i)) }
        }
        var found: [(UInt64, Int)] = []
        let end = bytes.withUnsafeBufferPointer { gearAnchors($0, count: count, carrying: carried, shift: shift) { found.append(($0, $1)) } }
        #expect(end == h)
        #expect(found.map(\.0) == expected.map(\.0) && found.map(\.1) == expected.map(\.1))
        #expect(count < 4096 || expected.count > 10)  // the lanes did meet anchors
    }

    @Test("Encoder known answer: a fixed 1 MiB pair gives this exact patch")
    func encoderKnownAnswer() throws {
        let base = Self.random(1 << 20, seed: 7)
        let target = Array(base[0..<300_000]) + Array("inserted".utf8) + Array(base[300_000..<900_000]) + Array(base[950_000...])
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("depot-delta-kat").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileSystem.writeAtomically(base, to: dir + "/base")
        try FileSystem.writeAtomically(target, to: dir + "/target")
        try DeltaEncoder.encode(base: dir + "/base", target: dir + "/target", to: dir + "/patch")
        let patch = try FileSystem.readFile(dir + "/patch")
        let instructions = Array(patch[DeltaFormat.headerSize...])
        print("DeltaTests KAT: \(Hex.encode(instructions))")
        // Derived by hand: COPY 0 300000, ADD 8 "inserted", COPY 300000 600000, COPY 950000 98576, END.
        #expect(Hex.encode(instructions) == "0100e0a712" + "0208696e736572746564" + "01e0a712c0cf24" + "01f0fd39908206" + "00")
    }
}
