import ArgumentParser
import DepotCore
import DepotServer
import Foundation

extension Attest {
    struct Configure: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Take App Attest keys for an app: its App ID (TEAMID.BUNDLEID) and environment; or --off.",
            discussion: """
                Devices then get challenges (POST /v1/apps/APP/attest/challenges) and attest their keys (POST …/attest/keys): \
                the origin verifies each attestation against Apple's App Attestation root, this App ID and environment. \
                --require: the app's rollouts count only attested reports (unattested ones are kept apart in the fleet view). \
                --off stops taking keys; the keys already attested stay (depot attest list).
                """
        )
        @OptionGroup var data: DataOptions
        @Option(help: "The app.") var app: String
        @Option(name: .customLong("app-id"), help: "TEAMID.BUNDLEID: the team ID (10 upper-case letters and digits) and the app's bundle ID.") var appID: String?
        @Option(help: "production (App Store, TestFlight) or development.") var environment: AppAttestEnvironment?
        @Flag(inversion: .prefixedNo, help: "Whether the app's rollouts count only attested reports (kept as set when not given; off at first).") var require: Bool?
        @Flag(help: "Stop taking App Attest keys for the app.") var off = false

        func validate() throws {
            if off {
                guard appID == nil, environment == nil, require == nil else { throw ValidationError("--off takes no other option") }
                return
            }
            guard let appID else { throw ValidationError("give --app-id TEAMID.BUNDLEID (or --off)") }
            guard AttestationSettings.isValidAppID(appID) else {
                throw ValidationError("--app-id \(appID) is not TEAMID.BUNDLEID: a team ID of 10 upper-case letters and digits, a dot, the bundle ID (ABCDE12345.com.example.game)")
            }
        }

        func run() throws {
            let store = AppStore(folder: DataFolder(data.data))
            guard let settings = store.settings(app) else { throw CLIError("no app \(app) in \(data.data)") }
            guard !off else {
                try store.setAttestation(app, nil)
                print("\(app): App Attest off (the attested keys are kept; depot attest list)")
                return
            }
            let previous = settings.attestation
            let attestation = try AttestationSettings(
                appID: appID ?? "", environment: environment ?? previous?.environment ?? .production, required: require ?? previous?.required ?? false
            )
            try store.setAttestation(app, attestation)
            print("\(app): App Attest for \(attestation.appID), \(attestation.environment.rawValue), \(attestation.required ? "rollouts count attested reports only" : "attestation not required")")
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the App Attest keys the origin accepted for an app.",
            discussion: "One line each, the oldest first: the key id (base64, as the device names it), its environment, when it was attested, its counter, and active or revoked."
        )
        @OptionGroup var data: DataOptions
        @Option(help: "The app.") var app: String

        func run() throws {
            let folder = DataFolder(data.data)
            guard AppStore(folder: folder).settings(app) != nil else { throw CLIError("no app \(app) in \(data.data)") }
            let keys = try AttestedKeys(folder: folder, cached: 1).list(app: app)
            if keys.isEmpty { print("\(app): no attested keys") }
            for key in keys {
                let state = key.revokedAt.map { "revoked \(Self.date($0))" } ?? "active"
                print("\(key.keyID)\t\(key.key.environment.rawValue)\tattested \(Self.date(key.attestedAt))\tcounter \(key.counter)\t\(state)")
            }
        }

        static func date(_ date: Date) -> String { ISO8601DateFormatter().string(from: date) }
    }

    struct Revoke: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke an attested key: the origin refuses its reports (403 attested_key_revoked) and it cannot attest again.",
            discussion: "Works beside a running origin; its next report with the key is refused. The key stays listed, revoked."
        )
        @OptionGroup var data: DataOptions
        @Option(help: "The app.") var app: String
        @Argument(help: "The key id: base64 (as depot attest list prints it) or 64 hex digits.") var keyID: String

        var keyBytes: [UInt8]? {
            if keyID.utf8.count == 64, let bytes = Hex.decode(keyID) { return bytes }
            return Data(base64Encoded: keyID).map(Array.init).flatMap { $0.count == 32 ? $0 : nil }
        }

        func validate() throws {
            guard keyBytes != nil else { throw ValidationError("\(keyID) is not a key id: give the base64 that depot attest list prints (32 bytes), or 64 hex digits") }
        }

        func run() throws {
            let folder = DataFolder(data.data)
            guard AppStore(folder: folder).settings(app) != nil else { throw CLIError("no app \(app) in \(data.data)") }
            let key = keyBytes ?? []
            let name = Data(key).base64EncodedString()
            if try AttestedKeys(folder: folder, cached: 1).revoke(app: app, keyID: key, at: WallClock.now()) {
                print("\(app): revoked key \(name); its reports are refused from now on")
            } else {
                print("\(app): key \(name) was revoked already")
            }
        }
    }
}
