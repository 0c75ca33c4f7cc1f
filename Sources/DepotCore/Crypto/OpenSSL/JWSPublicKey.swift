// Signature checks for JSON Web Signatures (RFC 7515/7518): RS256 and ES256 with a public key
// taken from a JWK (RFC 7517). Part of the OpenSSL backend, so COpenSSL stays in this folder;
// the server verifies CI jobs' OIDC tokens with it. Apple platforms have no use for it.
#if !canImport(CryptoKit) && !DEPOT_CRYPTOKIT
internal import COpenSSL

/// The two JWS algorithms AssetDepot accepts. Never `none`, never an HMAC: a public key can
/// only verify, so a token "signed" with one as an HMAC secret is refused by construction.
public enum JWSAlgorithm: String, Sendable, CaseIterable {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    case rs256 = "RS256"
    /// ECDSA on P-256 with SHA-256; the signature is r‖s, 64 bytes.
    case es256 = "ES256"
}

/// A public key that verifies JWS signatures of one algorithm. Owns one `EVP_PKEY`.
public final class JWSPublicKey: @unchecked Sendable {
    // @unchecked: owns an immutable EVP_PKEY; verification with one key is thread-safe in OpenSSL.
    private let key: OpaquePointer
    /// The algorithm this key verifies (RSA keys: RS256; P-256 keys: ES256).
    public let algorithm: JWSAlgorithm

    /// An RSA key from its modulus and public exponent (big-endian, as a JWK's `n` and `e`
    /// decode). Moduli of 2048 to 4096 bits only: shorter ones are forgeable; no issuer uses
    /// longer ones, and the check below costs a prime's worth of exponentiations on them.
    ///
    /// A JWKS comes from whoever answers at the issuer's address, so a key anyone could sign
    /// for is refused, by OpenSSL's public-key check (`EVP_PKEY_public_check`: an odd modulus
    /// with no factor under 752, not a prime nor a prime's power — with a prime modulus p,
    /// d = e⁻¹ mod p−1 is anyone's — and an odd e above 1) and, before it, the exponent: odd, at
    /// least 3 and under 2³². e = 1 makes the bare padded digest a valid signature. e = 3 is
    /// kept: with a verifier that compares the whole encoding, as OpenSSL's does, it is no
    /// weaker for verifying, and an issuer may use it; only FIPS profiles require 65537 and up,
    /// and every platform issuer uses 65537. The 32-bit bound is Go's `crypto/rsa`'s: a larger
    /// exponent only costs a verifier time.
    public init(rsaModulus n: [UInt8], exponent e: [UInt8]) throws(CryptoError) {
        let modulus = Array(n.drop { $0 == 0 })
        guard (2048...4096).contains(modulus.count * 8 - (modulus.first.map { $0.leadingZeroBitCount } ?? 8)) else {
            throw .invalidKeySize(expected: 256, got: modulus.count)
        }
        let exponent = Array(e.drop { $0 == 0 })
        guard (1...4).contains(exponent.count) else { throw .backend("RSA exponent of \(exponent.count) bytes (at most 4)") }
        let value = exponent.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        guard value >= 3, value & 1 == 1 else { throw .backend("RSA exponent \(value): it must be odd and at least 3") }
        guard let key = COpenSSL_rsa_public_key(modulus, modulus.count, exponent, exponent.count) else { throw .openSSL("EVP_PKEY_fromdata (RSA)") }
        self.key = key
        algorithm = .rs256
        guard let check = EVP_PKEY_CTX_new_from_pkey(nil, key, nil) else { throw .openSSL("EVP_PKEY_CTX_new_from_pkey") }
        defer { EVP_PKEY_CTX_free(check) }
        guard EVP_PKEY_public_check(check) == 1 else {
            ERR_clear_error()
            throw .backend("the RSA key fails OpenSSL's public-key check (a prime or even modulus, or one with a small factor)")
        }
    }

    /// A P-256 key from its affine coordinates (32 bytes each, as a JWK's `x` and `y` decode).
    /// A point not on the curve is refused.
    public init(p256X x: [UInt8], y: [UInt8]) throws(CryptoError) {
        guard x.count == 32, y.count == 32 else { throw .invalidKeySize(expected: 32, got: x.count == 32 ? y.count : x.count) }
        let point = [0x04] + x + y
        guard let key = COpenSSL_p256_public_key(point, point.count) else { throw .openSSL("EVP_PKEY_fromdata (P-256)") }
        self.key = key
        algorithm = .es256
        // EVP_PKEY_fromdata takes any bytes as "pub"; a point off the curve fails the check.
        guard let check = EVP_PKEY_CTX_new_from_pkey(nil, key, nil) else { throw .openSSL("EVP_PKEY_CTX_new_from_pkey") }
        defer { EVP_PKEY_CTX_free(check) }
        guard EVP_PKEY_public_check(check) == 1 else { throw .backend("the point is not on P-256") }
    }

    deinit { EVP_PKEY_free(key) }

    /// Whether `signature` (the JWS signature, decoded) signs `message` (the ASCII of
    /// `header.payload`) under this key's algorithm.
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        let encoded: [UInt8]
        switch algorithm {
        case .rs256:
            guard signature.count == (Int(EVP_PKEY_get_bits(key)) + 7) / 8 else { return false }
            encoded = signature
        case .es256:
            guard signature.count == 64, let der = Self.derECDSA(r: signature[0..<32], s: signature[32..<64]) else { return false }
            encoded = der
        }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key) == 1 else { return false }
        return EVP_DigestVerify(context, encoded, encoded.count, message, message.count) == 1
    }

    /// JWS's r‖s as the DER `SEQUENCE { INTEGER r, INTEGER s }` OpenSSL verifies; nil for a zero
    /// half (never a valid signature).
    static func derECDSA(r: ArraySlice<UInt8>, s: ArraySlice<UInt8>) -> [UInt8]? {
        func integer(_ bytes: ArraySlice<UInt8>) -> [UInt8]? {
            var value = Array(bytes.drop { $0 == 0 })
            guard !value.isEmpty else { return nil }
            if value[0] & 0x80 != 0 { value.insert(0, at: 0) }
            return [0x02, UInt8(value.count)] + value
        }
        guard let r = integer(r), let s = integer(s) else { return nil }
        return [0x30, UInt8(r.count + s.count)] + r + s
    }
}
#endif
