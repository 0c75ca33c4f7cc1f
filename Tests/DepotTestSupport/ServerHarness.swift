import DepotCore
import DepotHTTP
import DepotServer
import Foundation
import Logging

/// A running origin on an ephemeral port with a temporary data folder, an app and a token.
public struct TestOrigin: Sendable {
    public let server: DepotServer
    public let data: TemporaryDirectory
    public let app: String
    public let token: String

    public init(server: DepotServer, data: TemporaryDirectory, app: String, token: String) {
        (self.server, self.data, self.app, self.token) = (server, data, app, token)
    }

    public var port: UInt16 { server.port }
    public var baseURL: URL { URL(string: "http://127.0.0.1:\(server.port)")! }

    /// The client configuration an app of this origin would be given.
    public func clientConfiguration() throws -> ClientConfiguration {
        try AppStore(folder: DataFolder(data.path)).clientConfiguration(app)
    }
}

/// Prepares a data folder with one app and a token of `role`; returns the token.
@discardableResult
public func prepareDataFolder(_ path: String, app: String, role: TokenRole = .publisher) throws -> String {
    let folder = DataFolder(path)
    try folder.prepare()
    try AppStore(folder: folder).create(app)
    return try TokenStore(folder: folder).create(app: app, role: role).token
}

/// Starts a real origin on port 0 over an existing data folder, with a silent logger; the caller stops it.
public func startServer(dataPath: String, threads: Int = 1, logger: Logger? = nil) throws -> DepotServer {
    var configuration = OriginConfiguration(
        dataPath: dataPath, http: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: threads),
        logger: logger ?? Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
    )
    configuration.patchDepth = 0
    return try DepotServer(configuration: configuration)
}

/// Starts the real origin on port 0, runs `body`, and always stops it and removes its data.
@discardableResult
public func withServer<T>(
    app: String = "com.example.game", configure: (inout OriginConfiguration) -> Void = { _ in },
    _ body: (TestOrigin) async throws -> T
) async throws -> T {
    let data = TemporaryDirectory("depot-origin")
    defer { data.remove() }
    let token = try prepareDataFolder(data.path, app: app)
    var configuration = OriginConfiguration(
        dataPath: data.path, http: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 2),
        logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
    )
    // Patches (a background release after each change) only where a test asks for them.
    configuration.patchDepth = 0
    configure(&configuration)
    let server = try DepotServer(configuration: configuration)
    defer { server.stop() }
    return try await body(TestOrigin(server: server, data: data, app: app, token: token))
}
