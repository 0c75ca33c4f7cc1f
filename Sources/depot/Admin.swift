import ArgumentParser
import DepotCore
import DepotServer
import Foundation

extension AppMode: ExpressibleByArgument {}

struct Apps: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Create, list and remove apps, and set their credentials, allowances, language and trust rules.", subcommands: [Create.self, List.self, Remove.self, Credentials.self, Allowances.self, Language.self, Trust.self])

    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create an app with a fresh pack key.",
            discussion: """
                unmanaged (the default): the app's Background Assets extension or DepotClient downloads the signed manifest and \
                encrypted packs. managed (iOS 26+): the system's AssetPackManager downloads the Apple Archives that ba-package \
                builds, listed in the download manifest; give the app group the app and its extension share.
                """
        )
        @OptionGroup var data: DataOptions
        @Argument(help: "The app id (1–128 of A-Z a-z 0-9 . -), e.g. com.example.game.") var app: String
        @Option(help: "unmanaged or managed.") var mode: AppMode = .unmanaged
        @Option(name: .customLong("app-group"), help: "Managed apps: the app group id (BAAppGroupID), e.g. group.com.example.game.") var appGroup: String?
        @Option(name: .customLong("primary-language"), help: "The app's primary language (en, pt-BR): what devices take of localized packs when none of their languages is offered.")
        var primaryLanguage: String?

        func validate() throws {
            guard Identifier.isValidApp(app) else { throw ValidationError("invalid app id \"\(app)\": use 1–128 of A-Z a-z 0-9 . -") }
            if let primaryLanguage, LanguageTag(primaryLanguage) == nil { throw ValidationError("--primary-language takes a language tag (en, pt-BR)") }
            if mode == .managed && appGroup == nil { throw ValidationError("a managed app needs --app-group group.<reverse-DNS name>") }
            if mode == .unmanaged && appGroup != nil { throw ValidationError("--app-group is for managed apps (--mode managed)") }
        }

        func run() throws {
            let store = AppStore(folder: DataFolder(data.data))
            try store.create(app, mode: mode, appGroup: appGroup, primaryLanguage: primaryLanguage)
            print("created \(mode == .managed ? "managed app \(app) (app group \(appGroup ?? ""))" : "app \(app)")")
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove an app, with the origin stopped: its releases, channels, settings, drafts, rollouts, reports, trust rules, attested keys, tokens and pack keys.",
            discussion: """
                Its blobs stay until `depot gc` (or the running origin's sweep) finds nothing naming them. Devices keep what \
                they installed; the app's manifest answers 404 from then on. The pack keys are deleted: a backup keeps them. \
                Run again after an interruption, it finishes the removal. Needs --yes.
                """
        )
        @OptionGroup var data: DataOptions
        @Argument(help: "The app.") var app: String
        @Flag(help: "Remove it: without this flag, the command only says what would go.") var yes = false

        func run() throws {
            let folder = DataFolder(data.data)
            let store = AppStore(folder: folder)
            guard yes else {
                guard store.settings(app) != nil else { throw CLIError("no app \(app) in \(data.data)") }
                throw CLIError("this removes app \(app) from \(data.data) with its releases, tokens and pack keys (the origin stopped); run again with --yes")
            }
            // No origin may be running: it keeps the app's manifests and settings in memory.
            let lock = try folder.lockExclusively()
            defer { _ = lock }
            let removed = try store.remove(app)
            print("removed app \(app): \(removed.releases) releases, \(removed.tokens) tokens\(removed.packKey ? ", its pack keys" : ""); its blobs go at the next depot gc")
        }
    }

    struct Credentials: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Require HTTP Basic credentials to download an app's manifest, releases and blobs, or stop requiring them.",
            discussion: "--enable prints a new username and password once (a Background Assets extension answers the challenge); --disable removes them."
        )
        @OptionGroup var data: DataOptions
        @Argument(help: "The app.") var app: String
        @Flag(exclusivity: .exclusive) var mode: Mode

        enum Mode: EnumerableFlag { case enable, disable }

        func run() throws {
            let store = AppStore(folder: DataFolder(data.data))
            guard store.settings(app) != nil else { throw CLIError("no app \(app) in \(data.data)") }
            if let created = try store.setDownloadCredentials(app, enabled: mode == .enable) {
                print("download credentials of \(app) (the password is shown only now):")
                print("\(created.username):\(created.password)")
            } else {
                print("\(app) is downloadable without credentials")
            }
        }
    }

    struct Allowances: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Record the Info.plist allowances of the app's shipped builds; releases that exceed them are refused (409) unless forced.",
            discussion: "Take them from the plist you shipped (`depot plist … > shipped.plist`, then --from-plist shipped.plist), or give them one by one. With several builds in use, record the smallest."
        )
        @OptionGroup var data: DataOptions
        @Argument(help: "The app.") var app: String
        @Option(name: .customLong("from-plist"), help: "An Info.plist (or `depot plist` output) to read the four keys from.") var plist: String?
        @Option(name: .customLong("essential-download"), help: "BAEssentialDownloadAllowance, bytes.") var essentialDownload: Int64?
        @Option(help: "BADownloadAllowance, bytes.") var download: Int64?
        @Option(name: .customLong("essential-install"), help: "BAEssentialMaxInstallSize, bytes.") var essentialInstall: Int64?
        @Option(help: "BAMaxInstallSize, bytes.") var install: Int64?
        @Flag(help: "Forget the recorded allowances.") var clear = false

        func run() throws {
            let store = AppStore(folder: DataFolder(data.data))
            guard store.settings(app) != nil else { throw CLIError("no app \(app) in \(data.data)") }
            if clear {
                try store.setAllowances(app, nil)
                print("\(app): no allowances recorded; releases are not checked")
                return
            }
            var allowances = BuildAllowances()
            if let plist {
                guard let data = FileManager.default.contents(atPath: plist),
                      let root = try? PropertyListSerialization.propertyList(from: data, format: nil) as? [String: Any] else {
                    throw CLIError("\(plist) is not a property list")
                }
                let initial = root["BAInitialDownloadRestrictions"] as? [String: Any] ?? [:]
                allowances.essentialDownloadAllowance = (initial["BAEssentialDownloadAllowance"] as? Int).map(Int64.init)
                allowances.downloadAllowance = (initial["BADownloadAllowance"] as? Int).map(Int64.init)
                allowances.essentialMaxInstallSize = (root["BAEssentialMaxInstallSize"] as? Int).map(Int64.init)
                allowances.maxInstallSize = (root["BAMaxInstallSize"] as? Int).map(Int64.init)
            }
            allowances.essentialDownloadAllowance = essentialDownload ?? allowances.essentialDownloadAllowance
            allowances.downloadAllowance = download ?? allowances.downloadAllowance
            allowances.essentialMaxInstallSize = essentialInstall ?? allowances.essentialMaxInstallSize
            allowances.maxInstallSize = install ?? allowances.maxInstallSize
            guard allowances != BuildAllowances() else { throw CLIError("give --from-plist or at least one allowance (or --clear)") }
            try store.setAllowances(app, allowances)
            func show(_ value: Int64?) -> String { value.map(String.init) ?? "not checked" }
            print("\(app) allowances: essential download \(show(allowances.essentialDownloadAllowance)), download \(show(allowances.downloadAllowance)), "
                + "essential install \(show(allowances.essentialMaxInstallSize)), install \(show(allowances.maxInstallSize))")
        }
    }

    struct Language: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show or set the app's primary language, which localized packs need.",
            discussion: "A device takes one pack of each group of localized packs (voice-en, voice-fr, …): the best match for its languages, else the primary language's. The next release carries it."
        )
        @OptionGroup var data: DataOptions
        @Argument(help: "The app.") var app: String
        @Option(help: "The primary language (en, pt-BR, zh-Hans).") var primary: String?

        func run() throws {
            let store = AppStore(folder: DataFolder(data.data))
            guard store.settings(app) != nil else { throw CLIError("no app \(app) in \(data.data)") }
            if let primary { try store.setPrimaryLanguage(app, primary) }
            print("\(app): primary language \(store.settings(app)?.primaryLanguage ?? "not set")")
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List apps.")
        @OptionGroup var data: DataOptions
        func run() throws {
            for app in AppStore(folder: DataFolder(data.data)).list() { print(app) }
        }
    }
}

struct Tokens: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Create, list and revoke publish tokens.", subcommands: [Create.self, List.self, Revoke.self])

    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a token; it is printed once, on the last line, and stored only as a hash.")
        @OptionGroup var data: DataOptions
        @Option(help: "The app the token is scoped to.") var app: String
        @Option(help: "publisher or admin.") var role: String = "publisher"
        @Option(help: "When it expires: a duration such as 90d, 12h or 30m, or an ISO 8601 date. Default: never.")
        var expires: String?
        @Option(help: ArgumentHelp("Write the token into this new file (mode 0600, readable only by the user running the command) instead of printing it.", valueName: "file"))
        var out: String?

        func validate() throws {
            guard TokenRole(rawValue: role) != nil else { throw ValidationError("--role must be publisher or admin") }
            if let expires { _ = try Self.expiry(expires, from: WallClock.now()) }
        }

        /// `90d`, `12h`, `30m` from now, or an ISO 8601 instant in the future.
        static func expiry(_ text: String, from now: Date) throws -> Date {
            if let unit = text.last, let amount = Int(text.dropLast()), amount > 0, let seconds = ["d": 86_400, "h": 3_600, "m": 60][String(unit)] {
                return now.addingTimeInterval(TimeInterval(amount * seconds))
            }
            if let date = ISO8601DateFormatter().date(from: text), date > now { return date }
            throw ValidationError("--expires must be a duration such as 90d, 12h, 30m, or a future ISO 8601 date")
        }

        func run() throws {
            let folder = DataFolder(data.data)
            guard AppStore(folder: folder).settings(app) != nil else { throw CLIError("no app \(app) in \(data.data)") }
            let expiry = try expires.map { try Self.expiry($0, from: WallClock.now()) }
            // The file first, new and private: a token is never created that cannot be delivered.
            let file = try out.map { path in
                do {
                    return try FileDescriptor(path: path, flags: O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode: 0o600)
                } catch {
                    let user = getpwuid(geteuid()).map { String(cString: $0.pointee.pw_name) } ?? "uid \(geteuid())"
                    throw CLIError("--out \(path): \(error) (it must be a new file that \(user), the user this command runs as, can create)")
                }
            }
            let created: (token: String, record: StoredToken)
            do {
                created = try TokenStore(folder: folder).create(app: app, role: TokenRole(rawValue: role)!, expiresAt: expiry)
            } catch {
                if let out { FileSystem.remove(out) }
                throw error
            }
            let until = created.record.expiresAt.map { ", expires \(ISO8601DateFormatter().string(from: $0))" } ?? ""
            print("created \(created.record.id) (\(created.record.role.rawValue) of \(created.record.app)\(until))")
            if let file, let out {
                try file.write(Array((created.token + "\n").utf8))
                try file.sync()
                try? FileSystem.syncDirectory(FileSystem.directory(of: out))
                print("the token is in \(out) (mode 0600)")
            } else {
                print(created.token)
            }
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List tokens: id, app, role, created, expires, state, and for tokens of trusted publishing their channels, rule and job (never the tokens themselves)."
        )
        @OptionGroup var data: DataOptions
        func run() throws {
            let format = ISO8601DateFormatter()
            let now = WallClock.now()
            for token in try TokenStore(folder: DataFolder(data.data)).list() {
                let state = token.revokedAt != nil ? "revoked" : (token.expiresAt.map { $0 <= now } ?? false) ? "expired" : "active"
                var fields = [token.id, token.app, token.role.rawValue, format.string(from: token.createdAt),
                              token.expiresAt.map(format.string(from:)) ?? "never", state]
                if let rule = token.rule { fields += ["channels=\(token.channels?.joined(separator: ",") ?? "all")", rule, token.subject ?? ""] }
                print(fields.joined(separator: "\t"))
            }
        }
    }

    struct Revoke: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a token by id; a running server refuses it from then on.")
        @OptionGroup var data: DataOptions
        @Argument(help: "The token id (tok-…), as `depot tokens list` shows it.") var id: String

        func run() throws {
            guard try TokenStore(folder: DataFolder(data.data)).revoke(id: id) else { throw CLIError("no token \(id) in \(data.data)") }
            print("revoked \(id)")
        }
    }
}

struct Keys: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Export, rotate and retire an app's pack keys and the origin's manifest signing keys.",
        subcommands: [Export.self, List.self, Rotate.self, Retire.self, RotateSigning.self, RetireSigning.self, ListSigning.self]
    )
}

/// A one-line failure for the command line.
struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
