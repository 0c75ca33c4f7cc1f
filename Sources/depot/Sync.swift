import ArgumentParser
import DepotClient
import DepotCore
import Foundation

struct Sync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sync an app's packs from an origin into a folder: verify, download, decrypt, install."
    )

    @OptionGroup var origin: ServerOptions
    @Option(help: "The client configuration JSON from `depot keys export`.") var config: String
    @Option(help: "The destination folder; packs land in DEST/packs/<id>.") var dest: String

    func run() async throws {
        let configuration = try ClientConfiguration.decode(FileSystem.readFile(config, limit: 1 << 20))
        guard configuration.app == origin.app else { throw CLIError("\(config) is for app \(configuration.app), not \(origin.app)") }
        let report = try await DepotSync(server: origin.url, configuration: configuration, destination: dest).run()
        print("synced \(origin.app) release \(report.manifestVersion): \(report.installed.count) installed, \(report.removed.count) removed, \(report.unchanged.count) unchanged, \(report.bytesDownloaded) bytes downloaded")
    }
}
