import DepotCore
import DepotServer
import Foundation
import Synchronization

/// A software App Attest device with DCAppAttestService's async API, and the test CA (root and
/// intermediate, P-256, made with the `openssl` command line) that attests its keys. Verify its
/// attestations with `AppAttestVerifier(appID:environment:anchor: device.root)`, or, for a real
/// `depot serve` (a DEBUG build), write ``root`` to a file named by `DEPOT_APP_ATTEST_TEST_ANCHOR`.
///
/// Its objects have the shape of Apple's: `{fmt: "apple-appattest", attStmt: {x5c: [leaf,
/// intermediate], receipt}, authData}`, the leaf certifying the key with the nonce extension
/// `1.2.840.113635.100.8.2`; assertions `{signature, authenticatorData}`, the counter rising by
/// one each. ``Tampering`` makes one field wrong, for attack tests.
public final class TestAppAttest: Sendable {
    public let appID: String
    public let environment: AppAttestEnvironment
    /// The test CA's root (DER): the anchor to verify this device's attestations against.
    public let root: [UInt8]
    /// The intermediate CA's certificate (DER), x5c[1] of every attestation.
    public let intermediate: [UInt8]
    /// Always true: App Attest is "supported" on this device.
    public var isSupported: Bool { true }

    private let folder: String
    private struct Key {
        var path: String
        var publicKey: [UInt8]
        var counter: UInt32
    }
    private let keys = Mutex<[String: Key]>([:])

    /// One field of an attestation or an assertion made wrong on purpose.
    public struct Tampering: Sendable {
        /// authData's aaguid (16 bytes) instead of the environment's.
        public var aaguid: [UInt8]?
        /// The counter instead of 0 (attestation) or the next one (assertion; it is then also the key's counter).
        public var counter: UInt32?
        /// The App ID hashed into rpIdHash instead of ``TestAppAttest/appID``.
        public var appID: String?
        /// The certified nonce instead of SHA-256(authData ‖ clientDataHash).
        public var nonce: [UInt8]?
        /// authData's credential id instead of the key id.
        public var credentialID: [UInt8]?

        public init(aaguid: [UInt8]? = nil, counter: UInt32? = nil, appID: String? = nil, nonce: [UInt8]? = nil, credentialID: [UInt8]? = nil) {
            self.aaguid = aaguid
            self.counter = counter
            self.appID = appID
            self.nonce = nonce
            self.credentialID = credentialID
        }
    }

    /// Makes the CA (a root and an intermediate, valid from now for 30 days) in a temporary folder.
    public init(appID: String, environment: AppAttestEnvironment = .production) throws {
        self.appID = appID
        self.environment = environment
        folder = TemporaryDirectory("app-attest").path
        let ca = folder + "/ca.ext"
        try Data("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n".utf8).write(to: URL(fileURLWithPath: ca))
        try Self.openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", folder + "/root.key"])
        try Self.openssl(["req", "-x509", "-new", "-key", folder + "/root.key", "-subj", "/CN=Test App Attestation Root CA/O=AssetDepot Tests",
                          "-days", "30", "-sha256", "-addext", "basicConstraints=critical,CA:TRUE",
                          "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-outform", "DER", "-out", folder + "/root.der"])
        try Self.openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", folder + "/intermediate.key"])
        try Self.openssl(["req", "-new", "-key", folder + "/intermediate.key", "-subj", "/CN=Test App Attestation CA 1/O=AssetDepot Tests",
                          "-out", folder + "/intermediate.csr"])
        try Self.openssl(["x509", "-req", "-in", folder + "/intermediate.csr", "-CA", folder + "/root.der", "-CAform", "DER",
                          "-CAkey", folder + "/root.key", "-set_serial", "2", "-days", "30", "-sha256", "-extfile", ca,
                          "-outform", "DER", "-out", folder + "/intermediate.der"])
        root = try Self.read(folder + "/root.der")
        intermediate = try Self.read(folder + "/intermediate.der")
    }

    deinit { try? FileManager.default.removeItem(atPath: folder) }

    /// A new P-256 key; returns its key id (base64 of SHA-256 of the X9.63 public key), as
    /// `DCAppAttestService.generateKey()` does.
    public func generateKey() async throws -> String {
        let name = Hex.encode(SecureRandom.bytes(8))
        let path = folder + "/key-\(name).pem"
        try Self.openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", path])
        try Self.openssl(["ec", "-in", path, "-pubout", "-outform", "DER", "-out", path + ".pub"])
        let publicKey = Array(try Self.read(path + ".pub").suffix(65))
        let keyID = Data(SHA256Hasher.hash(publicKey)).base64EncodedString()
        keys.withLock { $0[keyID] = Key(path: path, publicKey: publicKey, counter: 0) }
        return keyID
    }

    /// The X9.63 public key of a key this device made.
    public func publicKey(_ keyId: String) throws -> [UInt8] { try key(keyId).publicKey }

    /// An attestation object for the key, certified by this device's CA.
    public func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data {
        try attestKey(keyId, clientDataHash: clientDataHash, tampering: Tampering())
    }

    /// An attestation object with the fields `tampering` names made wrong.
    public func attestKey(_ keyId: String, clientDataHash: Data, tampering: Tampering) throws -> Data {
        let key = try key(keyId)
        let keyID = Array(Data(base64Encoded: keyId) ?? Data())
        let credentialID = tampering.credentialID ?? keyID
        let cose = CBORValue.map([
            CBORMapEntry(key: .unsigned(1), value: .unsigned(2)),
            CBORMapEntry(key: .unsigned(3), value: .negative(6)),
            CBORMapEntry(key: .negative(0), value: .unsigned(1)),
            CBORMapEntry(key: .negative(1), value: .bytes(Array(key.publicKey[1..<33]))),
            CBORMapEntry(key: .negative(2), value: .bytes(Array(key.publicKey[33..<65]))),
        ])
        let authData = SHA256Hasher.hash(Array((tampering.appID ?? appID).utf8)) + [0x40] + Self.bigEndian(tampering.counter ?? 0)
            + (tampering.aaguid ?? environment.aaguid) + [UInt8(credentialID.count >> 8), UInt8(credentialID.count & 0xff)] + credentialID
            + cose.encoded
        let nonce = tampering.nonce ?? SHA256Hasher.hash(authData + Array(clientDataHash))
        let leaf = try certify(key.path, nonce: nonce)
        let object = CBORValue.map([
            CBORMapEntry(key: .text("fmt"), value: .text("apple-appattest")),
            CBORMapEntry(key: .text("attStmt"), value: .map([
                CBORMapEntry(key: .text("x5c"), value: .array([.bytes(leaf), .bytes(intermediate)])),
                CBORMapEntry(key: .text("receipt"), value: .bytes(Array("test receipt for \(keyId)".utf8))),
            ])),
            CBORMapEntry(key: .text("authData"), value: .bytes(authData)),
        ])
        return Data(object.encoded)
    }

    /// An assertion by the key over `clientDataHash`; the counter rises by one each call.
    public func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data {
        try generateAssertion(keyId, clientDataHash: clientDataHash, tampering: Tampering())
    }

    /// An assertion with the fields `tampering` names made wrong (`counter`, `appID`).
    public func generateAssertion(_ keyId: String, clientDataHash: Data, tampering: Tampering) throws -> Data {
        let (key, counter) = try keys.withLock { keys throws -> (Key, UInt32) in
            guard var key = keys[keyId] else { throw TestAppAttestError.unknownKey(keyId) }
            key.counter = tampering.counter ?? key.counter + 1
            keys[keyId] = key
            return (key, key.counter)
        }
        let authenticatorData = SHA256Hasher.hash(Array((tampering.appID ?? appID).utf8)) + [0x00] + Self.bigEndian(counter)
        let nonce = SHA256Hasher.hash(authenticatorData + Array(clientDataHash))
        let message = folder + "/nonce-\(Hex.encode(SecureRandom.bytes(8)))"
        try Data(nonce).write(to: URL(fileURLWithPath: message))
        defer { try? FileManager.default.removeItem(atPath: message) }
        // `openssl dgst -sha256 -sign` signs SHA-256(nonce), as the Secure Enclave does.
        try Self.openssl(["dgst", "-sha256", "-sign", key.path, "-out", message + ".sig", message])
        let signature = try Self.read(message + ".sig")
        try? FileManager.default.removeItem(atPath: message + ".sig")
        return Data(CBORValue.map([
            CBORMapEntry(key: .text("signature"), value: .bytes(signature)),
            CBORMapEntry(key: .text("authenticatorData"), value: .bytes(authenticatorData)),
        ]).encoded)
    }

    /// A leaf certificate (DER) for the key at `path`, signed by the intermediate, carrying `nonce`
    /// in the extension `1.2.840.113635.100.8.2` as DER SEQUENCE { [1] OCTET STRING }.
    private func certify(_ path: String, nonce: [UInt8]) throws -> [UInt8] {
        let base = folder + "/leaf-\(Hex.encode(SecureRandom.bytes(8)))"
        defer { for suffix in [".ext", ".csr", ".der"] { try? FileManager.default.removeItem(atPath: base + suffix) } }
        let value = [0x30, UInt8(nonce.count + 4), 0xa1, UInt8(nonce.count + 2), 0x04, UInt8(nonce.count)] + nonce
        try Data("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n1.2.840.113635.100.8.2=DER:\(Hex.encode(value))\n".utf8)
            .write(to: URL(fileURLWithPath: base + ".ext"))
        try Self.openssl(["req", "-new", "-key", path, "-subj", "/CN=\(Hex.encode(SecureRandom.bytes(16)))/OU=AAA Certification/O=AssetDepot Tests", "-out", base + ".csr"])
        try Self.openssl(["x509", "-req", "-in", base + ".csr", "-CA", folder + "/intermediate.der", "-CAform", "DER",
                          "-CAkey", folder + "/intermediate.key", "-set_serial", "0x" + Hex.encode(SecureRandom.bytes(8)), "-days", "3", "-sha256",
                          "-extfile", base + ".ext", "-outform", "DER", "-out", base + ".der"])
        return try Self.read(base + ".der")
    }

    private func key(_ keyId: String) throws -> Key {
        guard let key = keys.withLock({ $0[keyId] }) else { throw TestAppAttestError.unknownKey(keyId) }
        return key
    }

    private static func bigEndian(_ value: UInt32) -> [UInt8] { (0..<4).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) } }

    private static func read(_ path: String) throws -> [UInt8] { Array(try Data(contentsOf: URL(fileURLWithPath: path))) }

    private static func openssl(_ arguments: [String]) throws {
        let result = try Processes.run("/usr/bin/openssl", arguments)
        guard result.status == 0 else { throw TestAppAttestError.openssl(arguments.joined(separator: " "), result.stderr) }
    }
}

/// Why the software App Attest device failed (like DCError.invalidKey for an unknown key).
public enum TestAppAttestError: Error, CustomStringConvertible {
    case unknownKey(String)
    case openssl(String, String)

    public var description: String {
        switch self {
        case .unknownKey(let keyId): "no key \(keyId) on this device"
        case .openssl(let command, let error): "openssl \(command) failed: \(error)"
        }
    }
}
