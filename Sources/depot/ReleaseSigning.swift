import ArgumentParser
import DepotClient
import DepotCore
import Foundation

/// `--sign KEYFILE…` (with `--config FILE` and the signer's pack files) and `--statement FILE`,
/// for the commands that move a protected channel (`depot channels promote`, `depot rollout
/// start`): sign the release for the channel once its packs are checked (or take a statement
/// signed elsewhere), upload it, then act.
struct StatementOptions: ParsableArguments {
    @Option(name: .customLong("sign"), help: ArgumentHelp("A release key file (depot root keygen): check the release, sign it for the channel and upload the statement first (repeat for k of n). Needs --config and your pack files (--packs).", valueName: "key-file"))
    var sign: [String] = []
    @Option(help: ArgumentHelp("A release statement (depot release sign) to upload first.", valueName: "file")) var statement: String?
    @Option(help: ArgumentHelp("With --sign, required: your exported client configuration (depot keys export), which pins the root and holds the pack keys the release is checked with.", valueName: "config.json"))
    var config: String?
    @OptionGroup var files: PackFilesOptions
    @OptionGroup var trust: SignerTrustOptions
    @OptionGroup var credentials: CredentialsOption

    func validate() throws {
        guard (trust.roots.isEmpty && trust.record == nil && trust.confirmRelease == nil) || !sign.isEmpty else {
            throw ValidationError("--root, --record and --confirm-release go with --sign")
        }
        guard sign.isEmpty || statement == nil else { throw ValidationError("--sign and --statement exclude each other") }
        guard sign.isEmpty || config != nil else { throw ValidationError(ReleaseSigning.configRequired) }
        guard config == nil || !sign.isEmpty else { throw ValidationError("--config goes with --sign") }
        guard files.isEmpty || !sign.isEmpty else { throw ValidationError("--packs and --pack-file go with --sign") }
    }

    /// Signs (with `--sign`, once every pack is checked) or reads (`--statement`) the statement of
    /// `release` for `channel`, and uploads it; does nothing without either.
    func upload(origin: ServerOptions, token: TokenOption, channel: String, release: Int) async throws {
        let envelope: Envelope
        if !sign.isEmpty, let config {
            let keys = try sign.map(OfflineFiles.key)
            let (manifest, root) = try await ReleaseSigning.checked(
                origin: origin, credentials: credentials, channel: channel, release: release, config: config, files: files, trust: trust
            )
            envelope = try ReleaseSigning.statement(manifest, app: origin.app, channel: channel, release: release, keys: keys, addTo: nil)
            try SignerRecord.update(trust.record, app: origin.app, channel: channel, release: release, manifest: manifest, root: root)
        } else if let statement {
            envelope = try OfflineFiles.envelope(statement, what: "a release statement")
            guard let payload = envelope.payloadBytes, let signed = try? ReleaseStatement.decode(payload) else {
                throw CLIError("\(statement) is not a release statement (depot release sign writes them)")
            }
            guard signed.release == release, signed.channel == channel else {
                throw CLIError("\(statement) is release \(signed.release)'s statement for channel \(signed.channel), not release \(release)'s for \(channel)")
            }
        } else {
            return
        }
        let accepted = try await ReleaseSigning.upload(envelope, origin: origin, token: token, channel: channel)
        print("release \(accepted.release) is signed for \(channel) (\(accepted.signers) of \(accepted.threshold) release keys)")
    }
}

/// Release statements: built from the origin's release once the signer has checked every pack
/// (``checked(origin:credentials:channel:release:config:files:)``), signed with the operator's
/// release keys, uploaded to the channel.
enum ReleaseSigning {
    /// What the origin answers a statement upload.
    struct Accepted: Decodable { var release: Int; var channel: String; var signers: Int; var threshold: Int }

    /// Why signing needs the exported configuration.
    static let configRequired = """
        signing needs --config CONFIG.json, the configuration your builds carry (depot keys export): it pins the app's root of trust \
        and holds the pack keys the release's packs are checked with. Without it you would sign what the origin shows you, and an \
        origin taken over shows its own packs
        """

    /// Release `release` as the origin serves it, its envelope verified with the online keys of
    /// the root `pinned` (the chain walked through the roots the envelope carries). That only
    /// says the origin's key signed it: which packs are the signer's is checked pack by pack.
    static func fetch(
        origin: ServerOptions, credentials: CredentialsOption, release: Int, pinned: Envelope, config: String, anchor: TrustedRoot?
    ) async throws -> (Manifest, TrustedRoot) {
        let response = try await origin.transport().get(origin.endpoint("releases/\(release)"), headers: credentials.headers, limit: ManifestSource.sizeLimit)
        guard response.status == 200 else { throw CLIError("reading release \(release) failed: HTTP \(response.status): \(Publish.message(response.body))") }
        if let anchor {
            guard let served = try? Envelope.decode(response.body) else { throw CLIError("release \(release) as the origin serves it is not a signed envelope; nothing was signed") }
            try OfflineRoots.check(served.roots ?? [], extends: anchor, what: "release \(release) as the origin serves it")
        }
        let manifest: Manifest
        var reached: TrustedRoot?
        do {
            manifest = try Envelope.verifiedManifest(envelope: response.body) { attachments in
                let root = try ManifestTrust.newestRoot(pinned: pinned, chain: attachments.roots, record: nil, app: origin.app, now: Date())
                reached = root
                return try root.document.onlinePublicKeys()
            }.manifest
        } catch {
            throw CLIError("release \(release) as the origin serves it does not verify against \(anchor == nil ? config : "your root files (--root)"): \(error); nothing was signed")
        }
        guard manifest.app == origin.app, manifest.version == release else {
            throw CLIError("the origin answered release \(manifest.version) of app \(manifest.app) for release \(release) of \(origin.app)")
        }
        // A version after yours is trusted only from your own file of it: the holder of a retired
        // root key could have made one, and the host could have put it in.
        if let anchor, let reached, reached.document.version > anchor.document.version {
            throw OfflineRoots.beyond(anchor, reached: reached.document.version, what: "release \(release) as the origin serves it")
        }
        return (manifest, reached!)
    }

    /// The statement of `manifest` (release `release`) for `channel`, signed by `keys`; with
    /// `addTo`, that statement with their signatures added (it must bind the same packs).
    static func statement(_ manifest: Manifest, app: String, channel: String, release: Int, keys: [any Ed25519Signer], addTo: Envelope?) throws -> Envelope {
        guard var envelope = addTo else { return try ReleaseStatement(app: app, channel: channel, release: release, signedAt: Date(), manifest: manifest).signed(with: keys) }
        guard let payload = envelope.payloadBytes, let statement = try? ReleaseStatement.decode(payload) else { throw CLIError("--add-to is not a release statement") }
        guard statement.app == app, statement.channel == channel, statement.release == release else {
            throw CLIError("--add-to is release \(statement.release) of app \(statement.app) for channel \(statement.channel), not release \(release) of \(app) for \(channel)")
        }
        guard statement.binds(manifest.packs) else {
            throw CLIError("--add-to binds other packs than release \(release), whose packs you checked: do not sign it; ask who made it")
        }
        guard statement.primaryLanguage == ReleaseStatement.boundLanguage(of: manifest) else {
            if statement.primaryLanguage == nil {
                throw CLIError("--add-to binds no primary language (made by depot 0.1.0), and release \(release) carries \(ReleaseStatement.boundLanguage(of: manifest) ?? "none"), which this depot binds: sign anew without --add-to, and have the other signers add theirs to yours")
            }
            throw CLIError("--add-to binds primary language \(statement.primaryLanguage ?? "none"), and release \(release) carries \(ReleaseStatement.boundLanguage(of: manifest) ?? "none"): do not sign it; ask who made it")
        }
        for key in keys { envelope = try envelope.adding(signatureBy: key) }
        return envelope
    }

    /// Uploads a statement to `channel`.
    static func upload(_ envelope: Envelope, origin: ServerOptions, token: TokenOption, channel: String) async throws -> Accepted {
        let response = try await origin.transport().send(
            method: "POST", to: origin.endpoint("channels/\(channel)/statements"), headers: try token.headers().merging(["Content-Type": "application/json"]) { $1 },
            body: Data(envelope.encoded())
        )
        guard response.status == 201 else { throw CLIError("uploading the statement failed: HTTP \(response.status): \(Publish.message(response.body))") }
        return try JSONDecoder().decode(Accepted.self, from: Data(response.body))
    }
}

extension Release {
    /// `depot release sign`: the statement a person signs for a protected channel.
    struct Sign: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check release N of the origin against your own pack files, then sign it for a protected channel with your release key: writes the release statement.",
            discussion: """
                The statement binds the app, the channel, the release number and each pack's container and plaintext \
                SHA-256 and size. The origin's word is not taken for any of them: release N's envelope is verified against \
                --config (your exported client configuration: it pins the root and holds the pack keys); each pack is either \
                unchanged since the channel's last signed release (its live manifest verified with the root's release keys) \
                or matched by your own file of it (--packs DIR, --pack-file ID=PATH): the file's SHA-256 and size are the \
                release's, and the container the release names, downloaded and decrypted, holds exactly the file. One line \
                per pack says which, before anything is signed; a pack that is neither refuses the whole release. A second \
                signer checks the same way and adds their signature with --add-to. Upload the statement with depot channels \
                promote|rollout start --statement.
                """
        )
        @OptionGroup var origin: ServerOptions
        @OptionGroup var credentials: CredentialsOption
        @OptionGroup var channel: ChannelOption
        @Option(help: "The release to sign.") var release: Int
        @Option(name: .customLong("key"), help: ArgumentHelp("A release key file (repeat for several signers at once).", valueName: "file")) var keys: [String] = []
        @Option(name: .customLong("add-to"), help: ArgumentHelp("A statement another signer made: add your signature to it.", valueName: "file")) var addTo: String?
        @Option(help: ArgumentHelp("Required: your exported client configuration (depot keys export), which pins the root and holds the pack keys the release is checked with.", valueName: "config.json"))
        var config: String?
        @OptionGroup var files: PackFilesOptions
        @OptionGroup var trust: SignerTrustOptions
        @Option(help: ArgumentHelp("Where to write the statement.", valueName: "file")) var out: String

        func validate() throws {
            guard release > 0 else { throw ValidationError("--release must be a release number") }
            guard !keys.isEmpty else { throw ValidationError("give your release key file: --key RELEASE-KEY.json") }
            guard config != nil else { throw ValidationError(ReleaseSigning.configRequired) }
        }

        func run() async throws {
            let signers = try keys.map(OfflineFiles.key)
            let addTo = try addTo.map { try OfflineFiles.envelope($0, what: "a release statement") }
            let (manifest, root) = try await ReleaseSigning.checked(
                origin: origin, credentials: credentials, channel: channel.channel, release: release, config: config!, files: files, trust: trust
            )
            let envelope = try ReleaseSigning.statement(manifest, app: origin.app, channel: channel.channel, release: release, keys: signers, addTo: addTo)
            try OfflineFiles.write(envelope, to: out)
            try SignerRecord.update(trust.record, app: origin.app, channel: channel.channel, release: release, manifest: manifest, root: root)
            let (count, packs) = (envelope.signatures.count, manifest.packs.count)
            print("wrote \(out): release \(release) of \(origin.app) for channel \(channel.channel), \(count) signature\(count == 1 ? "" : "s"), binding the \(packs) pack\(packs == 1 ? "" : "s") above")
            print("upload it: depot channels promote --server \(origin.server) --app \(origin.app) --channel \(channel.channel) --release \(release) --statement \(out)")
        }
    }
}
