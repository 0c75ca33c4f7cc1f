import DepotCore
import Foundation

/// The SHA-256 of a file, computed on a thread of its own while the caller does something else
/// with the file (sends it): ``value()`` waits for it.
final class BackgroundFileDigest: Sendable {
    private let result = Locked<Result<String, SystemError>?>(nil)
    private let finished = DispatchSemaphore(value: 0)

    init(path: String) {
        Thread.detachNewThread { [self] in
            let digest = Result { () throws(SystemError) in try SHA256Hasher.hexDigest(ofFile: path) }
            result.withLock { $0 = digest }
            finished.signal()
        }
    }

    /// Lower-case hex, once the whole file is read.
    func value() throws(SystemError) -> String {
        finished.wait()
        finished.signal()
        // Set before the signal.
        return try result.withLock { $0! }.get()
    }
}
