// Also compiled into CryptoKitBackendTests, against the CryptoKit backend.
#if DEPOT_CRYPTOKIT
import DepotCoreCryptoKit
#else
import DepotCore
#endif
import Testing

@Suite("Known-answer vectors")
struct KnownAnswerTests {
    @Test("SHA-256, FIPS 180-2 examples", arguments: [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
    ])
    func sha256(input: String, expected: String) {
        #expect(Hex.encode(SHA256Hasher.hash(Array(input.utf8))) == expected)
    }

    @Test("SHA-256 of one million 'a', streamed in uneven chunks")
    func sha256Million() {
        let hasher = SHA256Hasher()
        let chunk = [UInt8](repeating: 0x61, count: 999)
        var left = 1_000_000
        while left > 0 {
            let n = min(left, chunk.count)
            hasher.update(chunk[0..<n])
            left -= n
        }
        #expect(Hex.encode(hasher.finalize()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    @Test("HKDF-SHA256, RFC 5869 test case 1")
    func hkdf() throws {
        let okm = try HKDF.deriveKey(
            inputKeyMaterial: [UInt8](repeating: 0x0b, count: 22),
            salt: Hex.decode("000102030405060708090a0b0c")!,
            info: Hex.decode("f0f1f2f3f4f5f6f7f8f9")!, length: 42
        )
        #expect(Hex.encode(okm) == "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
    }

    @Test("AES-256-GCM, NIST GCM spec test case 16 (with AAD)")
    func aesGCM() throws {
        let key = Hex.decode("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308")!
        let nonce = Hex.decode("cafebabefacedbaddecaf888")!
        let plaintext = Hex.decode("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39")!
        let aad = Hex.decode("feedfacedeadbeeffeedfacedeadbeefabaddad2")!
        let expected = "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662"
            + "76fc6ece0f4e1768cddf8853bb2d551b"
        let cipher = try AES256GCM(key: key)
        var sealed = [UInt8](repeating: 0, count: plaintext.count + 16)
        try plaintext.withUnsafeBytes { p in try sealed.withUnsafeMutableBytes { try cipher.seal(p, nonce: nonce, aad: aad, into: $0) } }
        #expect(Hex.encode(sealed) == expected)

        var opened = [UInt8](repeating: 0, count: plaintext.count)
        try sealed.withUnsafeBytes { s in try opened.withUnsafeMutableBytes { try cipher.open(s, nonce: nonce, aad: aad, into: $0) } }
        #expect(opened == plaintext)

        sealed[sealed.count - 1] ^= 1
        #expect(throws: CryptoError.authenticationFailed) {
            try sealed.withUnsafeBytes { s in try opened.withUnsafeMutableBytes { try cipher.open(s, nonce: nonce, aad: aad, into: $0) } }
        }
    }

    @Test("AES-256-GCM, NIST GCM spec test case 13 (empty plaintext)")
    func aesGCMEmpty() throws {
        let cipher = try AES256GCM(key: [UInt8](repeating: 0, count: 32))
        var sealed = [UInt8](repeating: 0, count: 16)
        try [UInt8]().withUnsafeBytes { p in
            try sealed.withUnsafeMutableBytes { try cipher.seal(p, nonce: [UInt8](repeating: 0, count: 12), aad: [], into: $0) }
        }
        #expect(Hex.encode(sealed) == "530f8afbc74536b9a963b4f1c4cb738b")
    }

    @Test("Ed25519, RFC 8032 section 7.1 test 1")
    func ed25519() throws {
        let key = try Ed25519PrivateKey(rawRepresentation: Hex.decode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")!)
        #expect(Hex.encode(key.publicKey.rawRepresentation) == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
        let signature = try key.signature(for: [])
        #expect(Hex.encode(signature) == "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
        #expect(key.publicKey.isValidSignature(signature, for: []))
        #expect(!key.publicKey.isValidSignature(signature, for: [0]))
        var bad = signature
        bad[10] ^= 0x20
        #expect(!key.publicKey.isValidSignature(bad, for: []))
    }

    @Test("DSSE pre-authentication encoding, the spec's example")
    func pae() {
        let encoded = Envelope.pae(payloadType: "http://example.com/HelloWorld", payload: Array("hello world".utf8))
        #expect(String(decoding: encoded, as: UTF8.self) == "DSSEv1 29 http://example.com/HelloWorld 11 hello world")
    }

    @Test("Hex round trip and validation")
    func hex() {
        #expect(Hex.decode("00ff10Ab") == [0, 255, 16, 171])
        #expect(Hex.decode("abc") == nil)
        #expect(Hex.decode("zz") == nil)
        #expect(Hex.isSHA256(String(repeating: "a", count: 64)))
        #expect(!Hex.isSHA256(String(repeating: "A", count: 64)))
        #expect(!Hex.isSHA256(String(repeating: "a", count: 63)))
    }
}
