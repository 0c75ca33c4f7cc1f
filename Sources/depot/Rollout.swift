import ArgumentParser
import DepotClient
import Foundation

/// What the origin answers about a rollout (`GET|POST …/rollouts/{channel}[/step]`).
struct RolloutAnswer: Decodable {
    struct Candidate: Decodable { var pack: String; var revision: Int }
    struct Trigger: Decodable { var reports: Int64; var failures: Int64; var failureRate: Double }
    var channel: String
    var state: String
    var release: Int
    var baseRelease: Int
    var fraction: Double
    var manifest: Int
    var candidates: [Candidate]
    var removed: [String]
    var haltOnFailureRate: Double?
    var minReports: Int?
    var haltedBy: String?
    var trigger: Trigger?
    var reports: Int64
    var failures: Int64
    var failureRate: Double?
    var failuresByKind: [String: Int64]
    /// Absent from origins that predate attested reports.
    var attestedOnly: Bool?
    var attestedReports: Int64?
    var attestedFailures: Int64?
    var attestedFailureRate: Double?
    var steps: [Step]?

    struct Step: Decodable { var action: String; var fraction: Double; var by: String; var trigger: Trigger? }

    static func percent(_ value: Double) -> String {
        let scaled = value * 100
        return scaled == scaled.rounded() ? "\(Int(scaled)) %" : String(format: "%.2f %%", scaled)
    }

    /// The lines `depot rollout` prints.
    var lines: [String] {
        var lines = [
            "rollout of release \(release) on \(channel): \(state), \(Self.percent(fraction)) of devices (manifest \(manifest); current release \(baseRelease))",
            "candidate: " + (candidates.map { "\($0.pack) revision \($0.revision)" } + removed.map { "\($0) removed" }).joined(separator: ", "),
            "reports about the candidate: \(reports), failures \(failures)" + (failureRate.map { " (\(Self.percent($0)))" } ?? ""),
        ]
        if let attestedReports, let attestedFailures {
            lines.append("attested reports about the candidate: \(attestedReports), failures \(attestedFailures)" + (attestedFailureRate.map { " (\(Self.percent($0)))" } ?? ""))
        }
        if !failuresByKind.isEmpty { lines.append("failures by kind: " + failuresByKind.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")) }
        if let rate = haltOnFailureRate, let minimum = minReports {
            lines.append(attestedOnly == true
                ? "guard: halts itself above \(Self.percent(rate)) failures once \(minimum) attested reports are in (it counts only attested reports)"
                : "guard: halts itself above \(Self.percent(rate)) failures once \(minimum) reports are in")
        }
        let figures = { (trigger: Trigger?) in trigger.map { ": \($0.failures) failures in \($0.reports) reports (\(Self.percent($0.failureRate)))" } ?? "" }
        if let haltedBy {
            lines.append("halted by \(haltedBy)" + figures(trigger))
        } else if state != "halted", let halt = steps?.last(where: { $0.action == "halt" }) {
            lines.append("resumed after a halt by \(halt.by)" + figures(halt.trigger))
        }
        if let steps {
            // What --release, --state and --steps name, for a step that must act on this rollout only.
            lines.append("steps: \(steps.count) (" + steps.map { "\($0.action) \(Self.percent($0.fraction)) by \($0.by)" }.joined(separator: ", ") + ")")
        }
        return lines
    }
}

struct RolloutCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rollout",
        abstract: "Offer a release to a fraction of a channel's devices first; advance, halt or complete it.",
        discussion: """
            The channel's signed manifest then carries the current packs and the candidate's, with the \
            fraction and a salt; each device decides from an install id it keeps and never sends. Every step \
            publishes the channel's next release (versions only go up). Managed apps refuse rollouts (the \
            system chooses their downloads). See docs/Publishing.md, "Guarded rollouts and device reports".
            """,
        subcommands: [Start.self, Advance.self, Halt.self, Complete.self, Status.self],
        defaultSubcommand: Status.self
    )

    static func call(_ origin: ServerOptions, _ token: TokenOption, _ channel: String, _ step: String?, _ query: [URLQueryItem] = []) async throws {
        let url = origin.endpoint("rollouts/\(channel)" + (step.map { "/" + $0 } ?? ""), query)
        let response = step == nil
            ? try await origin.transport().get(url, headers: token.headers())
            : try await origin.transport().send(method: "POST", to: url, headers: token.headers())
        guard (200..<300).contains(response.status) else {
            throw CLIError("rollout \(step ?? "status") failed: HTTP \(response.status): \(Publish.message(response.body))")
        }
        for line in try JSONDecoder().decode(RolloutAnswer.self, from: Data(response.body)).lines { print(line) }
    }

    /// What the person saw (`depot rollout status`): with any of them, the origin refuses the
    /// step (409 rollout_changed) if the rollout is no longer that one.
    struct Expectation: ParsableArguments {
        @Option(name: .customLong("release"), help: "Act only if the rollout is still of this candidate release.") var release: Int?
        @Option(name: .customLong("state"), help: "Act only if the rollout is still in this state (running or halted).") var state: String?
        @Option(name: .customLong("steps"), help: "Act only if the rollout still has this many steps (depot rollout status prints them): no halt or resumption since.")
        var steps: Int?

        var query: [URLQueryItem] {
            [("release", release.map(String.init)), ("state", state), ("steps", steps.map(String.init))].compactMap { name, value in
                value.map { URLQueryItem(name: name, value: $0) }
            }
        }
    }

    struct Start: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Start offering release N (one the channel does not serve yet, e.g. published with --channel beta) to a fraction of devices.",
            discussion: "On a channel the app's root protects, the candidate must be signed for it: --sign RELEASE-KEY.json --config CONFIG.json --packs DIR checks release N against your configuration and your own pack files, signs it and uploads the statement first (or --statement FILE)."
        )
        @OptionGroup var origin: ServerOptions
        @OptionGroup var token: TokenOption
        @OptionGroup var channel: ChannelOption
        @Option(help: "The candidate release.") var release: Int
        @Option(help: "The share of devices that take it: 0.1 is 10 %.") var fraction: Double
        @Option(name: .customLong("halt-on-failure-rate"), help: "Halt by itself when more than this share of the candidate's reports are failures (0.05: 5 %).")
        var haltOnFailureRate: Double?
        @Option(name: .customLong("min-reports"), help: "With --halt-on-failure-rate: the reports needed before it may halt (default 20).") var minReports: Int?
        @Flag(name: .customLong("attested-only"), help: "The guard counts only attested reports (App Attest); the default when the app requires attestation (depot attest configure --require).")
        var attestedOnly = false
        @Flag(help: "Start even past the allowances recorded for shipped builds.") var force = false
        @Flag(help: "Offer packs encrypted under a retired pack key that no live release uses (refused otherwise, 409 retired_pack_key: builds exported meanwhile do not hold it). Only when every build in the field holds the key.") var acceptRetiredKeys = false
        @OptionGroup var signing: StatementOptions

        func run() async throws {
            // A protected channel's candidate is signed for it first (--sign, or --statement).
            try await signing.upload(origin: origin, token: token, channel: channel.channel, release: release)
            var query = [URLQueryItem(name: "release", value: String(release)), URLQueryItem(name: "fraction", value: String(fraction))]
            if let haltOnFailureRate { query.append(URLQueryItem(name: "haltOnFailureRate", value: String(haltOnFailureRate))) }
            if let minReports { query.append(URLQueryItem(name: "minReports", value: String(minReports))) }
            if attestedOnly { query.append(URLQueryItem(name: "attestedOnly", value: "true")) }
            if force { query.append(URLQueryItem(name: "force", value: "true")) }
            if acceptRetiredKeys { query.append(URLQueryItem(name: "acceptRetiredKeys", value: "true")) }
            try await RolloutCommand.call(origin, token, channel.channel, "start", query)
        }
    }

    struct Advance: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Raise the fraction (every device that had the candidate keeps it); resumes a halted rollout.")
        @OptionGroup var origin: ServerOptions
        @OptionGroup var token: TokenOption
        @OptionGroup var channel: ChannelOption
        @Option(help: "The new share of devices (above the current one).") var fraction: Double
        @OptionGroup var expected: Expectation

        func run() async throws {
            try await RolloutCommand.call(origin, token, channel.channel, "advance", [URLQueryItem(name: "fraction", value: String(fraction))] + expected.query)
        }
    }

    struct Halt: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Fraction 0: devices that took the candidate go back to the current release at their next event.")
        @OptionGroup var origin: ServerOptions
        @OptionGroup var token: TokenOption
        @OptionGroup var channel: ChannelOption
        @OptionGroup var expected: Expectation

        func run() async throws { try await RolloutCommand.call(origin, token, channel.channel, "halt", expected.query) }
    }

    struct Complete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make the candidate the channel's release, for every device.")
        @OptionGroup var origin: ServerOptions
        @OptionGroup var token: TokenOption
        @OptionGroup var channel: ChannelOption
        @OptionGroup var expected: Expectation

        func run() async throws { try await RolloutCommand.call(origin, token, channel.channel, "complete", expected.query) }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the rollout's state (running, halted or completed), its fraction and the report figures.")
        @OptionGroup var origin: ServerOptions
        @OptionGroup var token: TokenOption
        @OptionGroup var channel: ChannelOption

        func run() async throws { try await RolloutCommand.call(origin, token, channel.channel, nil) }
    }
}

struct Fleet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print what devices reported: adoption per pack revision and failures by kind.",
        discussion: "Counts of the reports apps send (depot sync --report, DeviceReporter), per day, summed over every origin of a bucket."
    )
    @OptionGroup var origin: ServerOptions
    @OptionGroup var token: TokenOption
    @OptionGroup var channel: ChannelOption
    @Option(help: "Days back, today included (1–90).") var days: Int = 14

    struct Answer: Decodable {
        struct Revision: Decodable {
            var pack: String
            var revision: Int
            var installed: Int64
            var patched: Int64
            var failed: Int64
            var deferred: Int64
            var bytes: Int64
            var failuresByKind: [String: Int64]
            var attested: Attested?
        }
        /// A revision's attested reports, by outcome.
        struct Attested: Decodable {
            var installed: Int64
            var patched: Int64
            var failed: Int64
            var deferred: Int64
        }
        var days: [String]
        var reports: [Int64]
        var attestedReports: [Int64]?
        var revisions: [Revision]
        var failuresByKind: [String: Int64]
        var rollout: RolloutAnswer?
        var keys: FleetKeysAnswer?
    }

    func run() async throws {
        let query = channel.query + [URLQueryItem(name: "days", value: String(days))]
        let response = try await origin.transport().get(origin.endpoint("fleet", query), headers: try token.headers())
        guard response.status == 200 else { throw CLIError("fleet failed: HTTP \(response.status): \(Publish.message(response.body))") }
        let answer = try JSONDecoder().decode(Answer.self, from: Data(response.body))
        let attested = (answer.attestedReports ?? []).reduce(0, +)
        print("\(origin.app) on \(channel.channel): \(answer.reports.reduce(0, +)) reports in \(answer.days.count) days (\(answer.days.first ?? "") to \(answer.days.last ?? "")), \(attested) of them attested")
        // The attested reports among each row's, by outcome, in the last four columns.
        print("pack\trevision\tinstalled\tpatched\tfailed\tdeferred\tbytes\tattested installed\tattested patched\tattested failed\tattested deferred")
        for revision in answer.revisions {
            let mine = revision.attested
            print("\(revision.pack)\t\(revision.revision)\t\(revision.installed)\t\(revision.patched)\t\(revision.failed)\t\(revision.deferred)\t\(revision.bytes)"
                + "\t\(mine?.installed ?? 0)\t\(mine?.patched ?? 0)\t\(mine?.failed ?? 0)\t\(mine?.deferred ?? 0)")
        }
        print("failures by kind: " + (answer.failuresByKind.isEmpty ? "none" : answer.failuresByKind.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")))
        if let rollout = answer.rollout { for line in rollout.lines { print(line) } }
        for line in answer.keys?.lines(days: answer.days.count) ?? [] { print(line) }
    }
}

/// The fleet's keys section: per key devices need, the reports from builds with and without it.
struct FleetKeysAnswer: Decodable {
    struct Key: Decodable {
        var id: String
        var state: String
        var with: Int64
        var without: Int64
    }

    struct Kind: Decodable {
        var keys: [Key]
        var unnamed: Int64
    }

    var pack: Kind
    var manifest: Kind

    /// "key k2 (staged): 120 of 4,000 reports in 7 days come from builds without it", per key.
    func lines(days: Int) -> [String] {
        var lines: [String] = []
        for (kind, label, absent) in [(pack, "key", "without it"), (manifest, "manifest key", "that do not pin it")] {
            for key in kind.keys {
                let named = key.with + key.without
                lines.append(named == 0
                    ? "\(label) \(key.id) (\(key.state)): no report in \(days) days names its builds' keys"
                    : "\(label) \(key.id) (\(key.state)): \(Count(key.without)) of \(Count(named)) reports in \(days) days come from builds \(absent)")
            }
            if kind.unnamed > 0 && !kind.keys.isEmpty {
                lines.append("  and \(Count(kind.unnamed)) reports name no \(label == "key" ? "pack" : "manifest") key ring (builds from before reports named their keys\(label == "key" ? "" : ", or that pin none"), or past the rings kept a day)")
            }
        }
        return lines
    }
}
