import ArgumentParser
import DepotClient
import DepotCore
import Foundation

/// The three calls a Background Assets extension and its app make (``ExtensionFlow``), one
/// subcommand each, so that each runs in a process of its own as on a device: the tests measure
/// and kill them there.
struct ExtensionCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "extension",
        abstract: "Run a Background Assets extension's steps on a folder, as the device does: schedule, receive, install.",
        discussion: """
            depot extension schedule: verify the manifest file the system fetched and print the downloads to \
            schedule, one a line (identifier, size, essential or not, URL). depot extension receive: take in a \
            finished download (one rename into DEST/.depot/arrived). depot extension install: the install step \
            (verify, decrypt, unzip, switch in) for everything that arrived; killed, the next run cleans up.
            """,
        subcommands: [Schedule.self, Receive.self, Install.self]
    )

    struct Folder: ParsableArguments {
        @Option(help: "The client configuration JSON from `depot keys export`.") var config: String
        @Option(help: "The App Group folder the app and the extension share.") var dest: String
        @Option(name: .customLong("state-folder"), help: "Where the state lives, outside the packs' folder (an app's Library/Application Support); a state kept in DEST/.depot is moved there. Default: DEST/.depot.")
        var stateFolder: String?
        @Option(help: "The channel this build follows.") var channel: String = ManifestSource.production
        @Option(help: "The device's languages, most preferred first (fr-CA,en): one pack of each group of localized packs. Default: this machine's.")
        var languages: String?

        var languageList: [String] { languages.map { $0.split(separator: ",").map(String.init) } ?? Locale.preferredLanguages }

        func flow() throws -> ExtensionFlow {
            try ExtensionFlow(configuration: Sync.loadConfiguration(config), destination: dest, stateFolder: stateFolder, channel: channel)
        }
    }

    struct Schedule: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Verify a delivered manifest and print what to schedule.")
        @OptionGroup var folder: Folder
        @Option(help: "The manifest file (the signed envelope) the system fetched.") var manifest: String
        @Option(help: "The event: install, update, periodic or language-change.") var event: String = "periodic"
        @Option(help: "Bytes non-essential downloads may take (BAAppExtensionInfo).") var allowance: Int?
        @Option(name: .customLong("essential-allowance"), help: "Bytes essential downloads may take.") var essentialAllowance: Int?
        @Option(help: "An identifier the system already has scheduled (repeatable).") var scheduled: [String] = []

        func run() throws {
            guard let kind = RequestKind(rawValue: event), kind != .foreground else { throw ValidationError("--event must be install, update, periodic or language-change") }
            let downloads = try folder.flow().schedule(
                manifestFile: manifest, kind: kind, allowance: allowance, essentialAllowance: essentialAllowance, scheduled: Set(scheduled),
                languages: folder.languageList
            )
            for download in downloads {
                print("\(download.identifier) \(download.fileSize) \(download.isEssential ? "essential" : "non-essential") \(download.url.absoluteString)")
            }
        }
    }

    struct Receive: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Take in a finished download: one rename into the folder.")
        @OptionGroup var folder: Folder
        @Argument(help: "The download's identifier (pack@revision), as scheduled.") var identifier: String
        @Argument(help: "The delivered file (moved, not copied).") var file: String

        func run() throws { try folder.flow().receive(identifier: identifier, file: file) }
    }

    struct Install: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The install step: verify, decrypt, unzip and switch in everything that arrived.")
        @OptionGroup var folder: Folder

        func run() throws {
            let report = try folder.flow().installArrived(languages: folder.languageList)
            for id in report.installed { print("installed \(id)") }
            for id in report.removed { print("removed \(id): another language's, replaced") }
            for (identifier, why) in report.discarded.sorted(by: { $0.key < $1.key }) { print("discarded \(identifier): \(why)") }
            for (identifier, why) in report.kept.sorted(by: { $0.key < $1.key }) { print("kept \(identifier): \(why)") }
            if !report.discarded.isEmpty || !report.kept.isEmpty { throw ExitCode(1) }
        }
    }
}
