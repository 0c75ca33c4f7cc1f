/// An Ed25519 signing key (RFC 8032).
///
/// OpenSSL on Linux signs deterministically, as RFC 8032 specifies; CryptoKit on Apple
/// platforms may add randomness to each signature, which verifies all the same.
public final class Ed25519PrivateKey: Sendable {
    private let context: Ed25519SigningContext
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
        context = try Ed25519SigningContext(seed: seed)
        rawRepresentation = seed
        publicKey = try Ed25519PublicKey(rawRepresentation: context.publicKey)
    }

    /// Signs a message; the signature is 64 bytes long.
    public func signature(for message: [UInt8]) throws(CryptoError) -> [UInt8] {
        try context.sign(message)
    }
}

/// An Ed25519 public key.
public final class Ed25519PublicKey: Sendable, Hashable {
    private let context: Ed25519VerifyingContext
    /// The 32-byte encoded point.
    public let rawRepresentation: [UInt8]

    /// Loads a key from its 32 bytes.
    public init(rawRepresentation raw: [UInt8]) throws(CryptoError) {
        guard raw.count == 32 else { throw .invalidKeySize(expected: 32, got: raw.count) }
        context = try Ed25519VerifyingContext(raw: raw)
        rawRepresentation = raw
    }

    /// Whether `signature` is a valid signature of `message` by this key.
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        signature.count == 64 && context.isValid(signature, for: message)
    }

    /// ``isValidSignature(_:for:)`` over memory the caller owns (no copy of a large message).
    func isValidSignature(_ signature: [UInt8], for message: UnsafeRawBufferPointer) -> Bool {
        signature.count == 64 && context.isValid(signature, for: message)
    }

    public static func == (lhs: Ed25519PublicKey, rhs: Ed25519PublicKey) -> Bool {
        lhs.rawRepresentation == rhs.rawRepresentation
    }
    public func hash(into hasher: inout Hasher) { hasher.combine(rawRepresentation) }
}
