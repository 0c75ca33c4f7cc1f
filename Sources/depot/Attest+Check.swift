import ArgumentParser
import DepotCore
import DepotServer
import Foundation

/// `depot attest check`: one attestation object verified offline, as the origin verifies it.
struct AttestCheck: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Verify an App Attest attestation object (base64 in FILE) as the origin does; print the attested key, or the check that refused it.",
        discussion: """
            Apple's steps: the x5c chain to the Apple App Attestation Root CA (pinned) at --at (now by default), the \
            nonce extension equal to SHA-256(authData ‖ clientDataHash), the key id equal to SHA-256 of the public key, \
            rpIdHash equal to SHA-256 of the App ID, counter 0, the environment's aaguid, the credential id equal to the \
            key id. Exit status 0 when accepted, 1 when refused (`refused: <check>: <detail>`).
            """
    )

    @Option(name: .customLong("app-id"), help: ArgumentHelp("The App ID: the team ID and the bundle ID.", valueName: "TEAMID.BUNDLEID"))
    var appID: String
    @Option(help: ArgumentHelp("The environment the app's keys are made in: production or development.", valueName: "environment"))
    var environment: String = AppAttestEnvironment.production.rawValue
    @Option(name: .customLong("key-id"), help: ArgumentHelp("The key id generateKey() returned (base64 of 32 bytes).", valueName: "base64"))
    var keyID: String
    @Option(name: .customLong("client-data-hash-text"), help: ArgumentHelp(
        "The exact bytes the app passed as clientDataHash, as UTF-8 text (Apple's samples pass their challenge text itself).", valueName: "text"))
    var clientDataHashText: String
    @Option(help: ArgumentHelp("The instant the certificates must be valid at (ISO 8601, such as 2026-04-21T18:13:12Z); now by default.", valueName: "time"))
    var at: String?
    @Argument(help: ArgumentHelp("A file holding the attestation object in base64.", valueName: "file"))
    var file: String

    /// The largest FILE read: the base64 of an object at the verifier's bound, with room for line breaks.
    static let maximumFileBytes = 64 * 1024

    func validate() throws {
        _ = try parsed()
    }

    func run() throws {
        let (environment, keyID, instant, object) = try parsed()
        let verifier = AppAttestVerifier(appID: appID, environment: environment)
        do {
            let key = try verifier.attestation(object, keyID: keyID, clientDataHash: Array(clientDataHashText.utf8), at: instant)
            let leaf = try? AttestCheck.leafNotAfter(object)
            print("accepted: the key is attested by Apple for \(appID) (\(key.environment.rawValue))")
            print("key id: \(Data(key.keyID).base64EncodedString())")
            print("public key: \(Data(key.publicKey).base64EncodedString()) (X9.63 uncompressed P-256)")
            print("environment: \(key.environment.rawValue)")
            print("leaf certificate valid until: \(leaf.map { ISO8601DateFormatter().string(from: $0) } ?? "unknown")")
            print("counter 0")
        } catch {
            print("refused: \(error)")
            throw ExitCode(1)
        }
    }

    /// The checked arguments: the environment, the key id's bytes, the instant and the object's bytes.
    private func parsed() throws -> (AppAttestEnvironment, [UInt8], Date, [UInt8]) {
        let parts = appID.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].utf8.count == 10, parts[0].utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x41...0x5a).contains($0) }),
              !parts[1].isEmpty, parts[1].utf8.count <= 255,
              parts[1].utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x41...0x5a).contains($0) || (0x61...0x7a).contains($0) || $0 == 0x2e || $0 == 0x2d }),
              !parts[1].hasPrefix("."), !parts[1].hasSuffix("."), !parts[1].contains("..") else {
            throw ValidationError("--app-id \(appID): use TEAMID.BUNDLEID (a team ID of 10 characters A-Z 0-9, then the bundle ID: A-Z a-z 0-9 . -)")
        }
        guard let environment = AppAttestEnvironment(rawValue: environment) else {
            throw ValidationError("--environment must be production or development, not \(environment)")
        }
        guard let keyID = Data(base64Encoded: keyID).map(Array.init), keyID.count == 32 else {
            throw ValidationError("--key-id must be the base64 of 32 bytes (the key id generateKey() returned)")
        }
        var instant = Date()
        if let at {
            guard let date = ISO8601DateFormatter().date(from: at) else {
                throw ValidationError("--at \(at): use an ISO 8601 time with its zone, such as 2026-04-21T18:13:12Z")
            }
            instant = date
        }
        guard let handle = FileHandle(forReadingAtPath: file) else { throw ValidationError("\(file): cannot be read") }
        defer { try? handle.close() }
        let contents: Data
        do {
            contents = try handle.read(upToCount: Self.maximumFileBytes + 1) ?? Data()
        } catch {
            throw ValidationError("\(file): cannot be read (\(error.localizedDescription))")
        }
        guard contents.count <= Self.maximumFileBytes else {
            throw ValidationError("\(file) is larger than \(Self.maximumFileBytes) bytes: it should hold one attestation object in base64")
        }
        let text = String(decoding: contents, as: UTF8.self).filter { !$0.isWhitespace }
        guard let object = Data(base64Encoded: text), !object.isEmpty else {
            throw ValidationError("\(file) does not hold base64 (it should hold the attestation object attestKey returned, base64-encoded)")
        }
        return (environment, keyID, instant, Array(object))
    }

    /// The leaf certificate's notAfter, read from the accepted object.
    static func leafNotAfter(_ object: [UInt8]) throws -> Date? {
        guard case .array(let x5c)? = try CBORDecoder.decode(object)["attStmt"]?["x5c"], let der = x5c.first?.byteString else { return nil }
        return try X509Certificate(der: der).notAfter()
    }
}
