import ArgumentParser
import DepotClient
import DepotCore
import Foundation

struct Sync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sync an app's packs from an origin into a folder: verify, download, decrypt, install."
    )

    @Option(help: "The origin (or edge) URL.") var server: String
    @Option(help: "The app.") var app: String
    @Option(help: "The client configuration JSON from `depot keys export`.") var config: String
    @Option(help: "The destination folder; packs land in DEST/packs/<id>.") var dest: String

    func validate() throws {
        guard URL(string: server)?.scheme != nil else { throw ValidationError("--server must be a URL such as http://127.0.0.1:8080") }
    }

    func run() async throws {
        let configuration = try ClientConfiguration.decode(FileSystem.readFile(config, limit: 1 << 20))
        guard configuration.app == app else { throw CLIError("\(config) is for app \(configuration.app), not \(app)") }
        let report = try await DepotSync(server: URL(string: server)!, configuration: configuration, destination: dest).run()
        print("synced \(app) release \(report.manifestVersion): \(report.installed.count) installed, \(report.removed.count) removed, \(report.unchanged.count) unchanged, \(report.bytesDownloaded) bytes downloaded")
    }
}
