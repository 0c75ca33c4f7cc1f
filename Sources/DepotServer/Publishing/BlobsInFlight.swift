import Synchronization

/// The blobs that publishes are storing right now: a blob is stored a moment before it is
/// staged (whatever the machine's load), and no draft or release names it in between. Counted:
/// two uploads of the same bytes, in one app or two, store the same blob.
///
/// Every removal of a blob decides inside ``holding(_:)``: a publish that starts storing the
/// same bytes either is seen there (and the blob stays) or begins after the removal (and its
/// `put` stores the bytes again).
final class BlobsInFlight: Sendable {
    private let counts = Mutex<[String: Int]>([:])

    init() {}

    /// Marks `sha256` as being stored, until ``end(_:)``.
    func begin(_ sha256: String) { counts.withLock { $0[sha256, default: 0] += 1 } }

    func end(_ sha256: String) {
        counts.withLock { counts in
            counts[sha256, default: 1] -= 1
            if counts[sha256] == 0 { counts[sha256] = nil }
        }
    }

    /// The blobs being stored now.
    func current() -> Set<String> { counts.withLock { Set($0.keys) } }

    /// Runs `body` with the counts held: no store begins meanwhile.
    func holding<T>(_ body: ([String: Int]) throws -> T) rethrows -> T {
        try counts.withLock { try body($0) }
    }
}
