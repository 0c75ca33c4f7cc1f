import ArgumentParser
import DepotServer
import Foundation

struct Storage: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Move blobs between the data folder and an object store.", subcommands: [Migrate.self])

    struct Migrate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Copy a data folder's blobs into an S3 bucket (stop `depot serve` first).",
            discussion: """
                Each blob is hashed, uploaded and read back like a published one; blobs already in the bucket whole are \\
                skipped, so an interrupted migration can run again. Releases, keys and tokens stay in the data folder. \\
                Then start `depot serve --storage s3` with the same options; with --remove-local the local copies go \\
                as soon as the bucket holds them.
                """
        )
        @OptionGroup var data: DataOptions
        @OptionGroup var store: ObjectStoreOptions
        @Flag(name: .customLong("remove-local"), help: "Delete each local blob once the bucket holds it.") var removeLocal = false

        func validate() throws {
            guard store.storage == "s3" else { throw ValidationError("give --storage s3 and the bucket's options (--s3-endpoint, --s3-bucket, …)") }
        }

        func run() throws {
            guard let location = try store.objectStore() else { throw CLIError("no object store given") }
            let summary = try StorageMigration.migrate(dataPath: data.data, to: location, removeLocal: removeLocal)
            print("migrated \(data.data) to bucket \(location.bucket): \(summary.copied) blobs copied (\(summary.bytes) bytes), \(summary.skipped) already there"
                + (removeLocal ? ", \(summary.removedLocally) local copies removed" : ""))
        }
    }
}
