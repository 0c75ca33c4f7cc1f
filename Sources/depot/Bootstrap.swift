import DepotCore
import DepotServer

/// The embedded default: a new data folder gets a dev app, its keys and a publish token.
struct Bootstrap {
    static let devApp = "com.example.dev"
    let token: String

    static func ifNeeded(dataPath: String) throws -> Bootstrap? {
        let folder = DataFolder(dataPath)
        guard !folder.exists else { return nil }
        try folder.prepare()
        let apps = AppStore(folder: folder)
        try apps.create(devApp)
        let (token, _) = try TokenStore(folder: folder).create(app: devApp, role: .publisher)
        return Bootstrap(token: token)
    }

    func instructions(server: String, dataPath: String) -> String {
        """

        Created \(dataPath) with the app \(Self.devApp) and a publish token (shown only now):

            export DEPOT_TOKEN=\(token)

        Publish a file, export the app's client configuration, and sync it back:

            depot publish README.md --server \(server) --app \(Self.devApp) --pack readme --token $DEPOT_TOKEN --release
            depot keys export --data \(dataPath) --app \(Self.devApp) > client.json
            depot sync --server \(server) --app \(Self.devApp) --config client.json --dest ./installed
        """
    }
}
