import Foundation

/// SHA-256 of a stream, computed on a thread of its own: the caller hands it each block and goes
/// on with other work on the same bytes (decrypting them) while the other core hashes.
///
/// Protocol: ``submit(_:)`` a block the caller will not change until the next ``submit(_:)`` or
/// ``finalize()`` returns (each waits for the previous block); ``finalize()`` ends the thread.
final class BackgroundHasher: @unchecked Sendable {
    // @unchecked: owns a digest context (an OpenSSL or CryptoKit state) and a borrowed pointer;
    // the semaphores hand both back and forth, so one thread at a time touches them.
    private let hasher = SHA256Hasher()
    private var block: UnsafeRawBufferPointer?
    private var stopping = false
    private let ready = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)
    private var busy = false

    /// Starts the thread; `prefix` is hashed first (the container's header).
    init(prefix: [UInt8]) {
        hasher.update(prefix)
        Thread.detachNewThread { [self] in
            while true {
                ready.wait()
                if stopping { break }
                if let block { hasher.update(block) }
                done.signal()
            }
            done.signal()
        }
    }

    /// Hashes `bytes` next, on the other thread.
    func submit(_ bytes: UnsafeRawBufferPointer) {
        if busy { done.wait() }
        block = bytes
        busy = true
        ready.signal()
    }

    /// Waits for the last block and returns the digest; the thread ends.
    func finalize() -> [UInt8] {
        stop()
        return hasher.finalize()
    }

    /// Ends the thread without a digest (an error on the caller's side).
    func stop() {
        guard !stopping else { return }
        if busy { done.wait() }
        busy = false
        stopping = true
        ready.signal()
        done.wait()
    }

    deinit { stop() }
}
