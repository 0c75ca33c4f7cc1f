import ArgumentParser
import DepotCore
import Foundation

/// Makes and applies deltas between two files (the format the origin uses for patch downloads:
/// DepotCore's "Delta" article), for operators and the benchmark.
struct DeltaCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delta",
        abstract: "Make or apply a delta between two revisions of a file (AssetDepot's delta format v1).",
        subcommands: [Make.self, Apply.self]
    )

    struct Make: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write the delta from BASE to TARGET into OUTPUT.",
            discussion: "With two folders (unpacked zips), a tree patch: each file kept, patched or sent whole."
        )
        @Argument(help: "The old revision.") var base: String
        @Argument(help: "The new revision.") var target: String
        @Argument(help: "Where the delta goes (replaced atomically).") var output: String
        @Option(name: .customLong("base-sha256"), help: "The base's SHA-256 when known (as the origin knows it from the manifest): not computed again.") var baseSHA256: String?
        @Option(name: .customLong("target-sha256"), help: "The target's SHA-256 when known: not computed again.") var targetSHA256: String?

        func validate() throws {
            for value in [baseSHA256, targetSHA256].compactMap({ $0 }) where !Hex.isSHA256(value) {
                throw ValidationError("a SHA-256 is 64 lower-case hex digits")
            }
        }

        func run() throws {
            let temporary = FileSystem.temporaryPath(besides: output)
            do {
                let made: String
                if FileSystem.isDirectory(base) && FileSystem.isDirectory(target) {
                    let summary = try TreePatch.make(base: base, target: target, to: temporary)
                    made = "\(summary.size) bytes: \(summary.kept) files kept, \(summary.patched) patched, \(summary.sent) sent whole"
                } else {
                    let summary = try DeltaEncoder.encode(
                        base: base, target: target, to: temporary, baseSHA256: baseSHA256.flatMap(Hex.decode), targetSHA256: targetSHA256.flatMap(Hex.decode)
                    )
                    made = "\(summary.size) bytes: \(summary.copies) copies of \(summary.copiedBytes) bytes, \(summary.addedBytes) bytes added"
                }
                try FileSystem.durableRename(temporary, to: output)
                print(made)
            } catch {
                FileSystem.remove(temporary)
                throw CLIError("\(error)")
            }
        }
    }

    struct Apply: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Apply DELTA to BASE, writing the result to OUTPUT only if it is the delta's target.",
            discussion: "With a folder as BASE, DELTA is a tree patch and OUTPUT a new folder."
        )
        @Argument(help: "The old revision.") var base: String
        @Argument(help: "The delta.") var delta: String
        @Argument(help: "Where the result goes (replaced atomically, only once verified).") var output: String

        func run() throws {
            let temporary = FileSystem.temporaryPath(besides: output)
            if FileSystem.isDirectory(base) {
                do {
                    try TreePatch.apply(patch: delta, base: base, into: temporary)
                    guard !FileSystem.exists(output) else { throw CLIError("\(output) exists") }
                    try FileSystem.durableRename(temporary, to: output)
                    print("\(output): the new tree")
                } catch {
                    try? FileManager.default.removeItem(atPath: temporary)
                    throw CLIError("\(error)")
                }
                return
            }
            do {
                let file = try FileDescriptor(path: temporary, flags: O_WRONLY | O_CREAT | O_TRUNC, mode: 0o644)
                var behind = WriteBehind()  // the disk writes while the rest is decoded: the final fsync has little left
                let header = try DeltaDecoder.apply(patch: FileDescriptor.openForReading(delta), base: FileDescriptor.openForReading(base)) {
                    try file.write($0)
                    behind.wrote($0.count, to: file)
                }
                try file.sync()
                try FileSystem.durableRename(temporary, to: output)
                print("\(header.targetSize) bytes, SHA-256 \(Hex.encode(header.targetSHA256))")
            } catch {
                FileSystem.remove(temporary)
                throw CLIError("\(error)")
            }
        }
    }
}
