import DepotCore
import Foundation

/// Where blobs live: immutable content (encrypted packs) named by the SHA-256 of its bytes.
/// Everything that reads, writes, lists or deletes blobs goes through this protocol, so that
/// another store (object storage) needs no change to the handlers, the publisher or the
/// garbage collector.
///
/// The contract every implementation keeps:
/// - **Names**: 64 lower-case hex digits. Any other name is absent: `open` gives nil,
///   `contains` false, `remove` does nothing.
/// - **put is atomic and durable**: the blob appears under its name complete or not at all,
///   and once `put` returns it survives a crash or a power cut. The bytes come from a
///   temporary file that the caller wrote and verified (its SHA-256 is the name); on success
///   the store has taken it (moved or deleted it), on failure the caller removes it. Putting
///   a name that exists stores the same bytes again (content addressing makes it idempotent).
/// - **open** gives a descriptor and the length, for `sendfile`. A reader that opened a blob
///   keeps reading the whole of it even if the blob is removed meanwhile.
/// - **enumerate** lists every blob with its size and the time it was stored (the garbage
///   collector's grace period counts from that time).
/// - **remove** is immediate and idempotent; a blob that is absent is not an error.
///
/// The invariant its callers keep: **no blob is removed while anything names it.** The store is
/// shared by every app and content-addressed, so the same bytes uploaded to two apps (a managed
/// app's archive is stored as uploaded) are one blob. A removal is decided and done under the
/// publish lock with the in-flight counts held (``BlobsInFlight``), and only if no release file
/// of any app (visible or not), no draft of any app and no upload storing the same bytes names
/// it; the garbage collector keeps besides every release within the retention. A refused
/// publish therefore removes only what nothing else needs.
protocol BlobStore: Sendable {
    /// Stores the verified temporary file at `path` as blob `sha256`, durably.
    func put(temporaryFile path: String, sha256: String) throws
    /// Opens a blob for reading, or nil if there is none.
    func open(_ sha256: String) throws -> StoredBlob?
    /// Whether a blob exists (false also when the store cannot say).
    func contains(_ sha256: String) -> Bool
    /// Whether a blob is known to be absent (false when the store cannot say).
    func isMissing(_ sha256: String) -> Bool
    /// Every blob.
    func enumerate() -> [BlobInfo]
    /// Removes a blob.
    func remove(_ sha256: String)
}

/// An open blob.
struct StoredBlob {
    /// Open for reading; its owner passes it on (to a response) or closes it.
    let file: FileDescriptor
    let size: Int64
    let modified: Date
}

/// A blob as listed.
struct BlobInfo: Sendable, Hashable {
    let sha256: String
    let size: Int64
    /// When it was stored.
    let modified: Date
}

extension BlobStore {
    func isMissing(_ sha256: String) -> Bool { !contains(sha256) }
}
