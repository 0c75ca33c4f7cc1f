internal import COpenSSL

/// An Ed25519 signing key (RFC 8032), held as an OpenSSL `EVP_PKEY`.
public final class Ed25519PrivateKey: @unchecked Sendable {
    // @unchecked: owns an immutable EVP_PKEY; OpenSSL allows concurrent signing with one key.
    private let key: OpaquePointer
    /// The 32-byte seed.
    public let rawRepresentation: [UInt8]
    /// The matching public key.
    public let publicKey: Ed25519PublicKey

    /// Creates a new random key.
    public convenience init() {
        try! self.init(rawRepresentation: SecureRandom.bytes(32))
    }

    /// Loads a key from its 32-byte seed.
    public init(rawRepresentation seed: [UInt8]) throws(CryptoError) {
        guard seed.count == 32 else { throw .invalidKeySize(expected: 32, got: seed.count) }
        guard let key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, seed, 32) else {
            throw .openSSL("EVP_PKEY_new_raw_private_key")
        }
        self.key = key
        self.rawRepresentation = seed
        var pub = [UInt8](repeating: 0, count: 32)
        var length = 32
        guard EVP_PKEY_get_raw_public_key(key, &pub, &length) == 1, length == 32 else {
            EVP_PKEY_free(key)
            throw .openSSL("EVP_PKEY_get_raw_public_key")
        }
        self.publicKey = try Ed25519PublicKey(rawRepresentation: pub)
    }

    deinit { EVP_PKEY_free(key) }

    /// Signs a message; Ed25519 signatures are deterministic and 64 bytes long.
    public func signature(for message: [UInt8]) throws(CryptoError) -> [UInt8] {
        guard let ctx = EVP_MD_CTX_new() else { throw .openSSL("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, nil, nil, key) == 1 else { throw .openSSL("EVP_DigestSignInit") }
        var signature = [UInt8](repeating: 0, count: 64)
        var length = 64
        guard EVP_DigestSign(ctx, &signature, &length, message, message.count) == 1, length == 64 else {
            throw .openSSL("EVP_DigestSign")
        }
        return signature
    }
}

/// An Ed25519 public key, held as an OpenSSL `EVP_PKEY`.
public final class Ed25519PublicKey: @unchecked Sendable, Hashable {
    // @unchecked: owns an immutable EVP_PKEY; verification with one key is thread-safe in OpenSSL.
    private let key: OpaquePointer
    /// The 32-byte encoded point.
    public let rawRepresentation: [UInt8]

    /// Loads a key from its 32 bytes.
    public init(rawRepresentation raw: [UInt8]) throws(CryptoError) {
        guard raw.count == 32 else { throw .invalidKeySize(expected: 32, got: raw.count) }
        guard let key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, raw, 32) else {
            throw .openSSL("EVP_PKEY_new_raw_public_key")
        }
        self.key = key
        self.rawRepresentation = raw
    }

    deinit { EVP_PKEY_free(key) }

    /// Whether `signature` is a valid signature of `message` by this key.
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        guard signature.count == 64, let ctx = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestVerifyInit(ctx, nil, nil, nil, key) == 1 else { return false }
        return EVP_DigestVerify(ctx, signature, 64, message, message.count) == 1
    }

    public static func == (lhs: Ed25519PublicKey, rhs: Ed25519PublicKey) -> Bool {
        lhs.rawRepresentation == rhs.rawRepresentation
    }
    public func hash(into hasher: inout Hasher) { hasher.combine(rawRepresentation) }
}
