import ArgumentParser
import DepotClient
import DepotCore
import Foundation

/// `--server` and `--app`, for every command that talks to an origin, with how to reach it.
struct ServerOptions: ParsableArguments {
    @Option(help: "The origin (or edge) URL.") var server: String
    @Option(help: "The app.") var app: String
    @OptionGroup var connection: ConnectionOptions

    func validate() throws {
        guard let url = URL(string: server), url.scheme == "http" || url.scheme == "https" else {
            throw ValidationError("--server must be a URL such as http://127.0.0.1:8080")
        }
    }

    /// A transport that trusts and connects as the options say.
    func transport(timeout: TimeInterval = 60) -> HTTPTransport { HTTPTransport(timeout: timeout, options: connection.options) }

    var url: URL { URL(string: server)! }

    /// `{server}/v1/apps/{app}/{path}` with query items.
    func endpoint(_ path: String, _ query: [URLQueryItem] = []) -> URL {
        var components = URLComponents(url: url.appendingPathComponent("v1/apps/\(app)/\(path)"), resolvingAgainstBaseURL: false)!
        components.queryItems = query.isEmpty ? nil : query
        return components.url!
    }
}

/// `--ca-file` and `--resolve`: what https trusts and where a name connects.
struct ConnectionOptions: ParsableArguments {
    @Option(name: .customLong("ca-file"), help: "Trust the CA certificates in this PEM file for https, instead of the system's store (env DEPOT_CA_FILE).")
    var caFileOption: String?
    @Option(help: ArgumentHelp("Connect to ADDRESS for HOST:PORT, as curl's --resolve (repeatable): reach one edge of several behind one name.", valueName: "HOST:PORT:ADDRESS"))
    var resolve: [String] = []

    var caFile: String? { caFileOption ?? Environment.string("DEPOT_CA_FILE") }

    func validate() throws {
        if let caFile, !FileSystem.exists(caFile) { throw ValidationError("--ca-file \(caFile): no such file") }
        for entry in resolve where entry.split(separator: ":", maxSplits: 2).count != 3 {
            throw ValidationError("--resolve takes HOST:PORT:ADDRESS, such as assets.example.com:443:127.0.0.1")
        }
    }

    var options: TransportOptions {
        var map: [String: String] = [:]
        for entry in resolve {
            let parts = entry.split(separator: ":", maxSplits: 2).map(String.init)
            map[parts[0] + ":" + parts[1]] = parts[2]
        }
        return TransportOptions(caFile: caFile, resolve: map)
    }
}

/// `--channel`, for commands that publish to or read one channel.
struct ChannelOption: ParsableArguments {
    @Option(help: "The channel (default: production, whose manifest is /v1/apps/APP/manifest).") var channel: String = "production"

    func validate() throws {
        guard Identifier.isValidChannel(channel) else { throw ValidationError("invalid channel \"\(channel)\": 1–64 of A-Z a-z 0-9 . -") }
    }

    /// `channel=NAME`, or nothing for production.
    var query: [URLQueryItem] { channel == "production" ? [] : [URLQueryItem(name: "channel", value: channel)] }
}

/// `--token`, defaulting to `$DEPOT_TOKEN` (`$DEPOT_ADMIN_TOKEN` first for admin calls), for
/// commands that publish.
struct TokenOption: ParsableArguments {
    @Option(help: "A token of the app (default: $DEPOT_TOKEN; for rollback and channel removal $DEPOT_ADMIN_TOKEN first).") var token: String?

    func headers(admin: Bool = false) throws -> [String: String] {
        let fallback = (admin ? Environment.string("DEPOT_ADMIN_TOKEN") : nil) ?? Environment.string("DEPOT_TOKEN")
        guard let token = token ?? fallback else {
            throw CLIError("no token: pass --token or set \(admin ? "DEPOT_ADMIN_TOKEN (an admin token: `depot tokens create --app APP --role admin`)" : "DEPOT_TOKEN")")
        }
        return ["Authorization": "Bearer \(token)"]
    }
}

/// `--credentials`, for reading an app that has download credentials.
struct CredentialsOption: ParsableArguments {
    @Option(help: "USER:PASSWORD, when the app has download credentials (env DEPOT_DOWNLOAD_CREDENTIALS).")
    var credentials: String = Environment.string("DEPOT_DOWNLOAD_CREDENTIALS", "")

    var headers: [String: String] {
        credentials.isEmpty ? [:] : ["Authorization": "Basic " + Data(credentials.utf8).base64EncodedString()]
    }
}
