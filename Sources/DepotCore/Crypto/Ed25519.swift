/// Something that signs with an Ed25519 key: a key in memory (``Ed25519PrivateKey``), or one
/// held in a hardware token whose private half never leaves it (the `depot` CLI's PKCS#11 keys).
/// The offline documents (root documents, release statements) are signed through it.
public protocol Ed25519Signer: Sendable {
    /// The public half.
    var publicKey: Ed25519PublicKey { get }
    /// The 64-byte signature of `message`.
    func signature(for message: [UInt8]) throws -> [UInt8]
}

/// An Ed25519 signing key (RFC 8032).
///
/// OpenSSL on Linux signs deterministically, as RFC 8032 specifies; CryptoKit on Apple
/// platforms may add randomness to each signature, which verifies all the same.
public final class Ed25519PrivateKey: Ed25519Signer {
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

    /// Loads a key from its 32 bytes; a key of small order or not canonically encoded is refused
    /// (``isWeak(_:)``).
    public init(rawRepresentation raw: [UInt8]) throws(CryptoError) {
        guard raw.count == 32 else { throw .invalidKeySize(expected: 32, got: raw.count) }
        guard !Self.isWeak(raw) else { throw .weakPublicKey }
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

    /// Encodings of the eight points of small order (and of y = p, p + 1, equal to 0 and 1), the
    /// sign bit aside: libsodium's blocklist. For such a key, R = the identity and S = 0 (or a few
    /// others) verify for every message under RFC 8032's cofactored or cofactorless check alike, so
    /// a planted one would let anyone sign after its planter was evicted.
    private static let smallOrder: [[UInt8]] = [
        [UInt8](repeating: 0, count: 32),                                   // 0 (order 4)
        [1] + [UInt8](repeating: 0, count: 31),                             // 1, the identity (order 1)
        Hex.decode("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05")!,  // order 8
        Hex.decode("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")!,  // order 8
        [0xec] + [UInt8](repeating: 0xff, count: 30) + [0x7f],              // p − 1 (order 2)
        [0xed] + [UInt8](repeating: 0xff, count: 30) + [0x7f],              // p = 0 (order 4)
        [0xee] + [UInt8](repeating: 0xff, count: 30) + [0x7f],              // p + 1 = 1 (order 1)
    ]

    /// Whether `raw` encodes a point of small order, or y ≥ p (a non-canonical encoding, which
    /// implementations decode differently).
    public static func isWeak(_ raw: [UInt8]) -> Bool {
        guard raw.count == 32 else { return true }
        var y = raw
        y[31] &= 0x7f
        if smallOrder.contains(y) { return true }
        // y ≥ p = 2^255 − 19: bytes 1…30 all 0xff, the top byte 0x7f, the lowest at least 0xed.
        return y[31] == 0x7f && y[1..<31].allSatisfy { $0 == 0xff } && y[0] >= 0xed
    }

    public static func == (lhs: Ed25519PublicKey, rhs: Ed25519PublicKey) -> Bool {
        lhs.rawRepresentation == rhs.rawRepresentation
    }
    public func hash(into hasher: inout Hasher) { hasher.combine(rawRepresentation) }
}
