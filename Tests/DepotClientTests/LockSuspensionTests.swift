import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// iOS terminates a suspended app that holds a file lock in a shared container (0xdead10cc). The
/// guide's expiration handler cancels the install step and calls `suspendLocking(waitingUpTo:)`
/// before it ends the background task: a record in progress finishes and releases the lock, and
/// no thread of the app takes it again until `resumeLocking()`.
@Suite("The state lock when the app's background time runs out")
struct LockSuspensionTests {
    @Test("Suspending waits for the record holding the lock (bounded), then no thread of this process takes it; resuming lets them")
    func suspendWaitsForTheHolder() throws {
        let work = TemporaryDirectory("depot-lock-suspend")
        defer { work.remove() }
        let store = try StateStore(destination: work.path + "/group", stateFolder: work.path + "/state")
        let entered = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0), finished = DispatchSemaphore(value: 0)
        let holder = Thread {
            // The install step's record: the lock held for a moment (here, until the test says).
            _ = try? store.withExclusiveControl(app: "a") { state in
                entered.signal()
                release.wait()
                state.raiseFloor(channel: "production", to: 7)
            }
            finished.signal()
        }
        holder.start()
        entered.wait()
        // Held: a bounded wait reports it still held.
        #expect(!store.suspendLocking(waitingUpTo: 0.05))
        // Released once the record is done: the wait ends with it (no lock held by this process).
        let waited = Thread {
            #expect(store.suspendLocking(waitingUpTo: 60))
            finished.signal()
        }
        waited.start()
        release.signal()
        finished.wait()
        finished.wait()
        #expect(try store.read(app: "a").floor(channel: "production") == 7, "the record in progress was saved")
        // Suspended: a new record is refused as cancelled, and the state is untouched.
        #expect { try store.withExclusiveControl(app: "a") { $0.raiseFloor(channel: "production", to: 8) } } throws: {
            ($0 as? ClientError)?.kind == .cancelled
        }
        #expect(try StateStore(destination: work.path + "/group", stateFolder: work.path + "/state").read(app: "a").floor(channel: "production") == 7)
        // Another state folder of the same process is not affected.
        let other = try StateStore(destination: work.path + "/other")
        try other.withExclusiveControl(app: "a") { $0.raiseFloor(channel: "production", to: 3) }
        // The app runs again.
        store.resumeLocking()
        try store.withExclusiveControl(app: "a") { $0.raiseFloor(channel: "production", to: 8) }
        #expect(try store.read(app: "a").floor(channel: "production") == 8)
    }
}
