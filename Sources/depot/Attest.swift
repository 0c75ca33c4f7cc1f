import ArgumentParser
import DepotServer

extension AppAttestEnvironment: ExpressibleByArgument {}

/// `depot attest`: App Attest, per app (the App ID and environment its keys are attested for),
/// the keys the origin accepted, and the offline check of one attestation.
struct Attest: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "App Attest: set an app's App ID and environment, list and revoke the keys its devices attested, check an attestation offline.",
        discussion: """
            `check` runs the origin's verification (Apple's validation steps, against Apple's pinned root) on one \
            attestation object an operator holds, as when settling a first device run. See docs/Operating.md, \
            "Settling a first device run".
            """,
        subcommands: [Configure.self, List.self, Revoke.self, AttestCheck.self]
    )
}
