import ArgumentParser
import DepotClient
import DepotCore
import Foundation

struct Publish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Upload a file as a pack; the origin encrypts it on the way in.",
        discussion: """
            The upload is resumable (tus 1.0): a dropped connection is picked up where it stopped, and a run \
            that was interrupted (Ctrl-C, a crash, a lost network) continues when the same command runs again, \
            for as long as the origin keeps the upload (24 hours by default). The file's SHA-256 is sent along \
            and checked by the origin after encryption, end to end. Progress goes to stderr: a bar on a \
            terminal, a line per tenth otherwise.
            """
    )

    @Argument(help: "The file to publish.") var file: String
    @OptionGroup var origin: ServerOptions
    @Option(help: "The pack id (1–64 of A-Z a-z 0-9 . -; no '_'); with --pack-manifest, its assetPackID by default.") var pack: String?
    @OptionGroup var token: TokenOption
    @OptionGroup var trusted: OIDCOptions
    @Option(help: "essential, prefetch or onDemand.") var policy: String = "prefetch"
    @Option(help: "A tag (repeatable).") var tag: [String] = []
    @Option(name: .customLong("content-type"), help: "The plaintext's media type; application/zip packs are installed unpacked.")
    var contentType: String = "application/octet-stream"
    @Flag(help: "Publish the staged changes at once as the next release; without it the upload is only staged (see `depot release`).")
    var release = false
    @Option(help: "With --release: the release you expect the channel to serve; another publish first makes this one fail with 409.") var base: Int?
    @Flag(help: "With --release: publish even if the release exceeds the allowances recorded for shipped builds.") var force = false
    @OptionGroup var channel: ChannelOption
    @Option(name: .customLong("verify-edge"), help: "With --release: once the edge at this URL serves the new release, check it as `depot verify-edge` does (exits 1 on a problem).")
    var verifyEdge: String?
    @Option(name: .customLong("verify-config"), help: "With --verify-edge: the client configuration (`depot keys export`), to check the manifest's signature.")
    var verifyConfig: String?
    @Flag(help: "Print no progress.") var quiet = false
    @Option(name: .customLong("pack-manifest"), help: "Managed apps: the Manifest.json given to ba-package; its assetPackID, downloadPolicy and userInfo are the pack's.")
    var packManifest: String?
    @Option(name: .customLong("install-size"), help: "Managed apps: the bytes a compressed Apple Archive unpacks to (an uncompressed one is measured by the origin).")
    var installSize: Int64?
    @Option(help: "iOS 27+: the language the pack is localized for (en, fr-CA, zh-Hant); its id ends with it (voice-fr-CA), and a device takes one language of each such group.")
    var language: String?

    func validate() throws {
        guard pack != nil || packManifest != nil else { throw ValidationError("name the pack: --pack ID, or --pack-manifest Manifest.json") }
        if let pack, !Identifier.isValidPack(pack) { throw ValidationError("invalid pack id \"\(pack)\": 1–64 of A-Z a-z 0-9 . -, no '_'") }
        guard Identifier.isValidApp(origin.app) else { throw ValidationError("invalid app id \"\(origin.app)\"") }
        guard PackEntry.Policy(rawValue: policy) != nil else { throw ValidationError("--policy must be essential, prefetch or onDemand") }
        guard tag.allSatisfy({ !$0.contains(",") && !$0.isEmpty }) else { throw ValidationError("a --tag is not empty and has no comma") }
        if let language {
            guard let tag = LanguageTag(language) else { throw ValidationError("--language takes an ISO 639 code with, optionally, a script and a region (en, fr-CA, zh-Hant)") }
            if let pack, PackEntry.group(of: pack, language: tag) == nil {
                throw ValidationError("a localized pack's id ends with -\(tag) (voice-\(tag)): the part before names its group; \(pack) does not")
            }
        }
        if trusted.oidc && token.token != nil { throw ValidationError("--oidc and --token exclude each other") }
        if !trusted.oidc && (trusted.audience != nil || trusted.tokenVariable != nil) { throw ValidationError("--audience and --oidc-token-env go with --oidc") }
        if let verifyEdge {
            guard release else { throw ValidationError("--verify-edge checks a release: give --release") }
            guard let url = URL(string: verifyEdge), url.scheme == "http" || url.scheme == "https" else { throw ValidationError("--verify-edge takes the edge's URL") }
        }
    }

    func run() async throws {
        let bearer: Substring
        if trusted.oidc {
            bearer = try await trusted.publishToken(server: origin.url, app: origin.app, transport: origin.transport())[...]
        } else {
            guard let given = try token.headers()["Authorization"]?.dropFirst("Bearer ".count) else { throw CLIError("no token") }
            bearer = given
        }
        guard FileSystem.exists(file), !FileSystem.isDirectory(file) else { throw CLIError("\(file): no such file") }
        // The file is not read before the upload: its SHA-256 is computed while it is sent.
        let (size, modified) = try FileDescriptor.openForReading(file).sizeAndModification()
        let described = try packManifest.map(PackManifest.read)
        guard let packID = pack ?? described?.assetPackID, Identifier.isValidPack(packID) else {
            throw CLIError("\(packManifest ?? ""): assetPackID is not a valid pack id (1–64 of A-Z a-z 0-9 . -); give --pack")
        }
        var options = ResumableUploader.Options(pack: packID)
        options.policy = described?.policy ?? policy
        options.installationEventTypes = described?.installationEventTypes
        options.userInfo = described?.userInfo
        options.installSize = installSize
        options.language = language.flatMap(LanguageTag.init)?.description
        options.tags = tag
        options.contentType = contentType
        options.release = release
        options.base = base
        options.force = force
        options.channel = channel.channel == "production" ? nil : channel.channel

        // Where an interrupted run left its upload URL, keyed by everything that defines the upload
        // (the file by size and modification time: content changed behind those fails the
        // origin's end-to-end check, and the next run starts over).
        let identity = "\(size) \(modified.timeIntervalSince1970)"
        let key = Hex.encode(SHA256Hasher.hash(Array("\(origin.server)\n\(origin.app)\n\(packID)\n\(file)\n\(identity)\n\(options.metadata)".utf8)).prefix(16))
        let record = Self.cacheFolder + "/" + key
        let resume = (try? FileSystem.readFile(record, limit: 4096)).flatMap { URL(string: String(decoding: $0, as: UTF8.self)) }
        if resume != nil && !quiet { FileHandle.standardError.write(Data("resuming the upload of \(packID) left by an earlier run\n".utf8)) }

        let progress = ProgressReporter(label: "uploading \(packID)")
        let quiet = quiet
        let body: [UInt8]
        do {
            var uploader = ResumableUploader(server: origin.url, app: origin.app, token: String(bearer))
            uploader.transport = origin.connection.options
            // A server behind a proxy that dropped the digest trailer once gets it first from now on.
            let dropsTrailers = Self.cacheFolder + "/drops-trailers-" + Hex.encode(SHA256Hasher.hash(Array(origin.server.utf8)).prefix(8))
            uploader.digestAfterBody = !FileSystem.exists(dropsTrailers)
            body = try await uploader.upload(
                file: file, options: options, resume: resume,
                created: { url in
                    try? FileSystem.createDirectory(Self.cacheFolder, mode: 0o700)
                    try? FileSystem.writeAtomically(Array(url.absoluteString.utf8), to: record, mode: 0o600)
                },
                progress: { done, total in if !quiet { progress.update(done, of: total) } },
                trailersDropped: {
                    try? FileSystem.createDirectory(Self.cacheFolder, mode: 0o700)
                    try? FileSystem.writeAtomically([], to: dropsTrailers, mode: 0o600)
                }
            )
            progress.finish()
        } catch {
            progress.finish()
            // The upload stays resumable after a network failure, a cancel, or an origin that asks
            // to try again later (its object store down): the next run picks it up.
            if let error = error as? ClientError, error.kind != .transport, error.kind != .cancelled,
               !(error.status.map(RetryPolicy.isRetryable(status:)) ?? false) {
                FileSystem.remove(record)
            }
            throw CLIError("publish failed: \(error)")
        }
        FileSystem.remove(record)
        struct Status: Decodable { var result: Result }
        let result = try JSONDecoder().decode(Status.self, from: Data(body)).result
        let pack = result.pack
        let on = result.channel.map { $0 == "production" ? "" : " on channel \($0)" } ?? ""
        if result.staged {
            print("staged \(pack?.id ?? options.pack) (\(pack?.size ?? 0) bytes) for the next release of \(result.app); publish it with `depot release`")
        } else if result.changed, let pack, let release = result.release {
            print("published \(pack.id) revision \(pack.revision) (\(pack.size) bytes, sha256 \(pack.sha256)) in release \(release) of \(result.app)\(on)")
            if let verifyEdge { try await checkEdge(verifyEdge, release: release) }
        } else {
            print("unchanged: \(options.pack) already has this content in release \(result.release ?? 0) of \(result.app)\(on)")
        }
    }

    /// Waits (at most two minutes: an edge caches the manifest for its max-age) until the edge
    /// serves `release` or later on the channel, then checks it as `depot verify-edge` does.
    func checkEdge(_ edge: String, release: Int) async throws {
        let server = URL(string: edge)!
        let transport = HTTPTransport(timeout: 120, options: origin.connection.options)
        let manifestURL = ManifestSource.url(server: server, app: origin.app, channel: channel.channel)
        let start = Date()
        while true {
            let answer = try? await transport.get(manifestURL, limit: Int(ManifestSource.sizeLimit))
            let served = answer.flatMap { answer in answer.status == 200 ? try? Envelope.decode(answer.body) : nil }
                .flatMap { Data(base64Encoded: $0.payload) }.flatMap { try? Manifest.decode(Array($0)) }?.version
            if let served, served >= release { break }
            if Date().timeIntervalSince(start) > 120 {
                throw CLIError("the edge \(edge) still serves \(served.map { "release \($0)" } ?? "no manifest") on channel \(channel.channel) two minutes after release \(release)")
            }
            try await Task.sleep(for: .seconds(1))
        }
        let configuration = try verifyConfig.map { try ClientConfiguration.decode(FileSystem.readFile($0, limit: 1 << 20)) }
        let verifier = EdgeVerifier(server: server, app: origin.app, transport: transport, headers: [:], configuration: configuration,
                                    sample: nil, rules: nil, allowHTTP: server.scheme == "http")
        if try VerifyEdge.print(await verifier.run(channels: [channel.channel]), server: edge) > 0 { throw ExitCode(1) }
    }

    /// `$XDG_CACHE_HOME/assetdepot/uploads` (or `~/.cache/…`): upload URLs of interrupted runs.
    static var cacheFolder: String {
        let base = Environment.string("XDG_CACHE_HOME") ?? (NSHomeDirectory() + "/.cache")
        return base + "/assetdepot/uploads"
    }

    struct Result: Decodable {
        var app: String
        var pack: PackEntry?
        var release: Int?
        var staged: Bool
        var changed: Bool
        var channel: String?
    }

    static func message(_ body: [UInt8]) -> String { ResumableUploader.message(body) }
}

/// The pack manifest `ba-package` reads (`Manifest.json`): the parts the origin needs.
struct PackManifest {
    var assetPackID: String
    var policy: String
    var installationEventTypes: [String]?
    /// The `userInfo` object as JSON, when there is one.
    var userInfo: String?

    static func read(_ path: String) throws -> PackManifest {
        let bytes = try FileSystem.readFile(path, limit: 1 << 20)
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any] else {
            throw CLIError("\(path) is not a JSON object (the Manifest.json given to ba-package)")
        }
        guard let id = object["assetPackID"] as? String else { throw CLIError("\(path) has no assetPackID") }
        guard let policies = object["downloadPolicy"] as? [String: Any], policies.count == 1, let (policy, detail) = policies.first,
              PackEntry.Policy(rawValue: policy) != nil else {
            throw CLIError("\(path): downloadPolicy must have one key, essential, prefetch or onDemand")
        }
        let events = (detail as? [String: Any])?["installationEventTypes"] as? [String]
        if policy != "onDemand" && (events ?? []).isEmpty {
            throw CLIError("\(path): an \(policy) downloadPolicy lists its installationEventTypes")
        }
        var userInfo: String?
        if let info = object["userInfo"] {
            guard info is [String: Any] else { throw CLIError("\(path): userInfo must be an object") }
            userInfo = String(decoding: try JSONSerialization.data(withJSONObject: info, options: [.sortedKeys]), as: UTF8.self)
        }
        return PackManifest(assetPackID: id, policy: policy, installationEventTypes: policy == "onDemand" ? nil : events, userInfo: userInfo)
    }
}
