import ArgumentParser

/// `depot attest`: App Attest, Apple's proof that a request comes from a genuine copy of an app
/// on a genuine device.
struct Attest: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "App Attest: check an attestation object offline (Apple's validation steps, against Apple's pinned root).",
        discussion: """
            The origin verifies attestations and assertions itself; `check` runs the same verification on one \
            attestation object an operator holds, as when settling a first device run. See docs/Operating.md, \
            "Settling a first device run".
            """,
        subcommands: [AttestCheck.self]
    )
}
