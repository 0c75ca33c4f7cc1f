/// What an encryption produced: the numbers a manifest entry states.
public struct PackSummary: Hashable, Sendable, Codable {
    /// Container size in bytes (what is stored and downloaded).
    public var size: Int64
    /// SHA-256 of the container, lower-case hex.
    public var sha256: String
    /// Plaintext size in bytes.
    public var plaintextSize: Int64
    /// SHA-256 of the plaintext, lower-case hex.
    public var plaintextSHA256: String
    /// The key id the pack is encrypted under.
    public var keyID: String

    public init(size: Int64, sha256: String, plaintextSize: Int64, plaintextSHA256: String, keyID: String) {
        self.size = size
        self.sha256 = sha256
        self.plaintextSize = plaintextSize
        self.plaintextSHA256 = plaintextSHA256
        self.keyID = keyID
    }
}
