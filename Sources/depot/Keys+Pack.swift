import ArgumentParser
import DepotCore
import DepotServer
import Foundation

/// `depot keys export | rotate | retire`: an app's pack keys through their life (staged, current,
/// retired), and what its builds are given.
extension Keys {
    struct Rotate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Stage the app's next pack key: builds exported from now on carry it; no pack uses it until the current key is retired.",
            discussion: """
                Then: export the configuration (depot keys export) and ship builds with it; watch `depot fleet` until \
                the reports from builds without the staged key are few enough; then `depot keys retire --app APP CURRENT`, \
                which makes the staged key current. Builds in the field keep reading every pack until then.
                """
        )
        @OptionGroup var data: DataOptions
        @Option(help: "The app.") var app: String

        func run() throws {
            let store = AppStore(folder: DataFolder(data.data))
            let keyID = try store.rotatePackKey(app)
            let states = try store.packKeyStates(app)
            print("staged key \(keyID) for \(app): builds exported from now on carry it; no pack uses it yet (new packs use \(states.current), the current key)")
            if states.staged.count > 1 { print("staged keys, the next current first: \(states.staged.joined(separator: ", "))") }
            print("next:")
            print("  1. depot keys export --app \(app) > client.json, and ship builds with it")
            print("  2. watch depot fleet --app \(app): \"key \(keyID) (staged): N of M reports … come from builds without it\"")
            print("  3. when few enough builds lack it: depot keys retire --app \(app) \(states.current)")
        }
    }

    struct Retire: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Retire a pack key: the current one (the oldest staged key becomes current), or drop a staged one.",
            discussion: """
                Retiring the current key with no key staged makes a fresh key current at once, which no build in the field \
                holds (a leaked key): that needs --yes. Either way the command prints how many of the reports of the last 7 \
                days come from builds without the new current key, and how many packs of the live releases stay encrypted \
                under the retired key. A running origin encrypts its next pack with the new current key. Packs already \
                published keep their key: republish them to encrypt them under the current one.
                """
        )
        @OptionGroup var data: DataOptions
        @Option(help: "The app.") var app: String
        @Argument(help: "The key id (`depot keys list` lists the app's keys).") var keyID: String
        @Flag(help: "With no key staged: make a fresh key current at once (builds in the field cannot read packs published from then on).")
        var yes = false

        func run() throws {
            let store = AppStore(folder: DataFolder(data.data))
            let done = try store.retirePackKey(app, keyID: keyID, allowFresh: yes)
            guard !done.wasStaged else {
                print("staged key \(done.keyID) of \(app) dropped: no pack used it, and builds that carry it are unaffected; new packs still use \(done.current)")
                return
            }
            let how = done.fresh ? "a fresh key: no build in the field holds it" : "it was staged"
            print("retired pack key \(done.keyID) of \(app); new packs of \(app) are encrypted with key \(done.current) (\(how))")
            for line in try Self.consequences(store, app: app, retired: done.keyID, current: done.current) { print(line) }
            print("export the configuration again (depot keys export --app \(app)) for the next builds, and back up keys/ again")
        }

        /// What retiring `retired` means, with figures: the reports from builds without `current`,
        /// and the live packs still encrypted under `retired`.
        static func consequences(_ store: AppStore, app: String, retired: String, current: String) throws -> [String] {
            let days = 7
            let figures = store.keyRingTally(app, days: days).figures("pack", key: current)
            let named = figures.with + figures.without
            var lines: [String] = []
            if named > 0 {
                let unnamed = figures.unnamed > 0 ? "; \(Count(figures.unnamed)) more name no key ring" : ""
                lines.append("\(Count(figures.without)) of \(Count(named)) reports in the last \(days) days come from builds without \(current): they cannot read packs published from now on until they update\(unnamed)")
            } else {
                lines.append("no report of the last \(days) days names its key ring (apps that opt in send reports: DeviceReporter, depot sync --report), so how many builds lack \(current) is not known")
            }
            let live = try store.livePackKeys(app)
            let under = live.live[retired]?.count ?? 0
            guard !live.livePacks.isEmpty else { return lines + ["no live release holds a pack: none is encrypted under \(retired)"] }
            lines.append("\(Count(under)) of \(Count(live.livePacks.count)) packs of the live releases stay encrypted under \(retired) (readable by whoever holds it); republishing them encrypts them under \(current)")
            return lines
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the app's pack keys: id, state (current, staged, retired), when retired, live packs under it.",
            discussion: "Tab-separated, one key a line: the current key first, then the staged ones (the next current first), then the retired ones."
        )
        @OptionGroup var data: DataOptions
        @Option(help: "The app.") var app: String

        func run() throws {
            let store = AppStore(folder: DataFolder(data.data))
            let states = try store.packKeyStates(app)
            let live = try store.livePackKeys(app).live
            let formatter = ISO8601DateFormatter()
            for id in [states.current] + states.staged + states.retired {
                let retired = states.retiredAt[id].map(formatter.string(from:)) ?? "-"
                print("\(id)\t\(states.state(of: id)?.rawValue ?? "-")\t\(retired)\t\(live[id]?.count ?? 0) live packs")
            }
        }
    }

    struct Export: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the client configuration JSON to inject into the app: its pack keys, the manifest public keys and, for an app with a root of trust, its newest root.",
            discussion: """
                It carries the current pack key, the staged ones, and the retired ones that a pack of a live release \
                (any channel, any running rollout) or of the draft is still encrypted under. The output is a secret: \
                the pack keys decrypt the app's packs. Write it outside any repository's working copy (or to a path \
                your .gitignore covers), keep it out of logs, and give it to the app's build only.
                """
        )
        @OptionGroup var data: DataOptions
        @Option(help: "The app.") var app: String
        @OptionGroup var rootFiles: RootFilesOption
        @Option(name: .customLong("confirm-release"), help: ArgumentHelp(
            "With --root: a channel's signed release above the Unix time plus a day (one you confirmed when signing it) is exported; give that number.", valueName: "N"
        ))
        var confirmRelease: Int?

        func run() throws {
            let folder = DataFolder(data.data)
            var configuration = try AppStore(folder: folder).clientConfiguration(app)
            let roots = rootFiles.roots
            if !roots.isEmpty {
                // What the build will pin comes from the data folder: it must extend the root you signed.
                let anchor = try OfflineRoots.newest(roots, app: app)
                guard let trust = try RootStore(folder: folder).trust(app) else {
                    throw CLIError("app \(app) has no root in \(data.data): add yours first (depot root add --app \(app) \(roots[0])); nothing was printed")
                }
                try OfflineRoots.check(trust.envelopes, extends: anchor, what: "the data folder's roots/")
                let walked: TrustedRoot
                do {
                    walked = try RootChain.walk(from: anchor, through: trust.envelopes)
                } catch {
                    throw CLIError("the data folder's roots/ do not walk on from your root version \(anchor.document.version): \(error); nothing was printed")
                }
                if walked.document.version > anchor.document.version {
                    throw OfflineRoots.beyond(anchor, reached: walked.document.version, what: "the data folder's roots/")
                }
                // (Compared with the configuration's own root too: the folder's holder could swap it between the two reads.)
                guard walked.payloadSHA256 == trust.newest.payloadSHA256, try configuration.pinnedRoot().flatMap(OfflineRoots.digest) == walked.payloadSHA256 else {
                    throw CLIError("the data folder's newest root (version \(trust.newest.document.version)) is not the one your chain reaches (version \(walked.document.version)); nothing was printed")
                }
                // The build pins your own file of it (its signatures as you made them), and no floor a
                // host could have inflated past what an honest origin issues.
                configuration.root = Data(anchor.kept.encoded()).base64EncodedString()
                for (channel, floor) in configuration.releaseFloors ?? [:] {
                    do {
                        try ReleaseNumbers.check(floor, confirmed: confirmRelease)
                    } catch {
                        throw CLIError("channel \(channel)'s signed release is \(floor): \(error); nothing was printed")
                    }
                }
            }
            FileHandle.standardOutput.write(Data(configuration.encoded()))
        }
    }
}

/// A count as people read it: 4,000.
struct Count: CustomStringConvertible {
    let value: Int64
    init(_ value: Int64) { self.value = value }
    init(_ value: Int) { self.value = Int64(value) }

    var description: String {
        let digits = String(value.magnitude)
        var out = ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { out.append(",") }
            out.append(digit)
        }
        return (value < 0 ? "-" : "") + out
    }
}
