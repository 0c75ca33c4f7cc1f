/// An error from the cryptographic layer: the backend (OpenSSL or CryptoKit) refused an
/// operation, or an input had the wrong shape.
public struct CryptoError: Error, Hashable, Sendable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case openSSL(String)
        case backend(String)
        case invalidKeySize(expected: Int, got: Int)
        case invalidNonceSize
        case authenticationFailed
        case invalidSignature
        case weakPublicKey
    }
    private let code: Code

    /// OpenSSL reported a failure in the named call.
    public static func openSSL(_ call: String) -> CryptoError { CryptoError(code: .openSSL(call)) }
    /// The backend refused an operation.
    public static func backend(_ what: String) -> CryptoError { CryptoError(code: .backend(what)) }
    /// A key had the wrong length.
    public static func invalidKeySize(expected: Int, got: Int) -> CryptoError {
        CryptoError(code: .invalidKeySize(expected: expected, got: got))
    }
    /// A nonce had the wrong length.
    public static let invalidNonceSize = CryptoError(code: .invalidNonceSize)
    /// An AEAD tag did not verify.
    public static let authenticationFailed = CryptoError(code: .authenticationFailed)
    /// A signature did not verify.
    public static let invalidSignature = CryptoError(code: .invalidSignature)
    /// An Ed25519 public key of small order, or not canonically encoded: refused wherever a key is read.
    public static let weakPublicKey = CryptoError(code: .weakPublicKey)

    public var description: String {
        switch code {
        case .openSSL(let call): return "OpenSSL call \(call) failed"
        case .backend(let what): return "\(CryptoBackend.name): \(what) failed"
        case .invalidKeySize(let expected, let got): return "key must be \(expected) bytes, got \(got)"
        case .invalidNonceSize: return "nonce must be 12 bytes"
        case .authenticationFailed: return "authentication tag did not verify"
        case .invalidSignature: return "signature did not verify"
        case .weakPublicKey: return "an Ed25519 public key of small order or not canonically encoded (a point anyone can forge signatures for)"
        }
    }
}
