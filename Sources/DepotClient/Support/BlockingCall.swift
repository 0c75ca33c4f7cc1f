import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs a blocking call (a socket read, `sendfile`, `flock` with a timeout) on a thread of its
/// own, so that Swift's cooperative pool never blocks, and returns its result to async code.
enum BlockingCall {
    /// Runs `work` on a new thread; `onCancel` runs if the calling task is cancelled meanwhile
    /// (to make the blocked call return, for instance by shutting its socket down).
    static func run<T: Sendable>(onCancel: @escaping @Sendable () -> Void = {}, _ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                Thread.detachNewThread {
                    // A peer that closes early makes sendfile raise SIGPIPE, which would kill the
                    // process: blocked here, it stays pending on this thread and ends with it, and
                    // the call fails with EPIPE instead.
                    var set = sigset_t()
                    sigemptyset(&set)
                    sigaddset(&set, SIGPIPE)
                    pthread_sigmask(SIG_BLOCK, &set, nil)
                    continuation.resume(with: Result { try work() })
                }
            }
        } onCancel: {
            onCancel()
        }
    }
}
