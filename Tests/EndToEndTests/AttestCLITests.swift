import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// `depot attest check` as an operator runs it, on Apple's published sample attestation (the
/// "Attestation Object Validation Guide"'s example, in a file as base64).
@Suite("depot attest check: Apple's sample, offline")
struct AttestCLITests {
    static func check(_ extra: [String], file: String? = nil, appID: String = AppleAttestationSample.appID) throws -> Processes.Result {
        let work = TemporaryDirectory("depot-attest-cli")
        defer { work.remove() }
        let path = work.path + "/attestation.b64"
        try Data((AppleAttestationSample.base64 + "\n").utf8).write(to: URL(fileURLWithPath: path))
        return try Processes.run(Processes.depotBinary, ["attest", "check", "--app-id", appID, "--key-id", AppleAttestationSample.keyIDBase64,
                                                         "--client-data-hash-text", AppleAttestationSample.challenge] + extra + [file ?? path])
    }

    @Test("Accepted at --at 2026-04-21T18:13:12Z: the key id, the public key, the environment, the leaf's end of validity, counter 0, exit 0")
    func accepted() throws {
        let result = try Self.check(["--at", AppleAttestationSample.validAtText])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("key id: zgSY9YSD+7TaDXssY6WlOPVS1K3Lmk+pFhlcSWE+ZV0="))
        #expect(result.stdout.contains("public key: \(AppleAttestationSample.publicKeyBase64)"))
        #expect(result.stdout.contains("environment: production"))
        #expect(result.stdout.contains("leaf certificate valid until: 2026-04-23T18:13:12Z"))
        #expect(result.stdout.contains("counter 0"))
    }

    @Test("Refused without --at (the sample's certificates expired on 2026-04-23), with the development environment, or another App ID: exit 1 and the check's name")
    func refused() throws {
        let expired = try Self.check([])
        #expect(expired.status == 1)
        #expect(expired.stdout.hasPrefix("refused: chain: x5c does not chain to the Apple App Attestation Root CA"), "\(expired.stdout)")
        #expect(expired.stdout.contains("certificate has expired"))
        let development = try Self.check(["--at", AppleAttestationSample.validAtText, "--environment", "development"])
        #expect(development.status == 1)
        #expect(development.stdout.hasPrefix("refused: environment: "))
        let other = try Self.check(["--at", AppleAttestationSample.validAtText], appID: "1234567890.com.example.other")
        #expect(other.status == 1)
        #expect(other.stdout.hasPrefix("refused: app_id: "))
    }

    @Test("Bad arguments and an unreadable or non-base64 file: a usage error naming the problem")
    func badArguments() throws {
        let work = TemporaryDirectory("depot-attest-cli")
        defer { work.remove() }
        let garbage = work.path + "/garbage.b64"
        try Data("this is not an attestation!".utf8).write(to: URL(fileURLWithPath: garbage))
        let cases: [([String], String?, String, String)] = [
            (["--at", "yesterday"], nil, AppleAttestationSample.appID, "--at yesterday: use an ISO 8601 time"),
            (["--environment", "staging"], nil, AppleAttestationSample.appID, "--environment must be production or development"),
            ([], nil, "com.example.myapp", "--app-id com.example.myapp: use TEAMID.BUNDLEID"),
            ([], "/nonexistent/attestation.b64", AppleAttestationSample.appID, "/nonexistent/attestation.b64: cannot be read"),
            ([], garbage, AppleAttestationSample.appID, "does not hold base64"),
        ]
        for (extra, file, appID, message) in cases {
            let result = try Self.check(extra, file: file, appID: appID)
            #expect(result.status == 64, "\(extra) \(result.stdout)")
            #expect(result.stderr.contains(message), "\(result.stderr)")
            #expect(result.stdout.isEmpty)
        }
    }
}
