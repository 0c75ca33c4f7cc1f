import ArgumentParser
import DepotClient
import DepotCore
import Foundation

/// `--sign KEYFILE…`, `--statement FILE` and `--config FILE`, for the commands that move a
/// protected channel (`depot channels promote`, `depot rollout start`): sign the release for the
/// channel (or take a statement signed elsewhere), upload it, then act.
struct StatementOptions: ParsableArguments {
    @Option(name: .customLong("sign"), help: ArgumentHelp("A release key file (depot root keygen): sign the release for the channel and upload the statement first (repeat for k of n).", valueName: "key-file"))
    var sign: [String] = []
    @Option(help: ArgumentHelp("A release statement (depot release sign) to upload first.", valueName: "file")) var statement: String?
    @Option(help: ArgumentHelp("With --sign: your exported client configuration (depot keys export); the release is checked against it before you sign.", valueName: "config.json"))
    var config: String?
    @OptionGroup var credentials: CredentialsOption

    func validate() throws {
        guard sign.isEmpty || statement == nil else { throw ValidationError("--sign and --statement exclude each other") }
        guard config == nil || !sign.isEmpty else { throw ValidationError("--config goes with --sign") }
    }

    /// Signs (with `--sign`) or reads (`--statement`) the statement of `release` for `channel`,
    /// and uploads it; does nothing without either.
    func upload(origin: ServerOptions, token: TokenOption, channel: String, release: Int) async throws {
        let envelope: Envelope
        if !sign.isEmpty {
            let keys = try sign.map(OfflineFiles.key)
            let manifest = try await ReleaseSigning.fetch(origin: origin, credentials: credentials, release: release, config: config)
            envelope = try ReleaseSigning.statement(manifest, app: origin.app, channel: channel, release: release, keys: keys, addTo: nil)
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

/// Release statements: built from the origin's release, signed with the operator's release keys,
/// uploaded to the channel.
enum ReleaseSigning {
    /// What the origin answers a statement upload.
    struct Accepted: Decodable { var release: Int; var channel: String; var signers: Int; var threshold: Int }

    /// Release `release` as the origin serves it, its signature checked against the operator's
    /// client configuration when given (a compromised origin cannot show the signer other packs
    /// than those its devices would accept).
    static func fetch(origin: ServerOptions, credentials: CredentialsOption, release: Int, config: String?) async throws -> Manifest {
        let response = try await origin.transport().get(origin.endpoint("releases/\(release)"), headers: credentials.headers, limit: ManifestSource.sizeLimit)
        guard response.status == 200 else { throw CLIError("reading release \(release) failed: HTTP \(response.status): \(Publish.message(response.body))") }
        let manifest: Manifest
        if let config {
            let configuration = try Sync.loadConfiguration(config)
            guard configuration.app == origin.app else { throw CLIError("\(config) is for app \(configuration.app), not \(origin.app)") }
            do {
                manifest = try Envelope.verifiedManifest(envelope: response.body) { attachments in
                    guard let pinned = try configuration.pinnedRoot() else { return try configuration.trustedKeys() }
                    return try ManifestTrust.newestRoot(pinned: pinned, chain: attachments.roots, record: nil, app: origin.app, now: Date()).document.onlinePublicKeys()
                }.manifest
            } catch {
                throw CLIError("release \(release) as the origin serves it does not verify against \(config): \(error); nothing was signed")
            }
        } else {
            guard let payload = try? Envelope.decode(response.body).payloadBytes, let decoded = try? Manifest.decode(payload) else {
                throw CLIError("release \(release) as the origin serves it is not a manifest envelope")
            }
            FileHandle.standardError.write(Data("note: release \(release) was not checked against your configuration (--config CONFIG.json): you sign what this origin shows you\n".utf8))
            manifest = decoded
        }
        guard manifest.app == origin.app, manifest.version == release else {
            throw CLIError("the origin answered release \(manifest.version) of app \(manifest.app) for release \(release) of \(origin.app)")
        }
        return manifest
    }

    /// The statement of `manifest` (release `release`) for `channel`, signed by `keys`; with
    /// `addTo`, that statement with their signatures added (it must bind the same packs).
    static func statement(_ manifest: Manifest, app: String, channel: String, release: Int, keys: [Ed25519PrivateKey], addTo: Envelope?) throws -> Envelope {
        guard var envelope = addTo else { return try ReleaseStatement(app: app, channel: channel, release: release, signedAt: Date(), packs: manifest.packs).signed(with: keys) }
        guard let payload = envelope.payloadBytes, let statement = try? ReleaseStatement.decode(payload) else { throw CLIError("--add-to is not a release statement") }
        guard statement.app == app, statement.channel == channel, statement.release == release else {
            throw CLIError("--add-to is release \(statement.release) of app \(statement.app) for channel \(statement.channel), not release \(release) of \(app) for \(channel)")
        }
        guard statement.binds(manifest.packs) else {
            throw CLIError("--add-to binds other packs than release \(release) as the origin serves it: do not sign it; ask who made it")
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

    /// The lines that say what a statement binds.
    static func describe(_ manifest: Manifest) -> [String] {
        let packs = ReleaseStatement.bound(manifest.packs)
        return packs.prefix(50).map { pack in
            "  \(pack.id) revision \(pack.revision)\(pack.language.map { " (\($0))" } ?? ""): \(pack.size) bytes, sha256 \(pack.sha256.prefix(16))…, plaintext \(pack.installSize) bytes"
        } + (packs.count > 50 ? ["  … and \(packs.count - 50) more"] : [])
    }
}

extension Release {
    /// `depot release sign`: the statement a person signs for a protected channel.
    struct Sign: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Sign release N of the origin for a protected channel with your release key: writes the release statement.",
            discussion: """
                The statement binds the app, the channel, the release number and each pack's container and plaintext \
                SHA-256 and size, read from the origin's release N (checked against --config, your exported client \
                configuration, so that the origin cannot show you other packs than its devices would accept). A second \
                signer adds their signature with --add-to. Upload it with depot channels promote|rollout start --statement.
                """
        )
        @OptionGroup var origin: ServerOptions
        @OptionGroup var credentials: CredentialsOption
        @OptionGroup var channel: ChannelOption
        @Option(help: "The release to sign.") var release: Int
        @Option(name: .customLong("key"), help: ArgumentHelp("A release key file (repeat for several signers at once).", valueName: "file")) var keys: [String] = []
        @Option(name: .customLong("add-to"), help: ArgumentHelp("A statement another signer made: add your signature to it.", valueName: "file")) var addTo: String?
        @Option(help: ArgumentHelp("Your exported client configuration (depot keys export): the release is checked against it.", valueName: "config.json")) var config: String?
        @Option(help: ArgumentHelp("Where to write the statement.", valueName: "file")) var out: String

        func validate() throws {
            guard release > 0 else { throw ValidationError("--release must be a release number") }
            guard !keys.isEmpty else { throw ValidationError("give your release key file: --key RELEASE-KEY.json") }
        }

        func run() async throws {
            let signers = try keys.map(OfflineFiles.key)
            let manifest = try await ReleaseSigning.fetch(origin: origin, credentials: credentials, release: release, config: config)
            let addTo = try addTo.map { try OfflineFiles.envelope($0, what: "a release statement") }
            let envelope = try ReleaseSigning.statement(manifest, app: origin.app, channel: channel.channel, release: release, keys: signers, addTo: addTo)
            try OfflineFiles.write(envelope, to: out)
            print("wrote \(out): release \(release) of \(origin.app) for channel \(channel.channel), \(envelope.signatures.count) signature\(envelope.signatures.count == 1 ? "" : "s"), binding \(manifest.packs.count) pack\(manifest.packs.count == 1 ? "" : "s"):")
            for line in ReleaseSigning.describe(manifest) { print(line) }
            print("upload it: depot channels promote --server \(origin.server) --app \(origin.app) --channel \(channel.channel) --release \(release) --statement \(out)")
        }
    }
}
