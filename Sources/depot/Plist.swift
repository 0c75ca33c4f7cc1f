import ArgumentParser
import DepotClient
import Foundation

struct Plist: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the Background Assets Info.plist keys for the app's live release.",
        discussion: "The output is a complete XML property list; copy the entries of its top-level dict into your Info.plist."
    )

    @Option(help: "The origin URL.") var server: String
    @Option(help: "The app.") var app: String
    @Option(help: "USER:PASSWORD, when the app has download credentials (env DEPOT_DOWNLOAD_CREDENTIALS).")
    var credentials: String = Environment.string("DEPOT_DOWNLOAD_CREDENTIALS", "")

    func validate() throws {
        guard URL(string: server)?.scheme != nil else { throw ValidationError("--server must be a URL such as http://127.0.0.1:8080") }
    }

    func run() async throws {
        let url = URL(string: server)!.appendingPathComponent("v1/apps/\(app)/info-plist")
        var headers: [String: String] = [:]
        if !credentials.isEmpty { headers["Authorization"] = "Basic " + Data(credentials.utf8).base64EncodedString() }
        let response = try await HTTPTransport().get(url, headers: headers, limit: 1 << 20)
        guard response.status == 200 else { throw CLIError("plist failed: HTTP \(response.status): \(Publish.message(response.body))") }
        FileHandle.standardOutput.write(Data(response.body))
    }
}
