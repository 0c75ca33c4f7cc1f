/// Memory of its own pages (an anonymous mapping) whose front can be given back to the system
/// while the rest is still read: what lets a large manifest be decoded pack by pack while the
/// text already decoded stops counting against an extension's memory. The one owner of the
/// mapping: unmapped in `deinit`.
final class PageBuffer {
    let memory: UnsafeMutableRawBufferPointer
    /// Bytes before this offset have been given back (a page boundary).
    private(set) var released = 0

    init?(count: Int) {
        guard let memory = System.mapMemory(count) else { return nil }
        self.memory = memory
    }

    deinit { System.unmapMemory(memory) }

    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(memory) }

    /// Gives back the whole pages before `offset`; they must not be read again.
    func release(before offset: Int) {
        let end = min(offset, memory.count) / System.pageSize * System.pageSize
        guard end > released else { return }
        System.releasePages(UnsafeMutableRawBufferPointer(rebasing: memory[released..<end]))
        released = end
    }
}
