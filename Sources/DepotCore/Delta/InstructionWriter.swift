/// The encoder's output side.
/// Writes instructions through a 1 MiB buffer, merging a copy that continues the last one.
struct InstructionWriter {
    private let file: FileDescriptor
    private var buffer: [UInt8] = []
    private var pending: (offset: Int64, length: Int64)?
    private(set) var written: Int64 = 0
    private(set) var copies = 0
    private(set) var copiedBytes: Int64 = 0
    private(set) var addedBytes: Int64 = 0

    init(_ file: FileDescriptor) {
        self.file = file
        buffer.reserveCapacity(1 << 20)
    }

    /// Where in the base the copy being built ends, if the last instruction is one.
    var pendingCopyEnd: Int64? { pending.map { $0.offset + $0.length } }

    mutating func extendCopy(by count: Int) { pending?.length += Int64(count) }

    mutating func copy(offset: Int64, length: Int64) throws {
        if let last = pending, last.offset + last.length == offset {
            pending = (last.offset, last.length + length)
            return
        }
        try flushCopy()
        pending = (offset, length)
    }

    mutating func add(_ bytes: UnsafeRawBufferPointer) throws {
        guard !bytes.isEmpty else { return }
        try flushCopy()
        try raw([DeltaFormat.Opcode.add.rawValue] + DeltaFormat.varint(UInt64(bytes.count)))
        addedBytes += Int64(bytes.count)
        if bytes.count >= 64 << 10 {
            try flush()
            try file.write(bytes)
            written += Int64(bytes.count)
        } else {
            try raw(Array(bytes))
        }
    }

    mutating func raw(_ bytes: [UInt8]) throws {
        buffer += bytes
        written += Int64(bytes.count)
        if buffer.count >= 1 << 20 { try flush() }
    }

    private mutating func flushCopy() throws {
        guard let copy = pending else { return }
        pending = nil
        copies += 1
        copiedBytes += copy.length
        try raw([DeltaFormat.Opcode.copy.rawValue] + DeltaFormat.varint(UInt64(copy.offset)) + DeltaFormat.varint(UInt64(copy.length)))
    }

    private mutating func flush() throws {
        guard !buffer.isEmpty else { return }
        try file.write(buffer)
        buffer.removeAll(keepingCapacity: true)
    }

    mutating func finish() throws {
        try flushCopy()
        try raw([DeltaFormat.Opcode.end.rawValue])
        try flush()
    }
}
