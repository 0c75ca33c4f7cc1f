import DepotCore
import Foundation

/// Which state locks this process may take, and how many of its threads hold or wait for each
/// (by state folder): what lets an app's background-task expiration handler make sure it holds
/// no lock in the App Group when iOS suspends it (0xdead10cc), without killing the install step
/// in the middle of a record (``StateStore/suspendLocking(waitingUpTo:)``).
final class StateLockGate: @unchecked Sendable {
    // @unchecked: `holders` and `suspended` are only read or written under `condition`.
    private let condition = NSCondition()
    private var holders: [String: Int] = [:]
    private var suspended: Set<String> = []

    static let shared = StateLockGate()

    /// Counts one more holder of `key`'s lock; false (nothing counted) while it is suspended.
    func enter(_ key: String) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !suspended.contains(key) else { return false }
        holders[key, default: 0] += 1
        return true
    }

    func leave(_ key: String) {
        condition.lock()
        holders[key, default: 1] -= 1
        if holders[key] == 0 { holders[key] = nil }
        condition.broadcast()
        condition.unlock()
    }

    func isSuspended(_ key: String) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        return suspended.contains(key)
    }

    /// Refuses new holders of `key` and waits until none is left or `timeout` passes; whether none is left.
    func suspend(_ key: String, timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        suspended.insert(key)
        while holders[key] != nil {
            if !condition.wait(until: deadline) { break }
        }
        return holders[key] == nil
    }

    func resume(_ key: String) {
        condition.lock()
        suspended.remove(key)
        condition.unlock()
    }
}
