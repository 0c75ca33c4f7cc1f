import ArgumentParser
import DepotCore
import DepotServer
import Foundation

@main
struct Depot: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "depot",
        abstract: "AssetDepot: a self-hosted origin for encrypted app asset packs, and its client.",
        discussion: """
            Server-side admin commands (apps, tokens, keys) work on the data folder directly;
            publish and sync talk HTTP. A failing command prints one line to stderr and exits non-zero.
            """,
        version: AssetDepotVersion.current,
        subcommands: [Serve.self, Init.self, Apps.self, Tokens.self, Keys.self, Root.self, Publish.self, Unstage.self, Release.self, Releases.self, Rollback.self, Channels.self, RolloutCommand.self, Fleet.self, Attest.self, Plist.self, GC.self, Backup.self, Restore.self, Sync.self, ExtensionCommand.self, DeltaCommand.self, Fetch.self, Inspect.self, Storage.self, VerifyEdge.self]
    )

    /// Runs the command; a failure is one line on stderr (a usage error points at `depot help`),
    /// as docs/Publishing.md promises ("The command line"), and a non-zero exit.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if let path = DataFolderOwner.dataPath(of: command) {
                // As the folder's owner, and only on a folder of a format this build reads.
                // (`backup` only reads it and writes elsewhere; `restore` gives its copy to the owner.)
                if !(command is Backup || command is Restore) { try DataFolderOwner.adopt(path) }
                // A restore from a backup reads the backup (checked there) and only moves the
                // folder at --data aside: a rollback after an upgrade that changed the format.
                if (command as? Restore)?.backup == nil { try DataFolder(path).checkFormat(record: false) }
            }
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch let exit as ExitCode {
            // The command has said what failed (a report, a list of problems).
            Foundation.exit(exit.rawValue)
        } catch {
            let code = exitCode(for: error)
            let message = fullMessage(for: error)
            guard code != .success else {
                print(message)
                Foundation.exit(code.rawValue)
            }
            var line = message.split(separator: "\n").first.map(String.init) ?? "\(error)"
            if !line.hasPrefix("Error: ") { line = "Error: " + line }
            if message.contains("Usage:") {
                let words = CommandLine.arguments.dropFirst().prefix { !$0.hasPrefix("-") }
                let known = words.prefix { word in configuration.subcommands.contains { $0._commandName == word } || ["create", "list", "revoke", "export", "rotate", "retire", "rotate-signing", "retire-signing", "list-signing", "keygen", "sign", "add", "show", "publish", "allowances", "credentials", "promote", "remove", "migrate", "schedule", "receive", "install", "make", "apply", "start", "advance", "halt", "complete", "status", "init", "configure", "check"].contains(word) }
                line += " (see `depot help\(known.isEmpty ? "" : " " + known.joined(separator: " "))`)"
            }
            FileHandle.standardError.write(Data((line + "\n").utf8))
            Foundation.exit(code.rawValue == 0 ? 1 : code.rawValue)
        }
    }
}

/// The data folder option shared by server-side commands.
struct DataOptions: ParsableArguments {
    @Option(name: .long, help: "The data folder (env DEPOT_DATA).")
    var data: String = Environment.string("DEPOT_DATA", "./depot-data")
}
