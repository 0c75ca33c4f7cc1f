@testable import DepotCore
@testable import DepotCoreCryptoKit
import Foundation
import Testing

// Two builds of DepotCore side by side: `DepotCore` over OpenSSL (what Linux ships) and
// `DepotCoreCryptoKit`, the same sources over the CryptoKit backend (swift-crypto here, CryptoKit
// on Apple platforms). What one writes, the other must read, byte for byte.

private typealias OpenSSLCore = DepotCore.PackEncryptor
private let master = (0..<32).map { UInt8(0x80 + $0) }
private let salt = (0..<32).map { UInt8($0) }
private let prefix: [UInt8] = [0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6]

private func random(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255) } }

private func openSSLPack(_ plaintext: [UInt8], segment: UInt32 = 64) throws -> [UInt8] {
    try DepotCore.PackEncryptor.encrypt(
        plaintext, header: DepotCore.PackHeader(keyID: "k1", segmentSize: segment, salt: salt, noncePrefix: prefix), masterKey: master
    )
}

private func cryptoKitPack(_ plaintext: [UInt8], segment: UInt32 = 64) throws -> [UInt8] {
    try DepotCoreCryptoKit.PackEncryptor.encrypt(
        plaintext, header: DepotCoreCryptoKit.PackHeader(keyID: "k1", segmentSize: segment, salt: salt, noncePrefix: prefix), masterKey: master
    )
}

/// How each build refuses a container: the name of its PackError kind, or "accepted".
private func refusals(_ container: [UInt8]) -> (openSSL: String, cryptoKit: String) {
    let a: String
    do {
        _ = try DepotCore.PackDecryptor.decrypt(container, keyRing: DepotCore.KeyRing(["k1": master]))
        a = "accepted"
    } catch let error as DepotCore.PackError { a = "\(error.kind)" } catch { a = "\(error)" }
    let b: String
    do {
        _ = try DepotCoreCryptoKit.PackDecryptor.decrypt(container, keyRing: DepotCoreCryptoKit.KeyRing(["k1": master]))
        b = "accepted"
    } catch let error as DepotCoreCryptoKit.PackError { b = "\(error.kind)" } catch { b = "\(error)" }
    return (a, b)
}

@Suite("Crypto backends: OpenSSL and CryptoKit agree byte for byte")
struct CrossBackendTests {
    @Test("Each build runs the backend it claims")
    func backends() {
        #expect(DepotCore.CryptoBackend.name == "OpenSSL")
        #expect(DepotCoreCryptoKit.CryptoBackend.name == "CryptoKit")
    }

    @Test("The worked example: both backends write the article's bytes")
    func workedExample() throws {
        let plaintext = Array("AssetDepot pack v1 example".utf8)
        let a = try openSSLPack(plaintext, segment: 16)
        let b = try cryptoKitPack(plaintext, segment: 16)
        #expect(DepotCore.Hex.encode(a) == WorkedExample.container)
        #expect(a == b)
        let header = DepotCoreCryptoKit.PackHeader(keyID: "k1", segmentSize: 16, salt: salt, noncePrefix: prefix)
        #expect(DepotCoreCryptoKit.Hex.encode(try header.dataKey(master: master)) == WorkedExample.dataKey)
    }

    @Test("A pack written by one decrypts with the other, same bytes both ways", arguments: [0, 1, 63, 64, 65, 1000, 3 << 20])
    func packs(size: Int) throws {
        let plaintext = random(size)
        let segment: UInt32 = size > 1 << 20 ? 1 << 20 : 64
        let a = try openSSLPack(plaintext, segment: segment)
        let b = try cryptoKitPack(plaintext, segment: segment)
        #expect(a == b)
        #expect(try DepotCoreCryptoKit.PackDecryptor.decrypt(a, keyRing: DepotCoreCryptoKit.KeyRing(["k1": master])) == plaintext)
        #expect(try DepotCore.PackDecryptor.decrypt(b, keyRing: DepotCore.KeyRing(["k1": master])) == plaintext)
        // Random headers too: the reader takes salt and prefix from the container.
        let fresh = try DepotCoreCryptoKit.PackEncryptor.encrypt(plaintext, header: DepotCoreCryptoKit.PackHeader(keyID: "k1"), masterKey: master)
        #expect(try DepotCore.PackDecryptor.decrypt(fresh, keyRing: DepotCore.KeyRing(["k1": master])) == plaintext)
    }

    @Test("The tamper matrix fails the same way in both")
    func tamper() throws {
        let plaintext = random(300)
        let good = try openSSLPack(plaintext)
        let header = DepotCore.PackHeader(keyID: "k1").encodedSize
        var cases: [(String, [UInt8])] = []
        for index in stride(from: 0, to: good.count, by: 7) {
            var flipped = good
            flipped[index] ^= 0x01
            cases.append(("bit at \(index)", flipped))
        }
        for cut in [header, header + 80, header + 160, good.count - 1] { cases.append(("cut at \(cut)", Array(good.prefix(cut)))) }
        let segmentBytes = 80
        let seg = { (i: Int) in Array(good[(header + i * segmentBytes)..<min(good.count, header + (i + 1) * segmentBytes)]) }
        cases.append(("swapped", Array(good.prefix(header)) + seg(1) + seg(0) + seg(2) + seg(3) + seg(4)))
        cases.append(("trailing", good + [0]))
        var wrongKey = master
        wrongKey[0] ^= 1
        cases.append(("wrong key", try DepotCore.PackEncryptor.encrypt(
            plaintext, header: DepotCore.PackHeader(keyID: "k1", segmentSize: 64), masterKey: wrongKey
        )))
        for (name, container) in cases {
            let (a, b) = refusals(container)
            #expect(a == b, "\(name)")
            #expect(a != "accepted", "\(name)")
        }
        #expect(refusals(good) == ("accepted", "accepted"))
    }

    @Test("An envelope signed with one verifies with the other; a tampered one with neither")
    func envelopes() throws {
        let seed = random(32)
        let manifest = DepotCore.Manifest(
            app: "com.example.game", version: 7, publishedAt: Date(timeIntervalSince1970: 1_800_000_000),
            expiresAt: Date(timeIntervalSince1970: 1_900_000_000), packs: []
        )
        let signedA = try DepotCore.Envelope.sign(manifest, with: [DepotCore.Ed25519PrivateKey(rawRepresentation: seed)]).encoded()
        let keyB = try DepotCoreCryptoKit.Ed25519PrivateKey(rawRepresentation: seed)
        let manifestB = try DepotCoreCryptoKit.Manifest.decode(Array(Data(base64Encoded: DepotCore.Envelope.decode(signedA).payload)!))
        let signedB = try DepotCoreCryptoKit.Envelope.sign(manifestB, with: [keyB]).encoded()
        // Ed25519 is deterministic in both (RFC 8032; swift-crypto is BoringSSL underneath).
        #expect(signedA == signedB)
        let publicA = try DepotCore.Ed25519PublicKey(rawRepresentation: keyB.publicKey.rawRepresentation)
        #expect(try DepotCoreCryptoKit.Envelope.decode(signedA).verifiedManifest(trusting: [keyB.publicKey]).version == 7)
        #expect(try DepotCore.Envelope.decode(signedB).verifiedManifest(trusting: [publicA]).version == 7)
        var tampered = signedA
        let index = tampered.firstIndex(of: UInt8(ascii: "e"))!
        tampered[index] = UInt8(ascii: "f")
        #expect(throws: (any Error).self) { try DepotCore.Envelope.decode(tampered).verifiedManifest(trusting: [publicA]) }
        #expect(throws: (any Error).self) { try DepotCoreCryptoKit.Envelope.decode(tampered).verifiedManifest(trusting: [keyB.publicKey]) }
    }

    @Test("Digests, HKDF, AES-GCM and the sealed upload tail agree")
    func primitives() throws {
        let data = random(100_000)
        for algorithm in DepotCore.MessageDigest.Algorithm.allCases {
            let a = DepotCore.MessageDigest(algorithm)
            let b = DepotCoreCryptoKit.MessageDigest(DepotCoreCryptoKit.MessageDigest.Algorithm(rawValue: algorithm.rawValue)!)
            a.update(data[..<777])
            a.update(data[777...])
            b.update(data)
            #expect(a.finalize() == b.finalize(), "\(algorithm)")
        }
        let ikm = random(32), info = random(20)
        for hkdfSalt in [[], random(13)] {
            #expect(try DepotCore.HKDF.deriveKey(inputKeyMaterial: ikm, salt: hkdfSalt, info: info, length: 42)
                == DepotCoreCryptoKit.HKDF.deriveKey(inputKeyMaterial: ikm, salt: hkdfSalt, info: info, length: 42))
        }
        let key = random(32), nonce = random(12), aad = random(9), plaintext = random(1000)
        var sealedA = [UInt8](repeating: 0, count: plaintext.count + 16)
        var sealedB = sealedA
        try plaintext.withUnsafeBytes { p in try sealedA.withUnsafeMutableBytes { try DepotCore.AES256GCM(key: key).seal(p, nonce: nonce, aad: aad, into: $0) } }
        try plaintext.withUnsafeBytes { p in
            try sealedB.withUnsafeMutableBytes { try DepotCoreCryptoKit.AES256GCM(key: key).seal(p, nonce: nonce, aad: aad, into: $0) }
        }
        #expect(sealedA == sealedB)
        let tailHeader = DepotCore.PackHeader(keyID: "k1", salt: salt, noncePrefix: prefix)
        let sealedTail = try DepotCore.SealedTail(masterKey: master, header: tailHeader, id: "upload").seal(plaintext)
        let tailHeaderB = DepotCoreCryptoKit.PackHeader(keyID: "k1", salt: salt, noncePrefix: prefix)
        #expect(try DepotCoreCryptoKit.SealedTail(masterKey: master, header: tailHeaderB, id: "upload").open(sealedTail) == plaintext)
        #expect(throws: DepotCoreCryptoKit.PackError.self) {
            try DepotCoreCryptoKit.SealedTail(masterKey: master, header: tailHeaderB, id: "other").open(sealedTail)
        }
    }
}
