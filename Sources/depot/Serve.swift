import ArgumentParser
import DepotCore
import DepotHTTP
import DepotServer
import Foundation

struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the origin.",
        discussion: "A data folder that does not exist yet is created with a dev app, its keys and a publish token, which are printed."
    )

    @OptionGroup var data: DataOptions

    @Option(help: "HOST:PORT to listen on (port 0 picks a free port).")
    var listen: String = "127.0.0.1:8080"

    @Option(name: .customLong("public-url"), help: "Base URL that manifests put in front of blob paths (your CDN or edge). Default: http://HOST:PORT.")
    var publicURL: String?

    @Option(name: .customLong("public-dir"), help: "Folder served at / (the dashboard). Default: ./Public, or the Public folder of the source tree.")
    var publicDir: String?

    @Option(help: "Server threads.")
    var threads: Int = 4

    @Option(name: .customLong("max-pack-size"), help: "Largest pack accepted, in bytes.")
    var maxPackSize: Int64 = 16 << 30

    func validate() throws {
        _ = try parseListen()
        guard threads >= 1 && threads <= 256 else { throw ValidationError("--threads must be 1–256") }
        if let publicURL, URL(string: publicURL)?.scheme == nil { throw ValidationError("--public-url must be an absolute URL") }
    }

    func parseListen() throws -> (String, UInt16) {
        guard let colon = listen.lastIndex(of: ":"), let port = UInt16(listen[listen.index(after: colon)...]) else {
            throw ValidationError("--listen must be HOST:PORT")
        }
        return (String(listen[..<colon]), port)
    }

    func run() throws {
        let (host, port) = try parseListen()
        let bootstrap = try Bootstrap.ifNeeded(dataPath: data.data)
        // Block the stop signals before any server thread starts, so that only sigwait sees them.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        pthread_sigmask(SIG_BLOCK, &signals, nil)

        let server = try DepotServer(configuration: OriginConfiguration(
            dataPath: data.data, publicURL: publicURL, publicDirectory: publicDir ?? Self.defaultPublicDirectory(),
            maximumPackSize: maxPackSize, http: HTTPServerConfiguration(host: host, port: port, threads: threads)
        ))
        print("AssetDepot listening on \(host.contains(":") ? "[\(host)]" : host):\(server.port), data \(data.data), public URL \(server.publicURL)")
        if let bootstrap { print(bootstrap.instructions(server: server.publicURL, dataPath: data.data)) }
        fflush(nil)
        var received: Int32 = 0
        sigwait(&signals, &received)
        print("stopping (signal \(received))")
        server.stop()
    }

    static func defaultPublicDirectory() -> String? {
        if FileSystem.exists("./Public/index.html") { return "./Public" }
        // The source tree's Public/, found from the built executable (.build/<config>/depot).
        var folder = FileSystem.directory(of: CommandLine.executablePath)
        for _ in 0..<4 {
            if FileSystem.exists(folder + "/Public/index.html") { return folder + "/Public" }
            folder = FileSystem.directory(of: folder)
        }
        return nil
    }
}

extension CommandLine {
    static var executablePath: String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? arguments[0]
    }
}
