import ArgumentParser
import DepotCore
import DepotServer
import Foundation

extension Keys {
    struct RotateSigning: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate-signing",
            abstract: "Add a new manifest signing key; the current ones keep co-signing until you retire them (depot keys retire-signing).",
            discussion: """
                Builds exported before the rotation trust only the old key: it co-signs every manifest until you retire it, \
                so they keep receiving content (--grace-days N retires it after N days instead, your choice). Export every \
                app's configuration again and ship it; an app with a root of trust needs the new key in its next root \
                version (depot root sign --online-keys-from) before its builds that pin the root accept manifests signed by \
                it alone. A running server signs the live manifests with the keys in force within seconds.
                """
        )
        @OptionGroup var data: DataOptions
        @Option(name: .customLong("grace-days"), help: "Retire the current keys after this many days (default: never by themselves).") var graceDays: Int?

        func validate() throws {
            if let graceDays, graceDays < 0 { throw ValidationError("--grace-days must not be negative") }
        }

        func run() throws {
            let id = try AppStore(folder: DataFolder(data.data)).rotateSigningKey(grace: graceDays.map { TimeInterval($0) * 86_400 })
            let until = graceDays.map { "for \($0) days" } ?? "until you retire it (depot keys retire-signing KEYID)"
            print("new manifest signing key \(id); the previous key co-signs \(until). Export every app's configuration again.")
        }
    }

    struct RetireSigning: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "retire-signing",
            abstract: "Retire a manifest signing key: manifests are signed without it from now on.",
            discussion: """
                Builds whose configuration lists only this key stop accepting manifests (they keep their content until it \
                expires). Without --yes, says what it would do. Refused for the last key in force, and while an app's root \
                lists no other online key in force.
                """
        )
        @OptionGroup var data: DataOptions
        @Argument(help: "The key id (ed25519:…), as depot keys list-signing prints it.") var id: String
        @Flag(help: "Retire it: without this flag, the command only says what would happen.") var yes = false

        func run() throws {
            let apps = AppStore(folder: DataFolder(data.data))
            guard let key = try apps.signingKeyInfo().first(where: { $0.id == id }) else { throw CLIError("no signing key \(id) in \(data.data) (depot keys list-signing)") }
            let since = ISO8601DateFormatter().string(from: key.createdAt)
            let warning = "builds whose configuration lists only \(id) (exported while it was the only key, from \(since) until the next key was added) stop accepting manifests"
            let keeping = Set(try apps.signingKeyInfo().filter { $0.id != id && $0.retireAt.map { $0 > WallClock.now() } ?? true }.map(\.id))
            guard yes else {
                print("retiring \(id): \(warning).")
                for line in Self.figures(apps, keeping: keeping) { print(line) }
                print("Check who still runs them: `depot fleet --server URL --app APP` shows, per key in force, the reports of builds without it.")
                throw CLIError("run again with --yes to retire \(id)")
            }
            try apps.retireSigningKey(id)
            print("retired \(id): \(warning); a running server signs the live manifests without it within seconds")
            for line in Self.figures(apps, keeping: keeping) { print(line) }
        }

        /// Per app, the reports of the last 7 days from builds that pin none of the keys `keeping`
        /// (read from this origin's report files; builds that pin a root name no manifest key).
        static func figures(_ apps: AppStore, keeping: Set<String>) -> [String] {
            apps.list().sorted().compactMap { app in
                let (stranded, named) = apps.keyRingTally(app, days: 7).stranded("manifest", keeping: keeping)
                guard named > 0 else { return nil }
                return "\(app): \(Count(stranded)) of \(Count(named)) reports in the last 7 days that name manifest keys come from builds that pin none of the keys left in force"
            }
        }
    }

    struct ListSigning: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list-signing", abstract: "List the manifest signing keys: id, public key (base64), created, and in force or retired."
        )
        @OptionGroup var data: DataOptions

        func run() throws {
            let format = ISO8601DateFormatter()
            let now = WallClock.now()
            for key in try AppStore(folder: DataFolder(data.data)).signingKeyInfo() {
                let state = key.retireAt.map { $0 <= now ? "retired \(format.string(from: $0))" : "in force until \(format.string(from: $0))" } ?? "in force"
                print([key.id, key.publicKey, format.string(from: key.createdAt), state].joined(separator: "\t"))
            }
        }
    }
}
