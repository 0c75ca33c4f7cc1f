import ArgumentParser
import DepotServer

extension AppAttestEnvironment: ExpressibleByArgument {}

/// `depot attest`: App Attest, per app (the App ID and environment its keys are attested for),
/// the keys the origin accepted, and the offline check of one attestation.
struct Attest: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "App Attest: set an app's App ID and environment, list and revoke the keys its devices attested.",
        subcommands: [Configure.self, List.self, Revoke.self]
    )
}
