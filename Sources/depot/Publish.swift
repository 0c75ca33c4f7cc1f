import ArgumentParser
import DepotClient
import DepotCore
import Foundation

struct Publish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Upload a file as a pack; the origin encrypts it on the way in.",
        discussion: "The file's SHA-256 is sent along and checked by the origin after encryption, end to end."
    )

    @Argument(help: "The file to publish.") var file: String
    @OptionGroup var origin: ServerOptions
    @Option(help: "The pack id (1–64 of A-Z a-z 0-9 . -; no '_').") var pack: String
    @OptionGroup var token: TokenOption
    @Option(help: "essential, prefetch or onDemand.") var policy: String = "prefetch"
    @Option(help: "A tag (repeatable).") var tag: [String] = []
    @Option(name: .customLong("content-type"), help: "The plaintext's media type.") var contentType: String = "application/octet-stream"
    @Flag(help: "Publish the staged changes at once as the next release; without it the upload is only staged (see `depot release`).")
    var release = false
    @Option(help: "With --release: the live release you expect; another publish first makes this one fail with 409.") var base: Int?
    @Flag(help: "With --release: publish even if the release exceeds the allowances recorded for shipped builds.") var force = false

    func validate() throws {
        guard Identifier.isValidPack(pack) else { throw ValidationError("invalid pack id \"\(pack)\": 1–64 of A-Z a-z 0-9 . -, no '_'") }
        guard Identifier.isValidApp(origin.app) else { throw ValidationError("invalid app id \"\(origin.app)\"") }
        guard PackEntry.Policy(rawValue: policy) != nil else { throw ValidationError("--policy must be essential, prefetch or onDemand") }
    }

    func run() async throws {
        let authorization = try token.headers()
        guard FileSystem.exists(file), !FileSystem.isDirectory(file) else { throw CLIError("\(file): no such file") }
        let digest = try SHA256Hasher.hexDigest(ofFile: file)
        let query = [URLQueryItem(name: "policy", value: policy)] + tag.map { URLQueryItem(name: "tag", value: $0) }
            + (release ? [URLQueryItem(name: "release", value: "true")] : []) + (base.map { [URLQueryItem(name: "base", value: String($0))] } ?? [])
            + (force ? [URLQueryItem(name: "force", value: "true")] : [])
        let response = try await HTTPTransport(timeout: 3600).upload(
            file: file, to: origin.endpoint("packs/\(pack)", query),
            headers: authorization.merging(["X-Depot-SHA256": digest, "Content-Type": contentType]) { $1 }
        )
        guard (200..<300).contains(response.status) else {
            throw CLIError("publish failed: HTTP \(response.status): \(Self.message(response.body))")
        }
        let result = try JSONDecoder().decode(Result.self, from: Data(response.body))
        let pack = result.pack
        if result.staged {
            print("staged \(pack?.id ?? self.pack) (\(pack?.size ?? 0) bytes) for the next release of \(result.app); publish it with `depot release`")
        } else if result.changed, let pack, let release = result.release {
            print("published \(pack.id) revision \(pack.revision) (\(pack.size) bytes, sha256 \(pack.sha256)) in release \(release) of \(result.app)")
        } else {
            print("unchanged: \(self.pack) already has this content in release \(result.release ?? 0) of \(result.app)")
        }
    }

    struct Result: Decodable {
        var app: String
        var pack: PackEntry?
        var release: Int?
        var staged: Bool
        var changed: Bool
    }

    static func message(_ body: [UInt8]) -> String {
        struct Body: Decodable { struct E: Decodable { var code: String; var message: String }; var error: E }
        if let body = try? JSONDecoder().decode(Body.self, from: Data(body)) { return "\(body.error.code): \(body.error.message)" }
        return String(decoding: body.prefix(300), as: UTF8.self)
    }
}
