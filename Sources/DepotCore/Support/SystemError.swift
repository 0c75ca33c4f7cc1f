import Foundation

/// A failed system call: its name, `errno` and the path it concerned.
public struct SystemError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The call that failed, such as `open` or `fsync`.
    public let call: String
    /// The `errno` value.
    public let errno: Int32
    /// The file concerned, when there is one.
    public let path: String?

    public init(call: String, errno: Int32, path: String? = nil) {
        self.call = call
        self.errno = errno
        self.path = path
    }

    /// Whether the failure means the disk (or a quota) is full.
    public var isNoSpace: Bool { errno == ENOSPC || errno == EDQUOT }

    public var description: String {
        let reason = System.describe(errno)
        if let path { return "\(call) \(path): \(reason)" }
        return "\(call): \(reason)"
    }
}

/// Runs a system call, retrying on `EINTR`, and throws a ``SystemError`` when it returns -1.
@discardableResult
public func systemCall<Result: BinaryInteger>(
    _ name: String, path: String? = nil, _ body: () -> Result
) throws(SystemError) -> Result {
    while true {
        let result = body()
        if result != -1 { return result }
        let code = System.errno
        if code == EINTR { continue }
        throw SystemError(call: name, errno: code, path: path)
    }
}
