import Foundation
import Synchronization
import Testing

/// Runs each test (each case of a parameterized one) on threads of its own instead of Swift's
/// cooperative pool, which on this 2-core machine has two threads for the whole parallel run.
///
/// Why: a test that blocks (a process waited for, a kill loop, `Eventually.wait`) holds a pool
/// thread for as long as it blocks. Two of them at once, and every other test's `await` waits: in a
/// run at 683e23d no test finished between 170 s and 320 s, and a reporter's App Attest challenge
/// (300 s at the origin, a process of its own) expired between the reporter's two awaits.
///
/// - ``blocking``: for suites that block for minutes (crash-point enumerations, seeded walks,
///   admin pairs). At most ``BlockingSlots/width`` such cases run at once, waiting for a slot
///   without holding a thread, so they no longer take the pool and do not all load the machine at once.
/// - ``ownThreads``: for tests whose in-process side races a real clock elsewhere (a challenge's
///   life at the origin): never delayed by whatever else holds the pool.
///
/// The threads grow on demand (a job never waits behind a blocked one of the same test, so a
/// test blocking on its own child task cannot deadlock) and end with the test.
struct OwnThreads: TestTrait, SuiteTrait, TestScoping {
    let limited: Bool

    var isRecursive: Bool { true }

    func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        test.isSuite || testCase == nil ? nil : self
    }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        if limited { await BlockingSlots.shared.acquire() }
        let executor = ThreadExecutor()
        defer {
            executor.finish()
            if limited { BlockingSlots.shared.release() }
        }
        try await withTaskExecutorPreference(executor) {
            try await function()
        }
    }
}

extension Trait where Self == OwnThreads {
    /// Threads of its own, and one of ``BlockingSlots/width`` slots for heavy blocking work.
    static var blocking: Self { OwnThreads(limited: true) }
    /// Threads of its own, no slot: not delayed by tests that hold the cooperative pool.
    static var ownThreads: Self { OwnThreads(limited: false) }
}

/// How many ``OwnThreads/blocking`` cases run at once; waiting for a slot suspends, holding no thread.
final class BlockingSlots: Sendable {
    static let width = 3
    static let shared = BlockingSlots()

    private let state = Mutex<(free: Int, waiting: [CheckedContinuation<Void, Never>])>((width, []))

    func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted = state.withLock { state in
                guard state.free > 0 else {
                    state.waiting.append(continuation)
                    return false
                }
                state.free -= 1
                return true
            }
            if granted { continuation.resume() }
        }
    }

    func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiting.isEmpty else {
                state.free += 1
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.resume()  // the slot passes to the next waiter
    }
}

/// A task executor whose jobs run on its own threads: a new thread whenever every thread it has is
/// busy (blocked or running), so no job waits behind another; idle threads end at ``finish()``.
final class ThreadExecutor: TaskExecutor, @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var idle = 0
    private var finished = false

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        // A thread that was signalled but has not woken is still counted idle, and its job still
        // queued: so more jobs than idle threads means one would wait.
        let spawn = jobs.count > idle
        if !spawn { condition.signal() }
        condition.unlock()
        if spawn {
            let thread = Thread { [self] in work() }
            thread.stackSize = 8 << 20
            thread.start()
        }
    }

    private func work() {
        condition.lock()
        while true {
            while jobs.isEmpty && !finished {
                idle += 1
                condition.wait()
                idle -= 1
            }
            if jobs.isEmpty {
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
            condition.lock()
        }
    }

    /// Idle threads end; a job enqueued later (a child task outliving the body cannot, but a
    /// resumption racing the end can) gets a thread of its own. (Unstructured `Task {}`s a test
    /// starts do not inherit the preference, SE-0417: they run on the cooperative pool.)
    func finish() {
        condition.lock()
        finished = true
        condition.broadcast()
        condition.unlock()
    }
}
