import ArgumentParser
import DepotClient
import DepotCore
import Foundation

/// `depot verify-edge`: what devices would download through an edge or CDN, checked against the
/// signed manifests before devices fail on it.
struct VerifyEdge: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-edge",
        abstract: "Check an edge or CDN against the live manifests: every pack a device would download, as it would download it.",
        discussion: """
            --server is the public URL devices use. For every channel (or --channel), the live manifest is fetched and its \
            signature checked (with --config); then every pack and patch URL in it: status 200, Content-Length exactly the \
            manifest's size, no Content-Encoding (asked with Accept-Encoding: gzip, deflate, br, as URLSession asks), the body's \
            SHA-256 (or, with --sample N, the header and N records fetched by Range and authenticated with the key ring), a \
            Cache-Control that lets an immutable pack be cached and a strong ETag, https (the handshake needs TLS 1.2 or later \
            and a chain the system, or --ca-file, trusts) and a host on the app's BADownloadDomainAllowList (from --info-plist, \
            or the origin's computed keys). One line per problem, naming the pack and what a device would see; exits 1 on any. \
            Without --config the manifest is not authenticated: only URLs on --server's own scheme, host and port are fetched \
            (--any-host follows the others, without credentials). The whole check stops at --deadline.
            """
    )

    @OptionGroup var origin: ServerOptions
    @Option(help: "The client configuration JSON from `depot keys export`: manifest keys (signatures) and the key ring (--sample).") var config: String?
    @Option(help: "Only this channel (default: every channel the edge lists).") var channel: String?
    @Option(help: "Authenticate N records of each pack by Range instead of hashing whole bodies (needs --config).") var sample: Int?
    @Option(name: .customLong("info-plist"), help: "The Info.plist the app ships (its BADownloadDomainAllowList); default: the origin's computed keys.") var infoPlist: String?
    @Flag(name: .customLong("allow-http"), help: "Accept http:// URLs (a development edge; a device refuses them).") var allowHTTP = false
    @Flag(name: .customLong("any-host"), help: "Without --config: also fetch URLs the (unsigned) manifest names on other hosts than --server's scheme, host and port; credentials are never sent there.") var anyHost = false
    @Option(help: "Stop the whole check after this many seconds (what is in flight is cancelled; reported as a problem).") var deadline: Int = 3600
    @OptionGroup var credentials: CredentialsOption

    func validate() throws {
        if let sample, sample < 1 { throw ValidationError("--sample takes a number of records, 1 or more") }
        if sample != nil && config == nil { throw ValidationError("--sample needs --config: the records are authenticated with the app's key ring") }
        if let channel, !Identifier.isValidChannel(channel) { throw ValidationError("invalid channel \"\(channel)\"") }
        guard deadline >= 1 else { throw ValidationError("--deadline takes seconds, 1 or more") }
    }

    func run() async throws {
        var verifier = try Self.verifier(origin: origin, config: config, sample: sample, infoPlist: infoPlist, allowHTTP: allowHTTP, headers: credentials.headers)
        verifier.anyHost = anyHost
        verifier.deadline = .seconds(deadline)
        let report = await verifier.run(channels: channel.map { [$0] })
        if try Self.print(report, server: origin.server) > 0 { throw ExitCode(1) }
    }

    static func verifier(origin: ServerOptions, config: String?, sample: Int?, infoPlist: String?, allowHTTP: Bool, headers: [String: String]) throws -> EdgeVerifier {
        let configuration = try config.map { try ClientConfiguration.decode(FileSystem.readFile($0, limit: 1 << 20)) }
        let rules = try infoPlist.map { try BackgroundAssetsRules.parse(plist: FileSystem.readFile($0, limit: 4 << 20)) }
        return EdgeVerifier(server: origin.url, app: origin.app, transport: origin.transport(timeout: 120), headers: headers,
                            configuration: configuration, sample: sample, rules: rules, allowHTTP: allowHTTP)
    }

    /// Prints one line per problem and a summary; returns the problem count.
    @discardableResult
    static func print(_ report: EdgeVerifier.Report, server: String) throws -> Int {
        for problem in report.problems { Swift.print("problem: \(problem)") }
        Swift.print("\(server): \(report.manifests) manifest\(report.manifests == 1 ? "" : "s") and \(report.downloads) download\(report.downloads == 1 ? "" : "s") checked (\(report.bytes) bytes), \(report.problems.count) problem\(report.problems.count == 1 ? "" : "s")")
        return report.problems.count
    }
}
