import Foundation

/// Runs a blocking call (a socket read, `sendfile`, `flock` with a timeout) on a thread of its
/// own, so that Swift's cooperative pool never blocks, and returns its result to async code.
package enum BlockingCall {
    /// Runs `work` on a new thread; `onCancel` runs if the calling task is cancelled meanwhile
    /// (to make the blocked call return, for instance by shutting its socket down).
    package static func run<T: Sendable>(onCancel: @escaping @Sendable () -> Void = {}, _ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                Thread.detachNewThread {
                    #if os(Linux)
                    Sockets.blockSIGPIPEOnThisThread()
                    #endif
                    continuation.resume(with: Result { try work() })
                }
            }
        } onCancel: {
            onCancel()
        }
    }
}
