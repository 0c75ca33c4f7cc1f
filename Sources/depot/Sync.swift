import ArgumentParser
import DepotClient
import DepotCore
import Foundation
import Synchronization

struct Sync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sync an app's packs from an origin into a folder: verify, download, decrypt, install.",
        discussion: """
            Without --event the sync runs as the app would in the foreground: essential packs are fetched as \
            non-essential, prefetch packs always, on-demand packs when named with --pack or --tag.

            With --event install|update|periodic it simulates Background Assets on a device, applying the \
            system's rules to the server's real output: essential downloads only on install and update; a \
            download whose size differs from the manifest fails; on install (before first launch) downloads \
            beyond the Info.plist allowances wait; the manifest and packs must be https (unless --allow-http) \
            and on a domain of BADownloadDomainAllowList. The Info.plist keys come from --info-plist (what the shipped build \
            carries; `depot plist` prints them) or else from the server. It then reports what a device would \
            end up with.

            Progress goes to stderr (a bar on a terminal); the last line on stdout is a one-line summary. \
            Exits non-zero if any pack failed; the previous revision of a failed pack stays installed.
            """
    )

    @OptionGroup var origin: ServerOptions
    @Option(help: "The client configuration JSON from `depot keys export` (not with --managed).") var config: String?
    @Flag(help: "A managed app (iOS 26+): simulate the system's AssetPackManager on the download manifest (with --event).") var managed = false
    @Option(help: "The destination folder; packs land in DEST/packs/<id> (a folder for a zip pack).") var dest: String
    @OptionGroup var channel: ChannelOption
    @Option(help: "Simulate a Background Assets event: install, update, periodic or language-change (iOS 27+).") var event: String?
    @Option(help: "The device's languages, most preferred first (fr-CA,en): one pack of each group of localized packs is taken. Default: this machine's.")
    var languages: String?
    @Option(name: .customLong("info-plist"), help: "With --event: the build's Info.plist (XML) whose allowances and domains apply.") var infoPlist: String?
    @Option(help: "An on-demand pack to fetch (repeatable).") var pack: [String] = []
    @Option(help: "Fetch the on-demand packs with this tag (repeatable).") var tag: [String] = []
    @Option(help: "Downloads at once.") var concurrency: Int = 4
    @Option(name: .customLong("manifest-url"), help: "Read the manifest from this URL instead of the channel's on --server.") var manifestURL: String?
    @OptionGroup var credentials: CredentialsOption
    @Flag(name: .customLong("allow-http"), help: "With --event: accept http:// manifest and pack URLs (a development run; a device refuses them).")
    var allowHTTP = false
    @Flag(help: "Print no progress.") var quiet = false
    @Flag(help: "Send the origin a report of this step (no identifier: the release, and each pack's revision and outcome), as an app that opts in does.")
    var report = false

    var languageList: [String] { languages.map { $0.split(separator: ",").map(String.init) } ?? Locale.preferredLanguages }

    func validate() throws {
        if let event, !["install", "update", "periodic", "language-change"].contains(event) { throw ValidationError("--event must be install, update, periodic or language-change") }
        if let languages, LanguageTag.list([languages]).count != languages.split(separator: ",").count {
            throw ValidationError("--languages takes language tags, comma-separated (fr-CA,en)")
        }
        if managed {
            guard event != nil else { throw ValidationError("--managed simulates a device: give --event install, update or periodic") }
            guard config == nil, infoPlist == nil, tag.isEmpty else { throw ValidationError("--managed takes no --config, --info-plist or --tag") }
        } else if config == nil {
            throw ValidationError("give --config (the JSON from `depot keys export`), or --managed for a managed app")
        }
        if infoPlist != nil && event == nil { throw ValidationError("--info-plist goes with --event") }
        if report && managed { throw ValidationError("--report goes without --managed (a managed app's system downloads report nothing to the app's origin)") }
        if allowHTTP && event == nil { throw ValidationError("--allow-http goes with --event") }
        guard (1...32).contains(concurrency) else { throw ValidationError("--concurrency must be 1–32") }
        if let manifestURL, URL(string: manifestURL)?.scheme == nil { throw ValidationError("--manifest-url must be a URL") }
    }

    func run() async throws {
        if managed, let event {
            let device = ManagedDevice(destination: dest, allowHTTP: allowHTTP, requested: Set(pack), languages: languageList)
            let url = manifestURL.flatMap(URL.init(string:)) ?? origin.endpoint(channel.channel == "production" ? "download-manifest" : "channels/\(channel.channel)/download-manifest")
            let report = try await device.run(event: event, manifestURL: url, transport: origin.transport(), headers: credentials.headers)
            for line in report.lines { print(line) }
            for (id, reason) in report.failed.sorted(by: { $0.key < $1.key }) { FileHandle.standardError.write(Data("failed: \(id): \(reason)\n".utf8)) }
            if !report.failed.isEmpty { throw ExitCode(1) }
            return
        }
        let configuration = try Self.loadConfiguration(config ?? "")
        guard configuration.app == origin.app else { throw CLIError("\(config ?? "") is for app \(configuration.app), not \(origin.app)") }
        var sync = DepotSync(server: origin.url, configuration: configuration, destination: dest)
        sync.kind = event.flatMap(RequestKind.init(rawValue:)) ?? .foreground
        sync.channel = channel.channel
        sync.manifestURL = manifestURL.flatMap(URL.init(string:))
        sync.requestedPacks = Set(pack)
        sync.requestedTags = Set(tag)
        sync.languages = languageList
        sync.concurrency = concurrency
        sync.headers = credentials.headers
        sync.transport = origin.connection.options
        if event != nil {
            let plist: [UInt8]
            if let infoPlist {
                plist = try FileSystem.readFile(infoPlist, limit: 1 << 20)
            } else {
                let response = try await origin.transport().get(origin.endpoint("info-plist", channel.query), headers: credentials.headers, limit: 1 << 20)
                guard response.status == 200 else { throw CLIError("cannot read the Info.plist keys: HTTP \(response.status): \(Publish.message(response.body))") }
                plist = response.body
            }
            var rules = try BackgroundAssetsRules.parse(plist: plist)
            rules.requiresHTTPS = !allowHTTP
            sync.rules = rules
        }
        let progress = ProgressReporter(label: "downloading")
        let totals = Mutex<(planned: Int64, done: [String: Int64])>((0, [:]))
        if !quiet {
            sync.observer = { event in
                switch event {
                case .planned(let plan):
                    // What is downloaded: a patch's bytes when a patch is planned, not the whole pack's.
                    totals.withLock { $0.planned = plan.downloads.reduce(0) { $0 + $1.size } }
                case .download(.progress(let id, let received, _)), .download(.started(let id, let received, _)):
                    let (done, total) = totals.withLock { state -> (Int64, Int64) in
                        state.done[id] = received
                        return (state.done.values.reduce(0, +), state.planned)
                    }
                    if total > 0 { progress.update(min(done, total), of: total) }
                case .download(.retrying(let id, let attempt, let reason)):
                    progress.note("retrying \(id) (attempt \(attempt)): \(reason)")
                default:
                    break
                }
            }
        }
        let report: SyncReport
        do {
            report = try await sync.sync()
        } catch {
            progress.finish()
            throw error
        }
        progress.finish()
        if event != nil {
            // What a device would end up with.
            let state = try StateStore(destination: dest).read(app: configuration.app)
            for (id, pack) in state.packs.sorted(by: { $0.key < $1.key }) {
                print("device has \(id) revision \(pack.revision) (\(pack.installSize) bytes installed\(pack.unpacked ? ", unpacked" : ""))")
            }
            for id in report.deferred { print("device waits for \(id): \(report.waiting[id] ?? "a later event")") }
        }
        for (id, reason) in report.patchFallbacks.sorted(by: { $0.key < $1.key }) {
            FileHandle.standardError.write(Data("patch of \(id) not used, downloaded whole: \(reason)\n".utf8))
        }
        for (id, reason) in report.failed.sorted(by: { $0.key < $1.key }) {
            FileHandle.standardError.write(Data("failed: \(id): \(reason)\n".utf8))
        }
        if self.report, let deviceReport = report.deviceReport {
            var reporter = DeviceReporter(server: origin.url, app: configuration.app)
            reporter.headers = credentials.headers
            reporter.transport = origin.connection.options
            do {
                let status = try await reporter.send(deviceReport)
                FileHandle.standardError.write(Data((status == 202 ? "reported \(deviceReport.packs.count) packs\n" : "report not counted: HTTP \(status)\n").utf8))
            } catch {
                FileHandle.standardError.write(Data("report not sent: \(error)\n".utf8))
            }
        }
        let on = channel.channel == "production" ? "" : " (\(channel.channel))"
        print("synced \(origin.app)\(on) \(report.summary)")
        if !report.failed.isEmpty { throw ExitCode(1) }
    }

    /// The client configuration at `path`, or a one-line error saying what the file is instead.
    static func loadConfiguration(_ path: String) throws -> ClientConfiguration {
        let bytes = try FileSystem.readFile(path, limit: 1 << 20)
        do {
            return try ClientConfiguration.decode(bytes)
        } catch {
            throw CLIError("\(path) is not a client configuration: expected the JSON that `depot keys export` prints (app, manifestPublicKeys, packKeys); found \(describe(bytes))")
        }
    }

    /// What a file holds, in a few words.
    static func describe(_ bytes: [UInt8]) -> String {
        guard let value = try? JSONSerialization.jsonObject(with: Data(bytes)) else { return "\(bytes.count) bytes that are not JSON" }
        if let object = value as? [String: Any] {
            if object["payloadType"] != nil && object["signatures"] != nil { return "a signed manifest envelope (payloadType, payload, signatures)" }
            let keys = object.keys.sorted()
            return "a JSON object with \(keys.isEmpty ? "no keys" : "keys " + keys.prefix(8).joined(separator: ", ") + (keys.count > 8 ? ", …" : ""))"
        }
        return value is [Any] ? "a JSON array" : "a JSON value that is not an object"
    }
}
