import ArgumentParser
import DepotCore
import Foundation

extension Root {
    /// `depot root sign`: writes the app's next root document, signed, on the machine that holds
    /// the root keys. Whatever is not given is kept from `--previous`.
    struct Sign: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Sign an app's root document (version 1, or the next after --previous), offline.",
            discussion: """
                Whatever is not given is kept from --previous. Version 1: the root keys are the --key files' unless \
                --root-public-key names others; production is protected unless --protect or --no-protect says otherwise. \
                A rotation (new --root-public-key) is signed by the previous root keys and the new ones, each at its \
                threshold. The document is written only once it verifies (with --partial, one that lacks signatures is \
                written for the next key holder, who adds theirs with --add-to). Then, on the origin host: depot root add.
                """
        )
        @Option(help: "The app.") var app: String
        @Option(name: .customLong("key"), help: ArgumentHelp("A root key file that signs (repeat: a rotation signs with old and new root keys).", valueName: "file"))
        var keys: [String] = []
        @Option(help: ArgumentHelp("The app's current root document: this one is its next version.", valueName: "file")) var previous: String?
        @Option(name: .customLong("online-key"), help: ArgumentHelp("A manifest signing key the origin may sign with (base64; repeat).", valueName: "base64"))
        var onlineKeys: [String] = []
        @Option(name: .customLong("online-keys-from"), help: ArgumentHelp("Take the online keys from a client configuration (depot keys export).", valueName: "config.json"))
        var onlineKeysFrom: String?
        @Option(name: .customLong("release-key"), help: ArgumentHelp("A key that signs protected channels' releases (base64; repeat).", valueName: "base64"))
        var releaseKeys: [String] = []
        @Option(name: .customLong("release-threshold"), help: "How many release keys must sign a release (default: the previous root's, else 1).") var releaseThreshold: Int?
        @Option(name: .customLong("root-public-key"), help: ArgumentHelp("The next root keys (base64; repeat): a rotation of the root keys.", valueName: "base64"))
        var rootPublicKeys: [String] = []
        @Option(name: .customLong("root-threshold"), help: "How many root keys must sign the next version (default: the previous root's, else 1).") var rootThreshold: Int?
        @Option(help: ArgumentHelp("A channel whose devices require signed releases (repeat; default: the previous root's, else production).", valueName: "channel"))
        var protect: [String] = []
        @Flag(name: .customLong("no-protect"), help: "Protect no channel.") var noProtect = false
        @Option(name: .customLong("expires-days"), help: "Days until the root expires (devices then refuse new manifests until the next version).") var expiresDays: Int = 365
        @Option(name: .customLong("add-to"), help: ArgumentHelp("Add the --key files' signatures to this partly signed document instead.", valueName: "file"))
        var addTo: String?
        @Flag(help: "Write the document even if it lacks signatures (for the next key holder's --add-to).") var partial = false
        @Option(help: ArgumentHelp("Where to write the signed document.", valueName: "file")) var out: String

        func validate() throws {
            guard Identifier.isValidApp(app) else { throw ValidationError("invalid app id \"\(app)\"") }
            guard !keys.isEmpty else { throw ValidationError("give the root key files that sign: --key ROOT-KEY.json") }
            guard (1...3650).contains(expiresDays) else { throw ValidationError("--expires-days is 1 to 3650") }
            guard !(noProtect && !protect.isEmpty) else { throw ValidationError("--protect and --no-protect exclude each other") }
            guard onlineKeys.isEmpty || onlineKeysFrom == nil else { throw ValidationError("--online-key and --online-keys-from exclude each other") }
            for channel in protect where !Identifier.isValidChannel(channel) { throw ValidationError("--protect \(channel) is not a channel name") }
            if addTo != nil {
                let given = !onlineKeys.isEmpty || onlineKeysFrom != nil || !releaseKeys.isEmpty || releaseThreshold != nil || !rootPublicKeys.isEmpty
                    || rootThreshold != nil || !protect.isEmpty || noProtect
                guard !given else { throw ValidationError("--add-to only adds signatures: give --key (and --previous for a version above 1), not the document's contents") }
            }
        }

        func run() throws {
            let signers = try keys.map(OfflineFiles.key)
            let before = try previous.map { path -> TrustedRoot in
                let trusted: TrustedRoot
                do { trusted = try RootChain.selfSigned(try OfflineFiles.envelope(path, what: "a root document"), app: app) } catch let error as TrustError {
                    throw CLIError("--previous \(path): \(error)")
                }
                // Only a document your own root keys signed continues your chain: one taken from
                // the origin could list a key an attacker added, which the next version would inherit.
                let own = try trusted.document.rootPublicKeys().filter { key in signers.contains { $0.publicKey == key } }
                // (A partial document is checked when a holder of the previous keys completes it.)
                guard partial || trusted.envelope.validSigners(among: own) >= 1 else {
                    throw CLIError("--previous \(path) is not signed by any of the --key files given: pass the root version you (or your co-holders) signed, kept offline with the root keys (not a copy from the origin)")
                }
                return trusted
            }
            var envelope: Envelope
            if let addTo {
                envelope = try OfflineFiles.envelope(addTo, what: "a root document")
                for key in signers { envelope = try envelope.adding(signatureBy: key) }
            } else {
                envelope = try document(before: before?.document, signers: signers).signed(with: signers)
            }
            guard let payload = envelope.payloadBytes, let document = try? RootDocument.decode(payload), document.app == app else {
                throw CLIError("\(addTo ?? "the document") is not a root document of app \(app)")
            }
            if let before, document.version != before.document.version + 1 {
                throw CLIError("the document is root version \(document.version), not the one after --previous (version \(before.document.version))")
            }
            do {
                _ = try before.map { try RootChain.next(envelope, after: $0) } ?? RootChain.selfSigned(envelope, app: app)
            } catch {
                guard partial else {
                    throw CLIError("not written: \(error). Sign with more root keys (--key), or write it for the next key holder with --partial")
                }
                try OfflineFiles.write(envelope, to: out)
                print("wrote \(out): root version \(document.version) of \(app), not yet trusted: \(error)")
                print("next key holder: depot root sign --app \(app) --add-to \(out) --key THEIR-KEY.json\(previous.map { " --previous \($0)" } ?? "") --out \(out)")
                return
            }
            try OfflineFiles.write(envelope, to: out)
            print("wrote \(out): root version \(document.version) of \(app), expires \(ISO8601DateFormatter().string(from: document.expiresAt))")
            print("root keys \(document.rootThreshold) of \(document.rootKeys.count); online keys: \(try document.onlinePublicKeys().map(ManifestSigningKey.keyID).joined(separator: ", ")); release keys \(document.releaseThreshold) of \(document.releaseKeys.count); protected: \(document.protectedChannels.isEmpty ? "none" : document.protectedChannels.joined(separator: ", "))")
            print("next, on the origin host: depot root add --data DIR --app \(app) \(out)")
        }

        /// The next document: what is given, else what `before` says, else version 1's defaults.
        private func document(before: RootDocument?, signers: [any Ed25519Signer]) throws -> RootDocument {
            let rootKeys = rootPublicKeys.isEmpty ? try before?.rootPublicKeys() ?? signers.map(\.publicKey) : try rootPublicKeys.map { try OfflineFiles.publicKey($0, option: "--root-public-key") }
            let online: [Ed25519PublicKey]
            if let onlineKeysFrom {
                online = try Sync.loadConfiguration(onlineKeysFrom).trustedKeys()
            } else if !onlineKeys.isEmpty {
                online = try onlineKeys.map { try OfflineFiles.publicKey($0, option: "--online-key") }
            } else if let before {
                online = try before.onlinePublicKeys()
            } else {
                throw CLIError("name the origin's manifest signing keys: --online-keys-from CONFIG.json (what `depot keys export --app \(app)` prints) or --online-key BASE64")
            }
            let release = releaseKeys.isEmpty ? try before?.releasePublicKeys() ?? [] : try releaseKeys.map { try OfflineFiles.publicKey($0, option: "--release-key") }
            let protected = noProtect ? [] : !protect.isEmpty ? protect : before?.protectedChannels ?? [ReleaseChannels.production]
            if !protected.isEmpty && release.isEmpty {
                throw CLIError("protecting \(protected.joined(separator: ", ")) needs release keys: --release-key BASE64 (depot root keygen --out release-1.json prints one), or --no-protect")
            }
            let keptThreshold = { (threshold: Int?, count: Int) in threshold.flatMap { $0 <= count ? $0 : nil } }
            let document = RootDocument(
                app: app, version: (before?.version ?? 0) + 1, expiresAt: Date().addingTimeInterval(TimeInterval(expiresDays) * 86_400),
                rootKeys: rootKeys, rootThreshold: rootThreshold ?? keptThreshold(before?.rootThreshold, rootKeys.count) ?? 1,
                onlineKeys: online, releaseKeys: release,
                releaseThreshold: releaseThreshold ?? keptThreshold(before?.releaseThreshold, release.count) ?? (release.isEmpty ? 0 : 1),
                protectedChannels: protected
            )
            if let problem = document.problem { throw CLIError("root version \(document.version): \(problem)") }
            return document
        }
    }
}

/// Channel names the commands default to.
enum ReleaseChannels {
    static let production = "production"
}
