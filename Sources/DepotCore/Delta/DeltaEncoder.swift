import Foundation

/// Makes a delta (``DeltaFormat``) from a base file to a target file, finding what the target
/// shares with the base wherever it moved.
///
/// How: a gear hash (`h = h << 1 + G[byte]`, so `h` depends on the last 64 bytes only) runs over
/// the base; wherever its top bits are zero — on average every `S` bytes, decided by content, so
/// the same places are picked however far the content moved — the base offset is kept in a hash
/// table. The same hash runs over the target; at each such anchor the table names base offsets
/// with the same content, the bytes are compared, and a match is extended forwards and backwards
/// byte by byte into a COPY; what no match covers becomes ADD. `S` grows with the base (256 bytes
/// for 1 GiB, 1 KiB for 4 GiB) so the table stays near 64 MiB; the target is read 16 MiB at a
/// time and the base at random in small reads: memory stays under 200 MiB whatever the sizes
/// (173 MiB measured for a 1 GiB pair, 186 MiB for 4 GiB, the binary included).
public enum DeltaEncoder {
    /// What a delta holds.
    public struct Summary: Sendable, Equatable {
        /// The delta's size in bytes.
        public var size: Int64
        public var copies: Int
        public var copiedBytes: Int64
        public var addedBytes: Int64
        public var header: DeltaFormat.Header
    }

    static let segment = 16 << 20  // two in memory: one matched, the next one being read
    /// Matches shorter than this cost more as a COPY than as ADD bytes, or are noise.
    static let minimumMatch = 32

    /// Writes the delta from the file at `base` to the file at `target` into `output` (created or
    /// replaced; the caller renames it into place). Pass the files' SHA-256 when they are known
    /// (the origin has them in the manifest) to spare the two reads that compute them.
    @discardableResult
    public static func encode(
        base basePath: String, target targetPath: String, to outputPath: String, baseSHA256: [UInt8]? = nil, targetSHA256: [UInt8]? = nil
    ) throws -> Summary {
        let base = try FileDescriptor.openForReading(basePath)
        let baseSize = try base.size()
        let (index, computedBaseDigest) = try AnchorIndex.build(base, size: baseSize, hashing: baseSHA256 == nil)
        let baseDigest = baseSHA256 ?? computedBaseDigest
        let target = try FileDescriptor.openForReading(targetPath)
        let targetSize = try target.size()
        let output = try FileDescriptor(path: outputPath, flags: O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600)
        var writer = InstructionWriter(output)
        try writer.raw([UInt8](repeating: 0, count: DeltaFormat.headerSize))
        let hasher: SHA256Hasher? = targetSHA256 == nil ? SHA256Hasher() : nil
        var matcher = Matcher(index: index, base: base, baseSize: baseSize)
        let segments = ReadAhead(target, size: targetSize, segment: Self.segment)
        while let piece = try segments.next() {
            hasher?.update(piece)
            try matcher.scan(piece, into: &writer)
        }
        try writer.finish()
        let header = DeltaFormat.Header(baseSize: baseSize, baseSHA256: baseDigest, targetSize: targetSize, targetSHA256: targetSHA256 ?? hasher!.finalize())
        try output.seek(to: 0)
        try output.write(header.bytes)
        return Summary(size: writer.written, copies: writer.copies, copiedBytes: writer.copiedBytes, addedBytes: writer.addedBytes, header: header)
    }
}

/// Base offsets by the gear hash at content-defined anchors: open addressing, a 32-bit check
/// word and a 64-bit offset per slot.
struct AnchorIndex {
    /// An anchor is where the hash's top `bits` bits are zero (one byte in 2^bits).
    let bits: Int
    private let slotShift: UInt64
    private var checks: [UInt32]
    private var offsets: [Int64]
    private(set) var count = 0

    init(baseSize: Int64) {
        // About 2 Mi anchors at most: spacing 2^bits with bits ≥ 6.
        var bits = 6
        while bits < 20 && (baseSize >> bits) > 2 << 20 { bits += 1 }
        self.bits = bits
        var capacityBits = 10
        while (1 << capacityBits) < 2 * Int(baseSize >> bits) + 1 { capacityBits += 1 }
        slotShift = UInt64(64 - capacityBits)
        checks = [UInt32](repeating: 0, count: 1 << capacityBits)
        offsets = [Int64](repeating: 0, count: 1 << capacityBits)
    }

    @inline(__always) func isAnchor(_ hash: UInt64) -> Bool { hash >> UInt64(64 - bits) == 0 }
    @inline(__always) private func slot(_ hash: UInt64) -> Int { Int(truncatingIfNeeded: (hash &* 0x9E37_79B9_7F4A_7C15) >> slotShift) }
    @inline(__always) private static func check(_ hash: UInt64) -> UInt32 { UInt32(truncatingIfNeeded: hash ^ (hash >> 29)) | 1 }

    /// Keeps the first base offset seen for a hash.
    mutating func insert(_ hash: UInt64, offset: Int64) {
        guard count * 10 < checks.count * 7 else { return }
        let mask = checks.count - 1
        let check = Self.check(hash)
        var slot = slot(hash)
        for _ in 0..<64 {
            if checks[slot] == 0 {
                (checks[slot], offsets[slot]) = (check, offset)
                count += 1
                return
            }
            if checks[slot] == check { return }
            slot = (slot + 1) & mask
        }
    }

    /// The base offset kept for `hash`, if any.
    func lookup(_ hash: UInt64) -> Int64? {
        let mask = checks.count - 1
        let check = Self.check(hash)
        var slot = slot(hash)
        for _ in 0..<64 {
            if checks[slot] == 0 { return nil }
            if checks[slot] == check { return offsets[slot] }
            slot = (slot + 1) & mask
        }
        return nil
    }

    /// Reads the base once: its anchors and (with `hashing`) its SHA-256. A large base whose
    /// digest is known is read in two halves on two threads: the gear hash starts afresh at the
    /// second half (anchors differ for its first 64 bytes only), and the anchors are inserted
    /// first half first, so the table keeps the same first occurrences.
    static func build(_ base: FileDescriptor, size: Int64, hashing: Bool = true) throws -> (AnchorIndex, [UInt8]) {
        var index = AnchorIndex(baseSize: size)
        let shift = UInt64(64 - index.bits)
        if hashing || size < 64 << 20 {
            let hasher: SHA256Hasher? = hashing ? SHA256Hasher() : nil
            try scan(base, from: 0, to: size, shift: shift, hasher: hasher) { index.insert($0, offset: $1) }
            return (index, hasher?.finalize() ?? [])
        }
        let half = size / 2
        let expected = Int(half >> index.bits) + 1024
        let found = Locked<[Int: Result<[(UInt64, Int64)], any Error>]>([:])
        DispatchQueue.concurrentPerform(iterations: 2) { part in
            var anchors: [(UInt64, Int64)] = []
            anchors.reserveCapacity(expected)
            let result = Result { () throws -> [(UInt64, Int64)] in
                try scan(base, from: part == 0 ? 0 : half, to: part == 0 ? half : size, shift: shift, hasher: nil) { anchors.append(($0, $1)) }
                return anchors
            }
            found.withLock { $0[part] = result }
        }
        for part in 0..<2 {
            for (hash, offset) in try found.withLock({ $0[part]! }).get() { index.insert(hash, offset: offset) }
        }
        return (index, [])
    }

    /// Runs the gear hash over the base's bytes [`start`, `end`), handing each anchor to `anchor`.
    private static func scan(
        _ base: FileDescriptor, from start: Int64, to end: Int64, shift: UInt64, hasher: SHA256Hasher?, anchor: (UInt64, Int64) -> Void
    ) throws {
        var buffer = [UInt8](repeating: 0, count: 8 << 20)
        var hash: UInt64 = 0
        var position = start
        while position < end {
            let want = Int(min(Int64(buffer.count), end - position))
            let at = position
            let got = try buffer.withUnsafeMutableBytes { try base.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<want]), at: at) }
            guard got > 0 else { break }
            buffer.withUnsafeBytes { raw in
                hasher?.update(UnsafeRawBufferPointer(rebasing: raw[0..<got]))
                hash = gearAnchors(raw.bindMemory(to: UInt8.self), count: got, carrying: hash, shift: shift) { anchor($0, at + Int64($1)) }
            }
            position += Int64(got)
        }
        guard position == end else { throw DeltaError.malformed("the base changed while it was read") }
    }
}

/// Scans the target a segment at a time against the base's anchors.
struct Matcher {
    let index: AnchorIndex
    let base: FileDescriptor
    let baseSize: Int64
    private var scratch = [UInt8](repeating: 0, count: 64 << 10)

    init(index: AnchorIndex, base: FileDescriptor, baseSize: Int64) {
        (self.index, self.base, self.baseSize) = (index, base, baseSize)
    }

    mutating func scan(_ target: UnsafeRawBufferPointer, into writer: inout InstructionWriter) throws {
        let bytes = target.bindMemory(to: UInt8.self)
        let count = bytes.count
        var literalStart = 0
        var i = 0
        // A copy that ran to the end of the last segment may go on into this one.
        if let end = writer.pendingCopyEnd, end < baseSize {
            let run = try forward(bytes, from: 0, base: end)
            if run > 0 {
                writer.extendCopy(by: run)
                i = run
                literalStart = run
            }
        }
        var hash: UInt64 = 0
        let shift = UInt64(64 - index.bits)
        try Gear.table.withUnsafeBufferPointer { gear in
            while i < count {
                hash = (hash << 1) &+ gear[Int(bytes[i])]
                if hash >> shift == 0, let anchor = index.lookup(hash) {
                    let ahead = try forward(bytes, from: i, base: anchor)
                    if ahead > 0 {
                        let behind = try backward(bytes, before: i, limit: i - literalStart, base: anchor)
                        if ahead + behind >= DeltaEncoder.minimumMatch {
                            try writer.add(UnsafeRawBufferPointer(rebasing: target[literalStart..<(i - behind)]))
                            try writer.copy(offset: anchor - Int64(behind), length: Int64(ahead + behind))
                            i += ahead
                            literalStart = i
                            hash = 0
                            continue
                        }
                    }
                }
                i += 1
            }
        }
        try writer.add(UnsafeRawBufferPointer(rebasing: target[literalStart..<count]))
    }

    /// How many bytes from `target[from]` equal the base's from `offset`.
    private mutating func forward(_ target: UnsafeBufferPointer<UInt8>, from: Int, base offset: Int64) throws -> Int {
        var matched = 0
        var step = 256  // small first: most candidates that fail, fail at once
        while from + matched < target.count && offset + Int64(matched) < baseSize {
            let want = min(step, target.count - from - matched, Int(min(Int64(scratch.count), baseSize - offset - Int64(matched))))
            let at = offset + Int64(matched)
            let base = self.base
            let got = try scratch.withUnsafeMutableBytes { try base.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<want]), at: at) }
            guard got > 0 else { break }
            let start = from + matched
            let same = scratch.withUnsafeBufferPointer { old in
                // Whole chunks at memcmp's speed; the first difference byte by byte.
                if memcmp(old.baseAddress!, target.baseAddress! + start, got) == 0 { return got }
                var k = 0
                while k < got && old[k] == target[start + k] { k += 1 }
                return k
            }
            matched += same
            if same < got { break }
            step = scratch.count
        }
        return matched
    }

    /// How many bytes before `target[before]` (at most `limit`) equal those before the base's `offset`.
    private mutating func backward(_ target: UnsafeBufferPointer<UInt8>, before: Int, limit: Int, base offset: Int64) throws -> Int {
        let want = min(limit, Int(min(offset, Int64(scratch.count))))
        guard want > 0 else { return 0 }
        let base = self.base
        let got = try scratch.withUnsafeMutableBytes { try base.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<want]), at: offset - Int64(want)) }
        guard got == want else { return 0 }
        return scratch.withUnsafeBufferPointer { old in
            var k = 0
            while k < want && old[want - 1 - k] == target[before - 1 - k] { k += 1 }
            return k
        }
    }
}
