import ArgumentParser
import DepotClient
import DepotCore
import Foundation

/// `--oidc`: trusted publishing. The job's OIDC token, taken the platform's way, is exchanged
/// at the origin for a publisher token that lives minutes; no secret is stored in CI.
struct OIDCOptions: ParsableArguments {
    @Flag(help: "Publish with the CI job's OIDC identity instead of a token (GitHub Actions: permissions id-token: write; GitLab: --oidc-token-env).")
    var oidc = false
    @Option(help: "With --oidc on GitHub Actions: the audience to ask for, as the app's trust rule names it.") var audience: String?
    @Option(name: .customLong("oidc-token-env"), help: "With --oidc: the environment variable holding the job's OIDC token (GitLab's id_tokens: name).")
    var tokenVariable: String?

    /// The job's OIDC token: from `--oidc-token-env`, else GitHub Actions' token service.
    func jobToken(transport: HTTPTransport) async throws -> String {
        let environment = ProcessInfo.processInfo.environment
        if let tokenVariable {
            guard let token = environment[tokenVariable], !token.isEmpty else {
                throw CLIError("--oidc-token-env \(tokenVariable): the variable is not set (in .gitlab-ci.yml: id_tokens: \(tokenVariable): aud: …)")
            }
            return token.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        guard let requestURL = environment["ACTIONS_ID_TOKEN_REQUEST_URL"], let requestToken = environment["ACTIONS_ID_TOKEN_REQUEST_TOKEN"] else {
            throw CLIError("--oidc: no OIDC token here. In GitHub Actions give the job `permissions: id-token: write`; in GitLab CI declare id_tokens and pass --oidc-token-env NAME")
        }
        guard let audience else { throw CLIError("--oidc on GitHub Actions needs --audience, as the app's trust rule names it") }
        guard var components = URLComponents(string: requestURL) else { throw CLIError("ACTIONS_ID_TOKEN_REQUEST_URL is not a URL") }
        let items = components.queryItems ?? []
        components.queryItems = items + [URLQueryItem(name: "audience", value: audience)]
        guard let url = components.url else { throw CLIError("ACTIONS_ID_TOKEN_REQUEST_URL is not a URL") }
        let answer = try await transport.get(url, headers: ["Authorization": "Bearer \(requestToken)", "Accept": "application/json"], limit: 64 << 10)
        struct Value: Decodable { var value: String }
        guard answer.status == 200, let value = try? JSONDecoder().decode(Value.self, from: Data(answer.body)) else {
            throw CLIError("GitHub's token service answered \(answer.status): \(String(decoding: answer.body.prefix(300), as: UTF8.self))")
        }
        return value.value
    }

    /// Exchanges the job's token for a publisher token of `app`; a busy origin (the issuer's
    /// keys being fetched, a rate limit) is asked again, for at most a minute.
    func publishToken(server: URL, app: String, transport: HTTPTransport) async throws -> String {
        let jwt = try await jobToken(transport: transport)
        let url = server.appendingPathComponent("v1/apps/\(app)/oidc-token")
        let start = ContinuousClock.now
        while true {
            let answer = try await transport.send(method: "POST", to: url, headers: ["Authorization": "Bearer \(jwt)"], body: Data())
            struct Issued: Decodable {
                var token: String
                var tokenID: String
                var expiresAt: String
                var rule: String
                var channels: [String]?
            }
            if answer.status == 201, let issued = try? JSONDecoder().decode(Issued.self, from: Data(answer.body)) {
                FileHandle.standardError.write(Data("exchanged the job's OIDC token for \(issued.tokenID) (rule \(issued.rule), channels \(issued.channels?.joined(separator: ",") ?? "all"), until \(issued.expiresAt))\n".utf8))
                return issued.token
            }
            let wait = answer.header("Retry-After").flatMap(Int.init) ?? 0
            guard answer.status == 503 || answer.status == 429, wait > 0, ContinuousClock.now - start + .seconds(wait) <= .seconds(60) else {
                throw CLIError("the origin refused the job's OIDC token (\(answer.status)): \(Publish.message(answer.body))")
            }
            try await Task.sleep(for: .seconds(wait))
        }
    }
}
