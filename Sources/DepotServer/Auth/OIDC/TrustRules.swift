import DepotCore
import Foundation

/// A rule of trusted publishing: which CI jobs, proven by the OIDC token their platform issues
/// them, may exchange it for a short-lived publish token of the app, and what that token may do.
public struct TrustRule: Codable, Sendable, Hashable {
    /// A public id (`rule-` and 8 hex), for listing, removing and the tokens it made.
    public var id: String
    /// The issuer, exactly as the tokens' `iss` says (`https://token.actions.githubusercontent.com`).
    public var issuer: String
    /// The audience the job must ask for: one of the token's `aud`.
    public var audience: String
    /// Claims the token must carry with exactly these values (`repository`, `ref`, `environment`…).
    public var claims: [String: String]
    /// What the minted token may do; only ``TokenRole/publisher``: administration stays with people.
    public var role: TokenRole
    /// The channels its tokens may release to, promote and roll out on; nil: every channel.
    public var channels: [String]?
    /// Plain http allowed for the issuer (a loopback address only; for tests).
    public var allowHTTP: Bool
    public var createdAt: Date

    /// Claims that name a GitHub repository, and those that pin which of its runs (a branch, an
    /// environment, a workflow): a pull request's run — a fork's code, on a private repository
    /// that sends it tokens — has the repository's own `repository`, so that alone is not enough.
    static let githubIdentity: Set<String> = ["repository", "repository_id", "sub"]
    static let githubContext: Set<String> = ["sub", "ref", "environment", "workflow_ref", "job_workflow_ref"]
    static let gitlabIdentity: Set<String> = ["project_path", "project_id", "namespace_id", "namespace_path", "sub"]
    /// On gitlab.com, as on GitHub, every branch's pipeline of the project (a merge request's
    /// among them) has the project's own `project_path`: a rule pins which pipelines qualify
    /// (`sub` carries the ref; `ci_config_ref_uri` the ref of the pipeline's definition).
    static let gitlabContext: Set<String> = [
        "sub", "ref", "ref_path", "ref_protected", "environment", "environment_protected", "ci_config_ref_uri", "deployment_tier",
    ]

    /// GitHub.com's issuer (with an enterprise's slug after it, GitHub Enterprise Cloud's), a
    /// GHE.com tenant's (`https://token.actions.TENANT.ghe.com`), or a GitHub Enterprise
    /// Server's (`https://HOST/_services/token`).
    static func isGitHub(_ issuer: String) -> Bool {
        guard let url = URL(string: issuer), url.scheme == "https", let host = url.host?.lowercased() else { return false }
        return host == "token.actions.githubusercontent.com" || (host.hasPrefix("token.actions.") && host.hasSuffix(".ghe.com"))
            || url.path.hasSuffix("/_services/token")
    }

    /// An issuer AssetDepot knows the claims of (GitHub's, gitlab.com's): for others, the rule's
    /// maker must know which claims say who may publish.
    public static func isKnownPlatform(_ issuer: String) -> Bool { isGitHub(issuer) || isGitLabCom(issuer) }

    static func isGitLabCom(_ issuer: String) -> Bool { issuer.sameBytes("https://gitlab.com") }

    /// Checks a rule as `depot apps trust` makes it; the error says what to change.
    public static func validate(issuer: String, audience: String, claims: [String: String], channels: [String]?, allowHTTP: Bool) throws {
        guard let url = URL(string: issuer), let host = url.host, !host.isEmpty, url.query == nil, url.fragment == nil,
              url.user == nil, url.password == nil, !issuer.hasSuffix("/") || url.path == "/" else {
            throw DepotError.badRequest("the issuer must be a URL such as https://token.actions.githubusercontent.com (no query, no trailing slash)")
        }
        switch url.scheme {
        case "https": break
        case "http":
            guard allowHTTP, isLoopback(host) else {
                throw DepotError.badRequest("the issuer must be https (plain http only to a loopback address, with --allow-http, for tests)")
            }
        default: throw DepotError.badRequest("the issuer must be an https URL")
        }
        guard !audience.isEmpty, audience.utf8.count <= 256 else { throw DepotError.badRequest("give the audience the job asks for (--audience, 1–256 bytes)") }
        guard !claims.isEmpty else {
            throw DepotError.badRequest("name at least one claim (--claim NAME=VALUE): with none, any job of the issuer could publish")
        }
        try DisplayText.requireNoBidiControls(issuer, "the issuer")
        try DisplayText.requireNoBidiControls(audience, "the audience")
        for (name, value) in claims {
            try DisplayText.requireNoBidiControls(name, "a claim's name")
            try DisplayText.requireNoBidiControls(value, "a claim's value")
            guard !name.isEmpty, name.utf8.count <= 64, !value.isEmpty, value.utf8.count <= 512,
                  !["iss", "aud", "exp", "nbf", "iat", "jti"].contains(name) else {
                throw DepotError.badRequest("claim \(name): names of 1–64 bytes other than iss, aud, exp, nbf, iat, jti; values of 1–512 bytes")
            }
        }
        if isGitHub(issuer) {
            guard !githubIdentity.isDisjoint(with: claims.keys) else {
                throw DepotError.badRequest("every job on GitHub can get a token: name the repository (one of \(githubIdentity.sorted().joined(separator: ", ")))")
            }
            guard !githubContext.isDisjoint(with: claims.keys) else {
                throw DepotError.badRequest("pin which runs of the repository may publish (one of \(githubContext.sorted().joined(separator: ", ")), e.g. ref=refs/heads/main): a pull request's run has the repository's own name")
            }
        }
        if isGitLabCom(issuer) {
            guard !gitlabIdentity.isDisjoint(with: claims.keys) else {
                throw DepotError.badRequest("every job on gitlab.com can get a token: name the project (one of \(gitlabIdentity.sorted().joined(separator: ", ")))")
            }
            guard !gitlabContext.isDisjoint(with: claims.keys) else {
                throw DepotError.badRequest("pin which pipelines of the project may publish (one of \(gitlabContext.sorted().joined(separator: ", ")), e.g. ref_protected=true or ref=main): every branch's pipeline, a merge request's too, has the project's own project_path")
            }
        }
        if let channels {
            guard !channels.isEmpty, channels.allSatisfy(Identifier.isValidChannel) else { throw DepotError.invalidID("channel") }
        }
    }
}

/// Whether `host` is a loopback address (127.0.0.0/8, ::1) or `localhost`: the only places an
/// http issuer may be, and its keys fetched from.
func isLoopback(_ host: String) -> Bool {
    let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
    if bare.lowercased() == "localhost" { return true }
    var v4 = in_addr()
    if inet_pton(AF_INET, bare, &v4) == 1 { return withUnsafeBytes(of: v4) { $0[0] } == 127 }
    var v6 = in6_addr()
    return inet_pton(AF_INET6, bare, &v6) == 1 && withUnsafeBytes(of: v6) { Array($0) } == [UInt8](repeating: 0, count: 15) + [1]
}

/// An app's trust rules, `apps/<app>/trust-rules.json`, re-read when the file changes so that
/// `depot apps trust` takes effect on a running server. Changed under an exclusive lock.
public final class TrustStore: Sendable {
    private let folder: DataFolder
    private let cache = FileStampCache<[TrustRule]>()

    public init(folder: DataFolder) { self.folder = folder }

    /// The app's rules (none when it has no file); for the server, one `stat` when unchanged.
    public func rules(_ app: String) -> [TrustRule] {
        cache.value(for: app, path: { folder.trustRules(app) }, load: { try StoredJSON.read(TrustFile.self, from: $0).rules }) ?? []
    }

    /// Adds a rule and returns it.
    public func add(
        _ app: String, issuer: String, audience: String, claims: [String: String], channels: [String]?, allowHTTP: Bool
    ) throws -> TrustRule {
        try TrustRule.validate(issuer: issuer, audience: audience, claims: claims, channels: channels, allowHTTP: allowHTTP)
        let rule = TrustRule(
            id: "rule-" + Hex.encode(SecureRandom.bytes(4)), issuer: issuer, audience: audience, claims: claims, role: .publisher,
            channels: channels.map { Array(Set($0)).sorted() }, allowHTTP: allowHTTP, createdAt: WallClock.now()
        )
        try modify(app) { $0.append(rule) }
        return rule
    }

    /// Removes a rule; tokens it made are refused from then on. False if there is no such rule.
    @discardableResult
    public func remove(_ app: String, id: String) throws -> Bool {
        var found = false
        try modify(app) { rules in
            found = rules.contains { $0.id == id }
            rules.removeAll { $0.id == id }
        }
        return found
    }

    private func modify(_ app: String, _ change: (inout [TrustRule]) throws -> Void) throws {
        let path = folder.trustRules(app)
        guard FileSystem.isDirectory(folder.app(app)) else { throw DepotError.notFound("app \(app)") }
        try LockedFile.update(TrustFile.self, at: path) { file in
            var rules = file?.rules ?? []
            try change(&rules)
            file = TrustFile(rules: rules)
        }
    }
}

struct TrustFile: Codable {
    var rules: [TrustRule]
}
