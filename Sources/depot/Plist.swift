import ArgumentParser
import DepotClient
import Foundation

struct Plist: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the Background Assets Info.plist keys for the release a channel serves (production by default).",
        discussion: "The output is a complete XML property list; copy the entries of its top-level dict into your Info.plist."
    )

    @OptionGroup var origin: ServerOptions
    @OptionGroup var credentials: CredentialsOption
    @OptionGroup var channel: ChannelOption

    func run() async throws {
        let response = try await origin.transport().get(origin.endpoint("info-plist", channel.query), headers: credentials.headers, limit: 1 << 20)
        guard response.status == 200 else { throw CLIError("plist failed: HTTP \(response.status): \(Publish.message(response.body))") }
        FileHandle.standardOutput.write(Data(response.body))
    }
}
