import ArgumentParser
import DepotClient
import DepotCore
import Foundation

struct Releases: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List an app's releases and the channels that serve them.")

    @OptionGroup var origin: ServerOptions
    @OptionGroup var credentials: CredentialsOption

    struct List: Decodable {
        struct Release: Decodable { var version: Int; var publishedAt: String; var packs: Int; var channels: [String]? }
        var releases: [Release]
        /// The path of the older page (the origin pages the list: 100 releases a page).
        var next: String?
    }

    func run() async throws {
        // Every page, newest first, printed oldest first.
        var releases: [List.Release] = []
        var query: [URLQueryItem] = [URLQueryItem(name: "limit", value: "500")]
        while true {
            let response = try await origin.transport().get(origin.endpoint("releases", query), headers: credentials.headers)
            guard response.status == 200 else { throw CLIError("releases failed: HTTP \(response.status): \(Publish.message(response.body))") }
            let page = try JSONDecoder().decode(List.self, from: Data(response.body))
            releases = page.releases + releases
            guard !page.releases.isEmpty, let next = page.next.flatMap({ URLComponents(string: $0)?.queryItems }),
                  let before = next.first(where: { $0.name == "before" }) else { break }
            query = [URLQueryItem(name: "limit", value: "500"), before]
        }
        for release in releases {
            let channels = release.channels ?? []
            print("\(release.version)\t\(release.publishedAt)\t\(release.packs) packs\(channels.isEmpty ? "" : "\t" + channels.joined(separator: ", "))")
        }
        // What a device on an earlier revision downloads for each pack of the live release.
        let live = try await origin.transport().get(origin.endpoint("manifest"), headers: credentials.headers, limit: ManifestSource.sizeLimit)
        guard live.status == 200, let payload = try? Envelope.decode(live.body).payload, let bytes = Data(base64Encoded: payload),
              let manifest = try? Manifest.decode(Array(bytes)) else { return }
        for line in Self.patchLines(manifest) { print(line) }
        for line in Self.languageLines(manifest) { print(line) }
    }

    /// "voice: en, fr, fr-CA, ja (primary en)", per group of localized packs of the live release.
    static func languageLines(_ manifest: Manifest) -> [String] {
        var groups: [String: [String]] = [:]
        for pack in manifest.packs { if let group = pack.languageGroup, let language = pack.language { groups[group, default: []].append(language) } }
        return groups.sorted { $0.key < $1.key }.map { group, languages in
            "\(group): localized in \(languages.sorted().joined(separator: ", ")) (primary language \(manifest.primaryLanguage ?? "not set"))"
        }
    }

    /// "level: from revision 3: 12.4 MiB instead of 1.1 GiB", per pack with patches.
    static func patchLines(_ manifest: Manifest) -> [String] {
        manifest.packs.flatMap { pack in
            (pack.patches ?? []).sorted { $0.fromRevision > $1.fromRevision }.map { patch in
                "\(pack.id) revision \(pack.revision): from revision \(patch.fromRevision): \(Self.size(patch.size)) instead of \(Self.size(pack.size))"
            }
        }
    }

    static func size(_ bytes: Int64) -> String {
        let units = ["bytes", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 { value /= 1024; unit += 1 }
        return unit == 0 ? "\(bytes) bytes" : String(format: "%.1f", value) + " " + units[unit]
    }
}

struct Rollback: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Publish a new release with the content of an older one (versions only go up).",
        discussion: "Needs an admin token. Packs the older release did not have are removed, so devices delete them; the command lists them."
    )

    @OptionGroup var origin: ServerOptions
    @OptionGroup var token: TokenOption
    @Option(help: "The release whose content to restore.") var to: Int
    @OptionGroup var channel: ChannelOption
    @Flag(help: "Roll back even if the result exceeds the allowances recorded for shipped builds.") var force = false
    @Flag(help: "Managed apps: roll back even if packs leave the download manifest (devices delete them for good).") var remove = false
    @Flag(help: "Put back packs encrypted under a retired pack key that no live release uses (refused otherwise, 409 retired_pack_key: builds exported meanwhile do not hold it). Only when every build in the field holds the key.") var acceptRetiredKeys = false

    func validate() throws {
        guard to > 0 else { throw ValidationError("--to must be a release number") }
    }

    struct Result: Decodable { var release: Int; var rolledBackTo: Int; var changed: Bool; var removed: [String] }

    func run() async throws {
        let query = [URLQueryItem(name: "to", value: String(to))] + (force ? [URLQueryItem(name: "force", value: "true")] : [])
            + (remove ? [URLQueryItem(name: "removeLive", value: "true")] : [])
            + (acceptRetiredKeys ? [URLQueryItem(name: "acceptRetiredKeys", value: "true")] : []) + channel.query
        let response = try await origin.transport().send(method: "POST", to: origin.endpoint("rollback", query), headers: try token.headers(admin: true))
        guard (200..<300).contains(response.status) else { throw CLIError("rollback failed: HTTP \(response.status): \(Publish.message(response.body))") }
        let result = try JSONDecoder().decode(Result.self, from: Data(response.body))
        print(result.changed ? "release \(result.release) restores the content of release \(result.rolledBackTo)" : "release \(result.release) already has the content of release \(result.rolledBackTo)")
        if !result.removed.isEmpty { print("removed (devices will delete them): \(result.removed.joined(separator: ", "))") }
    }
}

struct Release: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Publish the staged changes as the next signed release (the default), or sign a release for a protected channel (depot release sign).",
        subcommands: [Staged.self, Sign.self],
        defaultSubcommand: Staged.self
    )

    struct Staged: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "publish",
            abstract: "Publish the staged changes as the next signed release, in one atomic switch (what `depot release` does).",
            discussion: "With --base, the release is refused (409, nothing published) if another publish made a newer release first. A channel the app's root protects takes no unsigned release (409 release_signature_required): publish on another channel, then sign and promote."
        )

        @OptionGroup var origin: ServerOptions
        @OptionGroup var token: TokenOption
        @Option(help: "The release you expect the channel to serve now.") var base: Int?
        @OptionGroup var channel: ChannelOption
        @Flag(help: "Publish even if the release exceeds the allowances recorded for shipped builds.") var force = false

        struct Result: Decodable { var release: Int?; var changed: Bool }

        func run() async throws {
            let query = (base.map { [URLQueryItem(name: "base", value: String($0))] } ?? []) + (force ? [URLQueryItem(name: "force", value: "true")] : [])
                + channel.query
            let response = try await origin.transport().send(method: "POST", to: origin.endpoint("releases", query), headers: try token.headers())
            guard (200..<300).contains(response.status) else { throw CLIError("release failed: HTTP \(response.status): \(Publish.message(response.body))") }
            let result = try JSONDecoder().decode(Result.self, from: Data(response.body))
            let on = channel.channel == "production" ? "" : " on channel \(channel.channel)"
            print(result.changed ? "published release \(result.release ?? 0) of \(origin.app)\(on)" : "nothing changed: release \(result.release ?? 0) of \(origin.app) stays live\(on)")
        }
    }
}

struct Unstage: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Drop a pack's staged change (an upload or a removal) from the draft; the live pack stays as it is.",
        discussion: "The staged upload's blob is deleted. Nothing is published; a pack with no staged change is an error (404)."
    )

    @OptionGroup var origin: ServerOptions
    @OptionGroup var token: TokenOption
    @Option(help: "The pack whose staged change to drop.") var pack: String

    func validate() throws {
        guard Identifier.isValidPack(pack) else { throw ValidationError("invalid pack id \"\(pack)\": 1–64 of A-Z a-z 0-9 . -, no '_'") }
    }

    struct Result: Decodable { var note: String }

    func run() async throws {
        let response = try await origin.transport().send(
            method: "DELETE", to: origin.endpoint("packs/" + pack, [URLQueryItem(name: "staged", value: "true")]), headers: try token.headers()
        )
        guard (200..<300).contains(response.status) else { throw CLIError("unstage failed: HTTP \(response.status): \(Publish.message(response.body))") }
        print(try JSONDecoder().decode(Result.self, from: Data(response.body)).note)
    }
}
