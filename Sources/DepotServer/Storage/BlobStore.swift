import DepotCore
import Foundation

/// Encrypted packs, content-addressed: `blobs/ab/abcdef…`, named by the container's SHA-256.
///
/// A blob appears under its name only once it is complete and durable (written in
/// `uploads/`, fsynced, renamed, folder fsynced), so a reader never sees a partial one.
public struct BlobStore: Sendable {
    let folder: DataFolder

    public init(folder: DataFolder) { self.folder = folder }

    /// A new file in `uploads/` for a blob being written.
    func newUpload() throws -> (path: String, file: FileDescriptor) {
        let path = folder.uploads + "/" + Hex.encode(SecureRandom.bytes(12)) + ".upload"
        return (path, try FileDescriptor(path: path, flags: O_WRONLY | O_CREAT | O_EXCL, mode: 0o644))
    }

    /// Makes a finished upload durable and moves it to its content address.
    func commit(upload path: String, file: FileDescriptor, sha256: String) throws {
        try file.sync()
        try file.close()
        let target = folder.blob(sha256)
        try FileSystem.createDirectory(FileSystem.directory(of: target))
        try FileSystem.durableRename(path, to: target)
    }

    /// Opens a blob for reading, or nil if there is none.
    func open(_ sha256: String) -> FileDescriptor? {
        guard Hex.isSHA256(sha256) else { return nil }
        return try? FileDescriptor.openForReading(folder.blob(sha256))
    }

    /// Whether a blob exists.
    public func contains(_ sha256: String) -> Bool { Hex.isSHA256(sha256) && FileSystem.exists(folder.blob(sha256)) }

    /// Removes a blob (used when an upload turned out to duplicate a live pack).
    func remove(_ sha256: String) { FileSystem.remove(folder.blob(sha256)) }
}
