import DepotCore
import Foundation

extension AppAttestVerifier {
    /// Apple App Attestation Root CA (https://www.apple.com/certificateauthority/Apple_App_Attestation_Root_CA.pem),
    /// P-384, valid 2020-03-18 to 2045-03-15: the SHA-256 of its DER, which pins it.
    public static let appleRootSHA256 = "1cb9823ba28ba6ad2d33a006941de2ae4f513ef1d4e831b9f7e0fa7b6242c932"

    /// Apple App Attestation Root CA's DER, the only anchor a release build trusts. Checked against
    /// ``appleRootSHA256`` when first used: a changed byte here stops the process rather than
    /// trusting another root.
    public static let appleRoot: [UInt8] = {
        let base64 = [
            "MIICITCCAaegAwIBAgIQC/O+DvHN0uD7jG5yH2IXmDAKBggqhkjOPQQDAzBSMSYwJAYDVQQDDB1BcHBsZSBBcHAgQXR0ZXN0YXRp",
            "b24gUm9vdCBDQTETMBEGA1UECgwKQXBwbGUgSW5jLjETMBEGA1UECAwKQ2FsaWZvcm5pYTAeFw0yMDAzMTgxODMyNTNaFw00NTAz",
            "MTUwMDAwMDBaMFIxJjAkBgNVBAMMHUFwcGxlIEFwcCBBdHRlc3RhdGlvbiBSb290IENBMRMwEQYDVQQKDApBcHBsZSBJbmMuMRMw",
            "EQYDVQQIDApDYWxpZm9ybmlhMHYwEAYHKoZIzj0CAQYFK4EEACIDYgAERTHhmLW07ATaFQIEVwTtT4dyctdhNbJhFs/Ii2FdCgAH",
            "GbpphY3+d8qjuDngIN3WVhQUBHAoMeQ/cLiP1sOUtgjqK9auYen1mMEvRq9Sk3Jm5X8U62H+xTD3FE9TgS41o0IwQDAPBgNVHRMB",
            "Af8EBTADAQH/MB0GA1UdDgQWBBSskRBTM72+aEH/pwyp5frq5eWKoTAOBgNVHQ8BAf8EBAMCAQYwCgYIKoZIzj0EAwMDaAAwZQIw",
            "QgFGnByvsiVbpTKwSga0kP0e8EeDS4+sQmTvb7vn53O5+FRXgeLhpJ06ysC5PrOyAjEAp5U4xDgEgllF7En3VcE3iexZZtKeYnpq",
            "tijVoyFraWVIyd/dganmrduC1bmTBGwD",
        ].joined()
        guard let der = Data(base64Encoded: base64).map(Array.init),
              Hex.encode(SHA256Hasher.hash(der)) == appleRootSHA256 else {
            fatalError("the embedded Apple App Attestation Root CA does not match its pinned SHA-256 \(appleRootSHA256)")
        }
        return der
    }()

    /// The anchor the origin verifies attestations against: ``appleRoot``. In DEBUG builds only
    /// (like the crash-point seam), `DEPOT_APP_ATTEST_TEST_ANCHOR=/path/to/root.der` replaces it
    /// with a test CA's root, so tests can run a real `depot serve` with a software device; a
    /// release build (the package) never reads the variable.
    public static func anchorFromEnvironment() -> [UInt8] {
        #if DEBUG
        if let path = ProcessInfo.processInfo.environment["DEPOT_APP_ATTEST_TEST_ANCHOR"], !path.isEmpty {
            guard let der = FileManager.default.contents(atPath: path) else {
                fatalError("DEPOT_APP_ATTEST_TEST_ANCHOR=\(path): the file cannot be read")
            }
            return Array(der)
        }
        #endif
        return appleRoot
    }
}
