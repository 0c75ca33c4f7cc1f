import Foundation

/// A value behind a lock, for the modules that ship in apps: `Synchronization.Mutex` needs iOS 18
/// and macOS 15, and the client's floor is iOS 16.4 / macOS 13.3 (the first releases with
/// Background Assets' essential downloads). `NSLock` is on every platform the client runs on.
public final class Locked<Value>: @unchecked Sendable {
    // @unchecked: `value` is only read or written inside `lock`.
    private let lock = NSLock()
    private var value: Value

    public init(_ value: Value) { self.value = value }

    /// Runs `body` with the value, under the lock; keep it short (no waiting inside).
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
