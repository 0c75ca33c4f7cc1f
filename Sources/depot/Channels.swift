import ArgumentParser
import DepotClient
import Foundation

struct Channels: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List an app's channels, promote a release to one, or remove one.",
        discussion: """
            A channel is a named pointer to a release with its own manifest URL: production (the default, \
            also served at /v1/apps/APP/manifest), beta, or one per shipped app build. `depot publish \
            --release --channel beta` makes a release that only beta serves; `depot channels promote` then \
            moves another channel to it. Channels only move forward; to go back, use `depot rollback --channel`.
            """,
        subcommands: [ListChannels.self, Promote.self, Remove.self],
        defaultSubcommand: ListChannels.self
    )

    struct ListChannels: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List the channels, their releases and manifest URLs.")
        @OptionGroup var origin: ServerOptions
        @OptionGroup var credentials: CredentialsOption

        struct List: Decodable {
            struct Channel: Decodable { var name: String; var release: Int; var manifestURL: String }
            var channels: [Channel]
        }

        func run() async throws {
            let response = try await origin.transport().get(origin.endpoint("channels"), headers: credentials.headers)
            guard response.status == 200 else { throw CLIError("channels failed: HTTP \(response.status): \(Publish.message(response.body))") }
            for channel in try JSONDecoder().decode(List.self, from: Data(response.body)).channels {
                print("\(channel.name)\trelease \(channel.release)\t\(channel.manifestURL)")
            }
        }
    }

    struct Promote: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a channel serve an existing release (creating the channel if needed).",
            discussion: """
                Refused with 409 if the channel serves a newer release (not when that is the channel's older content, \
                which the origin re-signed after release N was published: N's packs are then published anew above it), \
                or if the release exceeds the allowances recorded \
                for shipped builds (unless --force). A channel the app's root protects serves only releases signed for it by \
                the app's release keys: --sign RELEASE-KEY.json --config CONFIG.json --packs DIR checks release N against \
                your exported configuration and your own pack files (depot release sign --help says how), signs it for the \
                channel and uploads the statement first (--statement FILE uploads one signed with depot release sign).
                """
        )
        @OptionGroup var origin: ServerOptions
        @OptionGroup var token: TokenOption
        @Option(help: "The channel to move.") var channel: String
        @Option(help: "The release it will serve.") var release: Int
        @Flag(help: "Promote even past the recorded allowances.") var force = false
        @Flag(help: "Managed apps: promote even if packs leave the channel's download manifest (devices delete them for good).") var remove = false
        @Flag(help: "Put back packs encrypted under a retired pack key that no live release uses (refused otherwise, 409 retired_pack_key: builds exported meanwhile do not hold it). Only when every build in the field holds the key.") var acceptRetiredKeys = false
        @OptionGroup var signing: StatementOptions

        struct Result: Decodable { var release: Int; var changed: Bool; var manifestURL: String }

        func run() async throws {
            try await signing.upload(origin: origin, token: token, channel: channel, release: release)
            let query = [URLQueryItem(name: "release", value: String(release))] + (force ? [URLQueryItem(name: "force", value: "true")] : [])
                + (remove ? [URLQueryItem(name: "removeLive", value: "true")] : [])
                + (acceptRetiredKeys ? [URLQueryItem(name: "acceptRetiredKeys", value: "true")] : [])
            let response = try await origin.transport().send(method: "POST", to: origin.endpoint("channels/\(channel)", query), headers: try token.headers())
            guard (200..<300).contains(response.status) else { throw CLIError("promote failed: HTTP \(response.status): \(Publish.message(response.body))") }
            let result = try JSONDecoder().decode(Result.self, from: Data(response.body))
            // A release number other than the one asked for: release N's packs, published anew
            // above the channel's older content the origin had re-signed (or that content, re-signed).
            let packs = result.release == release ? "" : " (release \(release)'s packs\(result.changed ? ", published anew above the release the origin re-signed" : ", re-signed"))"
            print(result.changed ? "\(channel) now serves release \(result.release)\(packs) at \(result.manifestURL)" : "\(channel) already serves release \(result.release)\(packs)")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove a channel other than production (admin token); its manifest URL answers 404 from then on."
        )
        @OptionGroup var origin: ServerOptions
        @OptionGroup var token: TokenOption
        @Option(help: "The channel to remove.") var channel: String

        func run() async throws {
            let response = try await origin.transport().send(method: "DELETE", to: origin.endpoint("channels/\(channel)"), headers: try token.headers(admin: true))
            guard response.status == 204 else { throw CLIError("remove failed: HTTP \(response.status): \(Publish.message(response.body))") }
            print("removed channel \(channel) of \(origin.app)")
        }
    }
}
