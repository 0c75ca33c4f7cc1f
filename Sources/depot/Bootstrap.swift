import DepotCore
import DepotServer
import Foundation

/// The embedded default: a new data folder gets a dev app, its keys, a publisher and an admin token.
struct Bootstrap {
    static let devApp = "com.example.dev"
    let token: String
    let adminToken: String

    static func ifNeeded(dataPath: String) throws -> Bootstrap? {
        let folder = DataFolder(dataPath)
        guard !folder.exists else { return nil }
        try folder.makeFolders()
        let apps = AppStore(folder: folder)
        try apps.create(devApp)
        let tokens = TokenStore(folder: folder)
        let (token, _) = try tokens.create(app: devApp, role: .publisher)
        let (admin, _) = try tokens.create(app: devApp, role: .admin)
        return Bootstrap(token: token, adminToken: admin)
    }

    /// What a developer needs to try every command of the README's tour and the Publishing guide's workflow, printed once.
    func instructions(server: String, dataPath: String, depot: String) -> String {
        let onPath = Self.isOnPath(depot)
        let pathLine = onPath ? "" : "\n    export PATH=\"\(FileSystem.directory(of: depot)):$PATH\"   # where this depot is\n"
        return """

        Created \(dataPath) with the app \(Self.devApp), its keys, and two tokens (shown only now): a publisher
        token (publish, release) and an admin token (also rollback and removing channels). In another terminal:
        \(pathLine)
            export DEPOT_TOKEN=\(token)
            export DEPOT_ADMIN_TOKEN=\(adminToken)

        Publish a file, export the app's client configuration (a secret: keep it out of the repository), sync it back:

            tour=$(mktemp -d)
            depot publish README.md --server \(server) --app \(Self.devApp) --pack readme --release
            depot keys export --data \(dataPath) --app \(Self.devApp) > $tour/client.json
            depot sync --server \(server) --app \(Self.devApp) --config $tour/client.json --dest $tour/installed
        """
    }

    /// Whether `depot` on PATH is this binary.
    static func isOnPath(_ binary: String) -> Bool {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        return path.split(separator: ":").contains { FileSystem.exists(String($0) + "/depot") && String($0) == FileSystem.directory(of: binary) }
    }
}
