import ArgumentParser

@main
struct Depot: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "depot",
        abstract: "AssetDepot: a self-hosted origin for encrypted app asset packs, and its client.",
        discussion: """
            Server-side admin commands (apps, tokens, keys) work on the data folder directly;
            publish and sync talk HTTP. A failing command prints one line to stderr and exits non-zero.
            """,
        subcommands: [Serve.self, Apps.self, Tokens.self, Keys.self, Publish.self, Release.self, Releases.self, Rollback.self, Channels.self, Plist.self, GC.self, Sync.self, Fetch.self, Inspect.self]
    )
}

/// The data folder option shared by server-side commands.
struct DataOptions: ParsableArguments {
    @Option(name: .long, help: "The data folder (env DEPOT_DATA).")
    var data: String = Environment.string("DEPOT_DATA", "./depot-data")
}
