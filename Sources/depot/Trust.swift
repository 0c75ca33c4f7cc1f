import ArgumentParser
import DepotCore
import DepotServer
import Foundation

/// `depot apps trust`: the app's trust rules for publishing from CI with no stored secret.
struct Trust: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Trust CI jobs of an OIDC issuer to publish: add, list or remove the app's trust rules.",
        discussion: """
            A job whose OIDC token (GitHub Actions, GitLab CI, any issuer) comes from --issuer, asks for --audience and \
            carries every --claim exchanges it at POST /v1/apps/APP/oidc-token for a publisher token that lives at most \
            15 minutes, limited to the --channel(s) given (`depot publish --oidc`). Name the repository or project in a \
            claim (repository=studio/levels, project_path=studio/levels), and pin which runs qualify: ref=refs/heads/main \
            or environment=production on GitHub, ref_protected=true or ref=main on gitlab.com (required on both: every \
            branch's run has the repository's own name). Claims are compared byte for byte. With --list, the rules; with \
            --remove RULE, one goes (its tokens stop working).
            """
    )
    @OptionGroup var data: DataOptions
    @Argument(help: "The app.") var app: String
    @Option(help: "The issuer, as its tokens' iss says (https://token.actions.githubusercontent.com, https://gitlab.com).") var issuer: String?
    @Option(help: "The audience the job asks for (aud).") var audience: String?
    @Option(help: ArgumentHelp("A claim the token must carry with this exact value (repeatable).", valueName: "NAME=VALUE")) var claim: [String] = []
    @Option(help: "What its tokens may do: publisher (the only role a rule grants).") var role: String = "publisher"
    @Option(help: "A channel its tokens may release to, promote and roll out on (repeatable); none: every channel.") var channel: [String] = []
    @Flag(name: .customLong("allow-http"), help: "Allow a plain-http issuer on a loopback address (tests only).") var allowHTTP = false
    @Flag(help: "List the app's rules.") var list = false
    @Option(help: "Remove the rule with this id (rule-…).") var remove: String?

    func validate() throws {
        guard Identifier.isValidApp(app) else { throw ValidationError("invalid app id \"\(app)\"") }
        guard role == "publisher" else { throw ValidationError("--role: a rule grants publisher tokens only; administration stays with people's tokens") }
        if list || remove != nil {
            guard issuer == nil, audience == nil, claim.isEmpty, channel.isEmpty, !(list && remove != nil) else {
                throw ValidationError("--list and --remove take no other option")
            }
        } else {
            guard issuer != nil, audience != nil else { throw ValidationError("give --issuer and --audience (or --list, --remove RULE)") }
            for item in claim where !item.contains("=") { throw ValidationError("--claim takes NAME=VALUE, not \(item)") }
        }
    }

    func run() throws {
        let folder = DataFolder(data.data)
        guard AppStore(folder: folder).settings(app) != nil else { throw CLIError("no app \(app) in \(data.data)") }
        let store = TrustStore(folder: folder)
        if list {
            for rule in store.rules(app) { print(Self.describe(rule)) }
            return
        }
        if let remove {
            guard try store.remove(app, id: remove) else { throw CLIError("no rule \(remove) for \(app)") }
            print("removed \(remove); tokens it made are refused from now on")
            return
        }
        var claims: [String: String] = [:]
        for item in claim {
            let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard claims[String(parts[0])] == nil else { throw CLIError("--claim \(parts[0]) given twice") }
            claims[String(parts[0])] = String(parts[1])
        }
        do {
            let rule = try store.add(app, issuer: issuer!, audience: audience!, claims: claims, channels: channel.isEmpty ? nil : channel, allowHTTP: allowHTTP)
            print("added " + Self.describe(rule))
            if !TrustRule.isKnownPlatform(rule.issuer) {
                FileHandle.standardError.write(Data("warning: \(rule.issuer) is not GitHub's or gitlab.com's issuer: make sure the claims say who may publish (sub, or the claim naming the project), since anyone who can get a token of this issuer with these claims can publish\n".utf8))
            }
        } catch let error as DepotError {
            throw CLIError(error.message)
        }
    }

    static func describe(_ rule: TrustRule) -> String {
        let claims = rule.claims.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        return [rule.id, rule.issuer, "aud=\(rule.audience)", claims, "channels=\(rule.channels?.joined(separator: ",") ?? "all")", rule.role.rawValue]
            .joined(separator: "\t")
    }
}
