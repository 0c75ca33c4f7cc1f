/// Applies a delta (``DeltaFormat``): reads the patch once from start to end, reads the base at
/// random, hands the result to a sink in order, in pieces of at most 1 MiB — memory stays at a
/// few MiB whatever the sizes. Every offset, length and total is checked before it is used, and
/// the result's SHA-256 must be the header's: the caller keeps what the sink received only if
/// ``apply(patch:base:accepting:into:)`` returns. The result is hashed on a second thread while the sink
/// writes it (`HashPipeline`).
public enum DeltaDecoder {
    static let chunk = 1 << 20

    /// Applies `patch` to `base`, giving the result to `sink`; returns the patch's header.
    /// `accepting` sees the header before anything is read from the base or given to the sink,
    /// and refuses it by throwing (a caller that knows the target's size and SHA-256 checks them
    /// there, before a byte is written).
    @discardableResult
    public static func apply(
        patch: some RandomAccessSource, base: some RandomAccessSource, accepting: (DeltaFormat.Header) throws -> Void = { _ in },
        into sink: (UnsafeRawBufferPointer) throws -> Void
    ) throws -> DeltaFormat.Header {
        var reader = try PatchReader(patch)
        let header = try DeltaFormat.Header(parsing: try reader.bytes(DeltaFormat.headerSize))
        try accepting(header)
        let baseSize = try base.size()
        guard baseSize == header.baseSize else { throw DeltaError.baseMismatch("the base has \(baseSize) bytes, the delta expects \(header.baseSize)") }
        let pipeline = HashPipeline(slotSize: chunk)
        var produced: Int64 = 0
        /// Fills a slot with up to `length` bytes from `fill`, hashes it behind the sink's write.
        func emit(upTo length: Int64, _ fill: (UnsafeMutableRawBufferPointer) throws -> Int) throws -> Int {
            let (index, slot) = pipeline.slot()
            let got = try fill(UnsafeMutableRawBufferPointer(rebasing: slot[0..<Int(min(Int64(slot.count), length))]))
            pipeline.hash(slot: index, count: got)
            try sink(UnsafeRawBufferPointer(rebasing: slot[0..<got]))
            return got
        }
        func room(_ length: UInt64) throws(DeltaError) -> Int64 {
            guard length > 0 else { throw .malformed("an instruction of length 0 at output offset \(produced)") }
            guard length <= UInt64(header.targetSize - produced) else { throw .malformed("an instruction past the target's \(header.targetSize) bytes") }
            return Int64(length)
        }
        while true {
            guard let opcode = try reader.byte() else { throw DeltaError.truncated }
            switch DeltaFormat.Opcode(rawValue: opcode) {
            case .end:
                guard produced == header.targetSize else { throw DeltaError.malformed("END after \(produced) of \(header.targetSize) bytes") }
                guard reader.atEnd else { throw DeltaError.malformed("bytes after END") }
                let digest = pipeline.finalize()
                guard digest == header.targetSHA256 else { throw DeltaError.resultMismatch("SHA-256 \(Hex.encode(digest)), the header says \(Hex.encode(header.targetSHA256))") }
                return header
            case .copy:
                let offset = try reader.varint()
                var length = try room(try reader.varint())
                guard offset <= UInt64(baseSize), UInt64(length) <= UInt64(baseSize) - offset else {
                    throw DeltaError.malformed("a copy of \(length) bytes from \(offset) is past the base's \(baseSize) bytes")
                }
                var at = Int64(offset)
                while length > 0 {
                    let got = try emit(upTo: length) { slot in
                        let got = try base.read(into: slot, at: at)
                        guard got == slot.count else { throw DeltaError.baseMismatch("the base ended early at \(at + Int64(got))") }
                        return got
                    }
                    (at, length, produced) = (at + Int64(got), length - Int64(got), produced + Int64(got))
                }
            case .add:
                var length = try room(try reader.varint())
                while length > 0 {
                    let got = try emit(upTo: length) { slot in try reader.copy(into: slot) }
                    (length, produced) = (length - Int64(got), produced + Int64(got))
                }
            case nil:
                throw DeltaError.malformed("unknown instruction 0x\(String(opcode, radix: 16))")
            }
        }
    }
}

/// The patch, read front to back through a 1 MiB buffer.
struct PatchReader<Source: RandomAccessSource> {
    private let source: Source
    private let size: Int64
    private var buffer: [UInt8]
    private var start = 0, end = 0
    private var consumed: Int64 = 0  // the source offset of `buffer[start]`

    init(_ source: Source) throws {
        self.source = source
        size = try source.size()
        buffer = [UInt8](repeating: 0, count: Int(min(Int64(DeltaDecoder.chunk), max(1, size))))
    }

    var atEnd: Bool { start == end && consumed == size }

    /// Makes at least one byte available; false at the end.
    private mutating func fill() throws -> Bool {
        if start < end { return true }
        let (at, source) = (consumed, self.source)
        let got = try buffer.withUnsafeMutableBytes { try source.read(into: $0, at: at) }
        (start, end) = (0, got)
        return got > 0
    }

    mutating func byte() throws -> UInt8? {
        guard try fill() else { return nil }
        defer { start += 1; consumed += 1 }
        return buffer[start]
    }

    /// Up to `max` bytes (at least one); throws at the end.
    mutating func piece(max: Int) throws -> [UInt8] {
        guard try fill() else { throw DeltaError.truncated }
        let count = min(max, end - start)
        defer { start += count; consumed += Int64(count) }
        return Array(buffer[start..<(start + count)])
    }

    /// Copies up to `target.count` bytes (at least one) into `target`; throws at the end.
    mutating func copy(into target: UnsafeMutableRawBufferPointer) throws -> Int {
        guard try fill() else { throw DeltaError.truncated }
        let count = min(target.count, end - start)
        buffer.withUnsafeBytes { target.baseAddress!.copyMemory(from: $0.baseAddress! + start, byteCount: count) }
        (start, consumed) = (start + count, consumed + Int64(count))
        return count
    }

    mutating func bytes(_ count: Int) throws -> [UInt8] {
        var out: [UInt8] = []
        while out.count < count {
            guard try fill() else { throw DeltaError.notADelta }
            out += try piece(max: count - out.count)
        }
        return out
    }

    /// Unsigned LEB128: at most 9 bytes, below 2^63, minimal.
    mutating func varint() throws -> UInt64 {
        var value: UInt64 = 0
        for index in 0..<9 {
            guard let byte = try byte() else { throw DeltaError.truncated }
            value |= UInt64(byte & 0x7f) << (7 * UInt64(index))
            if byte & 0x80 == 0 {
                guard byte != 0 || index == 0 else { throw DeltaError.malformed("a number with a needless trailing zero byte") }
                guard value <= UInt64(Int64.max) else { throw DeltaError.malformed("a number past 2^63") }
                return value
            }
        }
        throw DeltaError.malformed("a number longer than 9 bytes")
    }
}
