import DepotCore
import Foundation

/// A download read while it is still being written, so that a pack is verified and decrypted
/// on one core as it arrives on the other instead of after the last byte.
///
/// The ``Downloader`` tells it how far the partial file is complete (``advance(to:)``) and when
/// an attempt starts over from an earlier offset (``settle(at:)``: a server that ignored the
/// range, a changed ETag); the installer reads it as a ``RandomAccessSource`` whose reads wait
/// for their bytes. A read in a pass that the file has since been rewound under fails with
/// ``Interruption/rewound`` and the installer starts another pass; once the download has
/// failed for good (``abandon()``) every read fails with ``Interruption/abandoned``.
final class DownloadFollower: RandomAccessSource, @unchecked Sendable {
    // @unchecked: the counters are guarded by `condition`; the descriptor is only read with pread.

    /// Why a read did not return bytes.
    enum Interruption: Error {
        /// The partial file was cut back below what this pass already read.
        case rewound
        /// The download failed: no more bytes are coming.
        case abandoned
    }

    /// The size the manifest states.
    let total: Int64
    private let file: FileDescriptor
    private let condition = NSCondition()
    private var available: Int64 = 0
    private var generation = 0
    private var passGeneration = 0
    private var abandoned = false
    private var readFailedAbandoned = false

    /// Follows the partial file at `path` (created if it is not there yet) of a download of `total` bytes.
    init(path: String, total: Int64) throws {
        self.total = total
        file = try FileDescriptor(path: path, flags: O_RDONLY | O_CREAT, mode: 0o644)
    }

    /// A token for one pass over the file, for ``rewound(since:)``.
    struct Pass { fileprivate var generation: Int }

    /// Starts a pass over the file from its beginning.
    func beginPass() -> Pass {
        condition.lock()
        defer { condition.unlock() }
        passGeneration = generation
        return Pass(generation: generation)
    }

    /// Whether the file was cut back since `pass` began (so its reads may have mixed attempts).
    func rewound(since pass: Pass) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        return generation != pass.generation
    }

    /// The downloader's attempt starts with the file complete up to `offset`.
    func settle(at offset: Int64) {
        condition.lock()
        if offset < available { generation += 1 }
        available = offset
        condition.broadcast()
        condition.unlock()
    }

    /// The file is complete up to `offset`.
    func advance(to offset: Int64) {
        condition.lock()
        if offset > available { available = offset }
        condition.broadcast()
        condition.unlock()
    }

    /// No more bytes are coming; waiting reads fail.
    func abandon() {
        condition.lock()
        abandoned = true
        condition.broadcast()
        condition.unlock()
    }

    /// Whether a read failed because the download was abandoned (rather than the reader failing
    /// on bytes it had: a tampered segment, a full disk).
    var starved: Bool {
        condition.lock()
        defer { condition.unlock() }
        return readFailedAbandoned
    }

    func size() -> Int64 { total }

    /// Waits until the range is on disk (or the download ends without it), then reads it.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        let end = min(offset + Int64(buffer.count), total)
        guard end > offset else { return 0 }
        condition.lock()
        let pass = passGeneration
        while available < end && !abandoned && generation == pass { condition.wait() }
        let ready = available >= end && generation == pass
        let wasAbandoned = abandoned && !ready
        if wasAbandoned { readFailedAbandoned = true }
        condition.unlock()
        guard ready else { throw wasAbandoned ? Interruption.abandoned : Interruption.rewound }
        return try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<Int(end - offset)]), at: offset)
    }
}
