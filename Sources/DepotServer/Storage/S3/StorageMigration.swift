import DepotCore
import Foundation

/// Moves a data folder's blobs into an S3 bucket (`depot storage migrate`), with the folder
/// locked (no `depot serve` on it meanwhile). Each blob is uploaded and checked like any other
/// (`S3BlobStore`); one already in the bucket whole is skipped, so a migration that was cut
/// short can run again. Releases, keys and tokens stay in the data folder.
public enum StorageMigration {
    public struct Summary: Sendable {
        public var copied = 0
        public var skipped = 0
        public var bytes: Int64 = 0
        public var removedLocally = 0
    }

    /// Copies every blob of the data folder at `dataPath` to `location`; with `removeLocal`, a
    /// blob's local file is deleted once the bucket holds it whole. `progress` hears of each blob.
    public static func migrate(
        dataPath: String, to location: S3Location, removeLocal: Bool, progress: (String, Int64) -> Void = { _, _ in }
    ) throws -> Summary {
        let folder = DataFolder(dataPath)
        guard FileSystem.isDirectory(folder.blobs) else { throw DepotError.notFound("a data folder at \(dataPath)") }
        let lock = try folder.lockExclusively()
        defer { try? lock.close() }
        let local = FileBlobStore(folder: folder)
        let remote = S3BlobStore(client: try S3Client(location), spool: folder.uploads)
        var summary = Summary()
        for blob in local.enumerate().sorted(by: { $0.sha256 < $1.sha256 }) {
            if try remote.storedSize(blob.sha256) == blob.size {
                summary.skipped += 1
            } else {
                // The name is checked on the way: a damaged local file is not copied.
                guard try SHA256Hasher.hexDigest(ofFile: folder.blob(blob.sha256)) == blob.sha256 else {
                    throw DepotError(.failure, "blob_damaged", "the local blob \(blob.sha256) does not hash to its name; nothing more was copied")
                }
                try remote.store(file: folder.blob(blob.sha256), sha256: blob.sha256)
                summary.copied += 1
                summary.bytes += blob.size
            }
            progress(blob.sha256, blob.size)
            if removeLocal {
                local.remove(blob.sha256)
                summary.removedLocally += 1
            }
        }
        return summary
    }
}
