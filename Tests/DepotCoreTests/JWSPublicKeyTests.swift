#if !canImport(CryptoKit)
@testable import DepotCore
import Foundation
import Testing

/// RS256 and ES256 checks against signatures made by another implementation (Python's
/// `cryptography`, keys and signatures generated once and kept here).
@Suite("JWS public keys (RS256, ES256)")
struct JWSPublicKeyTests {
    static let message = Array("eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJodHRwczovL2lzc3Vlci5leGFtcGxlIn0".utf8)
    static let rsaN = "5Q78QLMoJiNlfivdU4i9J5zC0ctLUoKWNIp_4aHGiAzY8jRwt-TKdoYJk-rRtm17_bU5WP_8yubg8KzqZzJ__8w7TSbzVvAPTwFnPgOD1xzZiMvI4_UKLEp5C4IGZhCO73auujEO17E1az_KLb88WpV1HcBWQHqjkk-JbQxMflpRfw0mJsISPlKUBqSG7tWx42lIPP_ziEdBJ8hryzTVtkyOmKiUdoAJemrFNcFp_V57JUtMEKodbNvq9YLukFED_pLS28kaml92PYFeqWG4NdsOR9ywLuA3ydFPWjdwMoGNR3-B-Wh5GGfwatDJcDpSQWkB59SxOpa5zLtalAVvbQ"
    static let rsaSignature = "Y5rELx4_f6mGZUgy5dnIZzcJa4fMdPlM0V4bVQLy3nkKbHt53FPxvi9LZeVqUmaP4ChC_aE9k2lMM3QgOnit1DDUXw735Q_qo-uquYvVFCBvzEaxG9bB0DoxzBFFB8IJvLcxOqc75KwFk8KiDiCQgARxkCClYtxnGJqspLR6ChSqSN5JxZhyQdbW4he2wynDr4yJ6ywz_uK5ydRNTrulcVbjjXqdCIGtuKKzOe484FzeXrPnBovm1sOG5mXmH98uzyVu_s36CrHQqk4cMcCpfhc3wNtlfI1iXsUd-ha6eMpV6VJZfX9l7TfCcTE6UXaiqnj9mnnr3EYs0i9OY1hZYg"
    static let ecX = "XyaLblMFrE8S5O4bOtJIN5hxicEbvtuXMzZ30h3M_QI"
    static let ecY = "jG80PcidYfq8QOiBqsRvoynsfo54yO8epRTZho5ezyI"
    static let ecSignature = "d3pCg2wsWKWN0B4Kgd4my-5BUEuQgpAGevkW5c57e4mJ_3hvdiPalT5HYr3-T2XBDWYeuFiduh9mlh82cRWlbw"
    static let rsa1024N = "rftujmvSTACxB8tho8Rnhz_uB2oFsV8j7OqLvYXS6KtGi2yCGmBWWM3IlvWYDuBk6sC9XwrXGSpZoVG5V7ovh17Yp5ZBzh1ioOHyjZjLuWFwp6SHmtbtiMYGMtBCPyUKava3YUHK1gPAsYkZH7rdAAMDRIjuwtOSZ50ITLNj9Ds"

    static func bytes(_ base64url: String) -> [UInt8] {
        var text = base64url.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        text += String(repeating: "=", count: (4 - text.count % 4) % 4)
        return Array(Data(base64Encoded: text)!)
    }

    @Test("RS256: the signature verifies; a changed message, a changed signature, a short one do not")
    func rs256() throws {
        let key = try JWSPublicKey(rsaModulus: Self.bytes(Self.rsaN), exponent: Self.bytes("AQAB"))
        #expect(key.algorithm == .rs256)
        let signature = Self.bytes(Self.rsaSignature)
        #expect(key.isValidSignature(signature, for: Self.message))
        #expect(!key.isValidSignature(signature, for: Self.message + [0x41]))
        var flipped = signature
        flipped[17] ^= 1
        #expect(!key.isValidSignature(flipped, for: Self.message))
        #expect(!key.isValidSignature(Array(signature.dropLast()), for: Self.message))
        #expect(!key.isValidSignature([], for: Self.message))
    }

    @Test("ES256: the r‖s signature verifies; changed bytes, DER instead of r‖s, zero halves do not")
    func es256() throws {
        let key = try JWSPublicKey(p256X: Self.bytes(Self.ecX), y: Self.bytes(Self.ecY))
        #expect(key.algorithm == .es256)
        let signature = Self.bytes(Self.ecSignature)
        #expect(key.isValidSignature(signature, for: Self.message))
        #expect(!key.isValidSignature(signature, for: Array(Self.message.dropFirst())))
        var flipped = signature
        flipped[40] ^= 0x80
        #expect(!key.isValidSignature(flipped, for: Self.message))
        let der = try #require(JWSPublicKey.derECDSA(r: signature[0..<32], s: signature[32..<64]))
        #expect(!key.isValidSignature(der, for: Self.message))
        #expect(!key.isValidSignature([UInt8](repeating: 0, count: 64), for: Self.message))
    }

    @Test("Keys an issuer must not use are refused: RSA under 2048 bits, a point off P-256, wrong sizes")
    func refusedKeys() {
        #expect(throws: CryptoError.self) { try JWSPublicKey(rsaModulus: Self.bytes(Self.rsa1024N), exponent: Self.bytes("AQAB")) }
        #expect(throws: CryptoError.self) { try JWSPublicKey(rsaModulus: Self.bytes(Self.rsaN), exponent: []) }
        var y = Self.bytes(Self.ecY)
        y[31] ^= 1
        #expect(throws: CryptoError.self) { try JWSPublicKey(p256X: Self.bytes(Self.ecX), y: y) }
        #expect(throws: CryptoError.self) { try JWSPublicKey(p256X: Array(Self.bytes(Self.ecX).dropFirst()), y: Self.bytes(Self.ecY)) }
    }

    /// A 2048-bit prime (`openssl prime -generate -bits 2048`): as an RSA modulus, anyone signs
    /// with it (d = e⁻¹ mod p−1).
    static let prime = "1tT0Nws1nJMSIT8GbYbuOa1UMUxCfjAriktHpo_Jpz1yVtIzLHJLRmZwZ1M50Racvp37Q9Eln6u9f_NrvaGab56u8AOxEGnj5vKjtQk3XkBbNATTlfTUSsWTP0I8pFKaUYURFjCEHB3XAciqIbXd-DiVgBflQ-PxTQNgULv13p96DrD8QWTcTijRf_sI4TEfZhDJ_OcMIuq658vyvvxpC43jd5Mjvr85YEHGR1ouoE5rss8ajTWGwyLZStw5aoxC83WygkAuDuYwlidDtfIX3alrmHy7agQIQHl4UN_xnTys8RQ001P1wTqDWHPVk_bHn7bRb5-61LLItycBPOQnYQ"
    /// `message` signed under that prime with e = 65537, by someone who holds no issuer's key.
    static let primeSignature = "O2JqLG5hHvaUzMmEjk5jkTBjyKHujS8o3j31und1i6Zv2zK6fUc7LUq_DzBZNTe6nO3Cn1I9HKFCuYAI6QXcpYuJvmtGLK1-0jGZCwFXWF7_EUUTbZHgfs-4S3-fR4dZ02O4KkgnwkKCaSF7XXq0L9tIr8Fwd76AK7Gkimf825DqVOnFBUjMfz2Wz48PwuRLNhMvzI4vTTvdxuV6GRfkiiT65zhSIdArviLdXHgUG1FtOnVGNIDfTQ8v9AjI4zgYaybNMD-XF3YYJ4ni2EEZ3ClH58e529QjaRwn-HbpnMiYmgv8aqSCFpL0PAm2wGZeEqg_smhGORW7IfYdFLrwxg"

    @Test("RSA keys anyone could sign for are refused: e = 1 (the bare padding verifies), an even e, a prime or even modulus; e = 3 and 65537 are accepted")
    func forgeableRSAKeys() throws {
        // With e = 1 the signature is the padded digest itself: no key needed.
        let digestInfo: [UInt8] = [0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20]
        let padded: [UInt8] = [0, 1] + [UInt8](repeating: 0xff, count: 256 - 3 - 51) + [0] + digestInfo + SHA256Hasher.hash(Self.message)
        let modulus = Self.bytes(Self.rsaN)
        if let one = try? JWSPublicKey(rsaModulus: modulus, exponent: [1]) {
            Issue.record("e = 1 was loaded; the padding alone verifies: \(one.isValidSignature(padded, for: Self.message))")
        }
        #expect(throws: CryptoError.self) { try JWSPublicKey(rsaModulus: modulus, exponent: [0, 1]) }
        #expect(throws: CryptoError.self) { try JWSPublicKey(rsaModulus: modulus, exponent: [2]) }
        #expect(throws: CryptoError.self) { try JWSPublicKey(rsaModulus: modulus, exponent: [0x01, 0x00, 0x00]) }
        #expect(throws: CryptoError.self) { try JWSPublicKey(rsaModulus: modulus, exponent: [0x01, 0x00, 0x00, 0x00, 0x01]) }
        if let prime = try? JWSPublicKey(rsaModulus: Self.bytes(Self.prime), exponent: Self.bytes("AQAB")) {
            Issue.record("a prime modulus was loaded; a signature made without any issuer's key verifies: \(prime.isValidSignature(Self.bytes(Self.primeSignature), for: Self.message))")
        }
        var even = modulus
        even[even.count - 1] &= 0xfe
        #expect(throws: CryptoError.self) { try JWSPublicKey(rsaModulus: even, exponent: Self.bytes("AQAB")) }
        // Exponents issuers use: 65537 (all of them), and 3, safe with a verifier that compares
        // the whole encoding (OpenSSL does), refused only by FIPS profiles.
        _ = try JWSPublicKey(rsaModulus: modulus, exponent: Self.bytes("AQAB"))
        _ = try JWSPublicKey(rsaModulus: modulus, exponent: [3])
        _ = try JWSPublicKey(rsaModulus: modulus, exponent: [0, 1, 0, 1])
    }

    @Test("r and s become DER integers: leading zeros dropped, a high bit padded")
    func der() {
        let r: [UInt8] = [0, 0] + [UInt8](repeating: 0x01, count: 30)
        let s: [UInt8] = [0x80] + [UInt8](repeating: 0x02, count: 31)
        let encoded = JWSPublicKey.derECDSA(r: r[...], s: s[...])
        #expect(encoded == [0x30, 67, 0x02, 30] + [UInt8](repeating: 0x01, count: 30) + [0x02, 33, 0x00, 0x80] + [UInt8](repeating: 0x02, count: 31))
    }
}
#endif
