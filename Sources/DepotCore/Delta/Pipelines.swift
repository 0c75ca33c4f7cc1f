import Dispatch

/// SHA-256 on a second thread while the caller writes: the decoder fills a slot, hands it to the
/// pipeline and writes it out while the slot is hashed behind it, so applying a delta costs the
/// larger of hashing and copying, not their sum (hashing alone is ~0.6 s per GiB on one core with
/// SHA instructions). Three slots of 1 MiB; the caller waits for a slot only when hashing is
/// three slots behind. Slots are hashed in the order they were handed over, which is the order
/// they come free again.
///
/// One thread uses a pipeline (the decoder's). The hashing queue's blocks hold the memory and the
/// hasher (``Shared``), never the pipeline, so the pipeline is freed on its owner's thread and
/// the memory when the last block is done.
final class HashPipeline {
    static let slotCount = 3
    let slotSize: Int
    private let shared: Shared
    private let queue = DispatchQueue(label: "assetdepot.delta.hash")
    private var next = 0

    private final class Shared: @unchecked Sendable {
        // @unchecked: the caller writes a slot only between `free.wait()` and handing it over;
        // the queue reads that slot and feeds the hasher, which only the queue touches.
        let memory: UnsafeMutableRawBufferPointer
        let hasher = SHA256Hasher()
        // Created at 0 and raised to slotCount: libdispatch traps when a semaphore is freed below
        // its initial value, which a pipeline abandoned by an error would be.
        let free = DispatchSemaphore(value: 0)
        init(bytes: Int) { memory = .allocate(byteCount: bytes, alignment: 64) }
        deinit { memory.deallocate() }
    }

    init(slotSize: Int) {
        self.slotSize = max(1, slotSize)
        shared = Shared(bytes: self.slotSize * Self.slotCount)
        for _ in 0..<Self.slotCount { shared.free.signal() }
    }

    /// The next free slot (waits while all are being hashed): fill it, then ``hash(slot:count:)``.
    func slot() -> (index: Int, buffer: UnsafeMutableRawBufferPointer) {
        shared.free.wait()
        let index = next
        next = (next + 1) % Self.slotCount
        return (index, UnsafeMutableRawBufferPointer(rebasing: shared.memory[(index * slotSize)..<((index + 1) * slotSize)]))
    }

    /// Hashes the first `count` bytes of the slot behind the caller; the slot is free again after.
    func hash(slot index: Int, count: Int) {
        let (shared, start) = (shared, index * slotSize)
        queue.async {
            shared.hasher.update(UnsafeRawBufferPointer(rebasing: shared.memory[start..<(start + count)]))
            shared.free.signal()
        }
    }

    /// The digest of everything handed over, once it has all been hashed.
    func finalize() -> [UInt8] {
        let shared = shared
        return queue.sync { shared.hasher.finalize() }
    }
}

/// A file read front to back in segments, the next one read on a second thread while the caller
/// works on the current one: the encoder matches a segment of the target (reading the base at
/// random) while the next segment comes in. Two segments in memory.
final class ReadAhead {
    private let size: Int64
    private let segment: Int
    private let shared: Shared
    private let queue = DispatchQueue(label: "assetdepot.delta.read-ahead")
    private var pending = false
    private var wanted = 0  // the pending read's length
    private var current = 0
    private var position: Int64 = 0  // where the next read starts

    private final class Shared: @unchecked Sendable {
        // @unchecked: the queue reads into a buffer only after the caller asked for the next
        // one, and the caller looks at `result` only after `done` was signalled.
        let file: FileDescriptor
        let memory: UnsafeMutableRawBufferPointer
        let done = DispatchSemaphore(value: 0)
        var result: Result<Int, SystemError> = .success(0)
        init(file: FileDescriptor, bytes: Int) { (self.file, memory) = (file, .allocate(byteCount: bytes, alignment: 64)) }
        deinit { memory.deallocate() }
    }

    init(_ file: FileDescriptor, size: Int64, segment: Int) {
        (self.size, self.segment) = (size, max(1, segment))
        shared = Shared(file: file, bytes: self.segment * 2)
        start()
    }

    private func buffer(_ index: Int) -> UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(rebasing: shared.memory[(index * segment)..<((index + 1) * segment)])
    }

    private func start() {
        let want = Int(min(Int64(segment), size - position))
        guard want > 0 else { return }
        (pending, wanted) = (true, want)
        position += Int64(want)
        let (shared, from) = (shared, current * segment)
        queue.async {
            shared.result = Result { () throws(SystemError) -> Int in
                try shared.file.readFully(into: UnsafeMutableRawBufferPointer(rebasing: shared.memory[from..<(from + want)]))
            }
            shared.done.signal()
        }
    }

    /// The next segment (valid until the next call), nil after the last; throws when the file
    /// ends before `size` bytes (it changed while it was read).
    func next() throws -> UnsafeRawBufferPointer? {
        guard pending else { return nil }
        shared.done.wait()
        pending = false
        let got = try shared.result.get()
        let filled = buffer(current)
        guard got == wanted else { throw DeltaError.malformed("the file changed while it was read") }
        current = 1 - current
        start()
        return UnsafeRawBufferPointer(rebasing: filled[0..<got])
    }
}
