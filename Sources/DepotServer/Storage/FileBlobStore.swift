import DepotCore
import Foundation

/// The ``BlobStore`` of a data folder: `blobs/ab/abcdef…`. A blob is written in `uploads/`
/// (same file system), fsynced, renamed to its name and its folder fsynced, so a reader never
/// sees a partial one and a stored one survives a power cut.
struct FileBlobStore: BlobStore {
    let folder: DataFolder
    /// Told the name of each blob stored or removed, after the change (the answers kept of it go).
    var changed: (@Sendable (String) -> Void)?

    init(folder: DataFolder, changed: (@Sendable (String) -> Void)? = nil) {
        self.folder = folder
        self.changed = changed
    }

    func put(temporaryFile path: String, sha256: String) throws {
        guard Hex.isSHA256(sha256) else { throw DepotError(.failure, "storage_error", "not a blob name: \(sha256)") }
        let file = try FileDescriptor(path: path, flags: O_RDONLY)
        // The blob's time is when it was stored (the collector's grace counts from it), not when
        // its bytes were last written: a resumable upload's container can be minutes older.
        try file.touch()
        try file.sync()
        try file.close()
        let target = folder.blob(sha256)
        try FileSystem.createDirectory(FileSystem.directory(of: target))
        // Told even when the folder's fsync fails: the rename may have happened.
        defer { changed?(sha256) }
        try FileSystem.durableRename(path, to: target)
    }

    func open(_ sha256: String) throws -> StoredBlob? {
        guard Hex.isSHA256(sha256), let file = try? FileDescriptor.openForReading(folder.blob(sha256)) else { return nil }
        let (size, modified) = try file.sizeAndModification()
        return StoredBlob(file: file, size: size, modified: modified)
    }

    func contains(_ sha256: String) -> Bool { Hex.isSHA256(sha256) && FileSystem.exists(folder.blob(sha256)) }

    func enumerate() -> [BlobInfo] {
        var out: [BlobInfo] = []
        for prefix in FileSystem.contents(of: folder.blobs) {
            for name in FileSystem.contents(of: folder.blobs + "/" + prefix) where Hex.isSHA256(name) {
                guard let file = try? FileDescriptor.openForReading(folder.blob(name)),
                      let (size, modified) = try? file.sizeAndModification() else { continue }
                out.append(BlobInfo(sha256: name, size: size, modified: modified))
            }
        }
        return out
    }

    func remove(_ sha256: String) {
        guard Hex.isSHA256(sha256) else { return }
        FileSystem.remove(folder.blob(sha256))
        changed?(sha256)
    }
}
