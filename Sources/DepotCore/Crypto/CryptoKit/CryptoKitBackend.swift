// The CryptoKit backend of the crypto API (Apple platforms). On Linux the test-only target
// DepotCoreCryptoKit compiles this same file against swift-crypto's `Crypto`, which has
// CryptoKit's API, so that it is tested here too. The OpenSSL backend
// (../OpenSSL/OpenSSLBackend.swift) offers the same internal API.
#if canImport(CryptoKit) || DEPOT_CRYPTOKIT
#if canImport(CryptoKit)
import CryptoKit
/// Not DepotCore's own ``HKDF``.
private typealias KitHKDF = CryptoKit.HKDF<CryptoKit.SHA256>
#else
import Crypto
/// Not DepotCore's own ``HKDF``.
private typealias KitHKDF = Crypto.HKDF<Crypto.SHA256>
#endif
import Foundation

enum CryptoBackend {
    static let name = "CryptoKit"

    static func hkdfSHA256(inputKeyMaterial ikm: [UInt8], salt: [UInt8], info: [UInt8], length: Int) throws(CryptoError) -> [UInt8] {
        let key = KitHKDF.deriveKey(inputKeyMaterial: SymmetricKey(data: ikm), salt: salt, info: info, outputByteCount: length)
        return key.withUnsafeBytes { Array($0) }
    }

    static func fillRandom(_ bytes: inout [UInt8]) {
        // The system's generator is cryptographically secure on every platform Swift supports
        // (arc4random_buf on Apple platforms, getrandom on Linux).
        var generator = SystemRandomNumberGenerator()
        bytes.withUnsafeMutableBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let word = generator.next()
                withUnsafeBytes(of: word) { w in
                    let n = min(8, buffer.count - offset)
                    buffer.baseAddress!.advanced(by: offset).copyMemory(from: w.baseAddress!, byteCount: n)
                    offset += n
                }
            }
        }
    }
}

/// One AES-256-GCM key.
final class AESGCMContext {
    private let key: SymmetricKey

    init(key: [UInt8]) throws(CryptoError) {
        self.key = SymmetricKey(data: key)
    }

    func seal(_ plaintext: UnsafeRawBufferPointer, nonce: [UInt8], aad: [UInt8], into output: UnsafeMutableRawBufferPointer) throws(CryptoError) {
        do {
            let box = try AES.GCM.seal(plaintext, using: key, nonce: AES.GCM.Nonce(data: nonce), authenticating: aad)
            box.ciphertext.copyBytes(to: output.bindMemory(to: UInt8.self).baseAddress!, count: plaintext.count)
            box.tag.copyBytes(to: output.baseAddress!.advanced(by: plaintext.count).assumingMemoryBound(to: UInt8.self), count: AES256GCM.tagSize)
        } catch {
            throw .backend("AES.GCM.seal")
        }
    }

    func open(_ sealed: UnsafeRawBufferPointer, nonce: [UInt8], aad: [UInt8], into output: UnsafeMutableRawBufferPointer) throws(CryptoError) {
        let textCount = sealed.count - AES256GCM.tagSize
        let plaintext: Data
        do {
            let box = try AES.GCM.SealedBox(
                nonce: AES.GCM.Nonce(data: nonce), ciphertext: UnsafeRawBufferPointer(rebasing: sealed[..<textCount]),
                tag: UnsafeRawBufferPointer(rebasing: sealed[textCount...])
            )
            plaintext = try AES.GCM.open(box, using: key, authenticating: aad)
        } catch {
            throw .authenticationFailed
        }
        if textCount > 0 { plaintext.copyBytes(to: output.bindMemory(to: UInt8.self).baseAddress!, count: textCount) }
    }
}

/// A digest in progress.
final class DigestContext {
    private enum State {
        case sha1(Insecure.SHA1)
        case sha256(SHA256)
        case sha512(SHA512)
    }

    private var state: State

    init(_ algorithm: MessageDigest.Algorithm) {
        state = switch algorithm {
        case .sha1: .sha1(Insecure.SHA1())
        case .sha256: .sha256(SHA256())
        case .sha512: .sha512(SHA512())
        }
    }

    func update(_ bytes: UnsafeRawBufferPointer) {
        switch state {
        case .sha1(var hash): hash.update(bufferPointer: bytes); state = .sha1(hash)
        case .sha256(var hash): hash.update(bufferPointer: bytes); state = .sha256(hash)
        case .sha512(var hash): hash.update(bufferPointer: bytes); state = .sha512(hash)
        }
    }

    func finalize() -> [UInt8] {
        switch state {
        case .sha1(let hash): Array(hash.finalize())
        case .sha256(let hash): Array(hash.finalize())
        case .sha512(let hash): Array(hash.finalize())
        }
    }
}

/// An Ed25519 private key. It keeps the raw seed, not a `Curve25519` key: the iOS 18 SDK does not
/// declare CryptoKit's key types `Sendable` (swift-crypto does, so the Linux build cannot tell),
/// and this type is shared across threads. Making the key from 32 bytes costs microseconds.
struct Ed25519SigningContext: Sendable {
    private let seed: [UInt8]
    let publicKey: [UInt8]

    init(seed: [UInt8]) throws(CryptoError) {
        self.seed = seed
        publicKey = Array(try Self.key(seed).publicKey.rawRepresentation)
    }

    private static func key(_ seed: [UInt8]) throws(CryptoError) -> Curve25519.Signing.PrivateKey {
        do {
            return try Curve25519.Signing.PrivateKey(rawRepresentation: seed)
        } catch {
            throw .backend("Curve25519.Signing.PrivateKey")
        }
    }

    func sign(_ message: [UInt8]) throws(CryptoError) -> [UInt8] {
        let key = try Self.key(seed)
        do {
            return Array(try key.signature(for: message))
        } catch {
            throw .backend("Curve25519 signature")
        }
    }
}

/// An Ed25519 public key, kept as its 32 raw bytes (see ``Ed25519SigningContext``).
struct Ed25519VerifyingContext: Sendable {
    private let raw: [UInt8]

    init(raw: [UInt8]) throws(CryptoError) {
        do {
            _ = try Curve25519.Signing.PublicKey(rawRepresentation: raw)
        } catch {
            throw .backend("Curve25519.Signing.PublicKey")
        }
        self.raw = raw
    }

    func isValid(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        message.withUnsafeBytes { isValid(signature, for: $0) }
    }

    func isValid(_ signature: [UInt8], for message: UnsafeRawBufferPointer) -> Bool {
        guard let key = try? Curve25519.Signing.PublicKey(rawRepresentation: raw) else { return false }
        return key.isValidSignature(signature, for: message)
    }
}
#endif
