/// The header of a pack container v1.
///
/// Layout: magic `ADPK`, version (1), algorithm (1 = AES-256-GCM with HKDF-SHA256),
/// plaintext segment size (big-endian u32), key id (u8 length, UTF-8 bytes),
/// 32-byte salt, 7-byte nonce prefix. See <doc:PackContainer>.
public struct PackHeader: Hashable, Sendable {
    /// The four magic bytes, `ADPK`.
    public static let magic: [UInt8] = Array("ADPK".utf8)
    /// The only version written and read.
    public static let version: UInt8 = 1
    /// AES-256-GCM segments with an HKDF-SHA256 data key.
    public static let algorithmAES256GCM: UInt8 = 1
    /// The default plaintext segment size: 1 MiB.
    public static let defaultSegmentSize: UInt32 = 1 << 20
    /// The largest segment size accepted when reading: 16 MiB, to bound memory.
    public static let maximumSegmentSize: UInt32 = 16 << 20
    /// The length of the salt.
    public static let saltSize = 32
    /// The length of the nonce prefix.
    public static let noncePrefixSize = 7
    /// The smallest possible header (a one-byte key id).
    public static let minimumSize = 4 + 1 + 1 + 4 + 1 + 1 + saltSize + noncePrefixSize

    /// Plaintext bytes per segment (the last segment may be shorter).
    public var segmentSize: UInt32
    /// Which master key of the key ring encrypts this pack.
    public var keyID: String
    /// The HKDF salt, random per pack.
    public var salt: [UInt8]
    /// The first seven bytes of every segment nonce, random per pack.
    public var noncePrefix: [UInt8]

    /// A header with the given fields; `salt` and `noncePrefix` default to fresh random bytes.
    public init(
        keyID: String, segmentSize: UInt32 = PackHeader.defaultSegmentSize,
        salt: [UInt8] = SecureRandom.bytes(PackHeader.saltSize),
        noncePrefix: [UInt8] = SecureRandom.bytes(PackHeader.noncePrefixSize)
    ) {
        self.keyID = keyID
        self.segmentSize = segmentSize
        self.salt = salt
        self.noncePrefix = noncePrefix
    }

    /// The encoded header: the additional authenticated data of every segment.
    public var encoded: [UInt8] {
        let id = Array(keyID.utf8)
        var out = Self.magic
        out.append(Self.version)
        out.append(Self.algorithmAES256GCM)
        out.append(contentsOf: [UInt8(segmentSize >> 24), UInt8(segmentSize >> 16 & 0xff), UInt8(segmentSize >> 8 & 0xff), UInt8(segmentSize & 0xff)])
        out.append(UInt8(id.count))
        out.append(contentsOf: id)
        out.append(contentsOf: salt)
        out.append(contentsOf: noncePrefix)
        return out
    }

    /// The encoded length in bytes.
    public var encodedSize: Int { Self.minimumSize - 1 + keyID.utf8.count }

    /// Parses a header from the start of `bytes`; returns it and its encoded length.
    ///
    /// Needs at most `minimumSize + 254` bytes; throws a specific ``PackError`` on any bad field.
    public static func parse(_ bytes: some Collection<UInt8>) throws(PackError) -> (header: PackHeader, size: Int) {
        let b = Array(bytes.prefix(minimumSize + 255))
        guard b.count >= 11 else {
            if b.count >= 4, Array(b[0..<4]) != magic { throw .badMagic }
            throw .headerTruncated
        }
        guard Array(b[0..<4]) == magic else { throw .badMagic }
        guard b[4] == version else { throw .unsupportedVersion(b[4]) }
        guard b[5] == algorithmAES256GCM else { throw .unsupportedAlgorithm(b[5]) }
        let segment = UInt32(b[6]) << 24 | UInt32(b[7]) << 16 | UInt32(b[8]) << 8 | UInt32(b[9])
        guard segment > 0, segment <= maximumSegmentSize else { throw .invalidSegmentSize(segment) }
        let idLength = Int(b[10])
        guard idLength > 0 else { throw .invalidKeyID }
        let total = 11 + idLength + saltSize + noncePrefixSize
        guard b.count >= total else { throw .headerTruncated }
        guard let id = String(validating: b[11..<(11 + idLength)], as: UTF8.self) else { throw .invalidKeyID }
        let saltStart = 11 + idLength
        let header = PackHeader(
            keyID: id, segmentSize: segment,
            salt: Array(b[saltStart..<(saltStart + saltSize)]),
            noncePrefix: Array(b[(saltStart + saltSize)..<total])
        )
        return (header, total)
    }

    /// The nonce of segment `index`: prefix ‖ BE32(index) ‖ (1 if final else 0).
    public func nonce(segment index: UInt32, final: Bool) -> [UInt8] {
        var nonce = noncePrefix
        nonce.append(contentsOf: [UInt8(index >> 24), UInt8(index >> 16 & 0xff), UInt8(index >> 8 & 0xff), UInt8(index & 0xff)])
        nonce.append(final ? 1 : 0)
        return nonce
    }

    /// The per-pack data key: HKDF-SHA256(master, salt, "assetdepot pack v1" + key id).
    public func dataKey(master: [UInt8]) throws(CryptoError) -> [UInt8] {
        try HKDF.deriveKey(
            inputKeyMaterial: master, salt: salt,
            info: Array("assetdepot pack v1".utf8) + Array(keyID.utf8), length: 32
        )
    }

    /// Number of segments for `plaintextSize` bytes: max(1, ceil(plaintext / segment)).
    public func segmentCount(plaintextSize: Int64) -> Int64 {
        let segment = Int64(segmentSize)
        return max(1, (plaintextSize + segment - 1) / segment)
    }

    /// The exact container size for `plaintextSize` bytes: header + plaintext + 16 × segments.
    public func containerSize(plaintextSize: Int64) -> Int64 {
        Int64(encodedSize) + plaintextSize + Int64(AES256GCM.tagSize) * segmentCount(plaintextSize: plaintextSize)
    }

    /// The plaintext size and segment count implied by a container of `containerSize` bytes.
    public func layout(containerSize: Int64) throws(PackError) -> (plaintextSize: Int64, segments: Int64) {
        let body = containerSize - Int64(encodedSize)
        let record = Int64(segmentSize) + Int64(AES256GCM.tagSize)
        guard body >= Int64(AES256GCM.tagSize) else { throw .truncated("no complete segment after the header") }
        let full = body / record
        let rest = body % record
        if rest == 0 { return (full * Int64(segmentSize), full) }
        guard rest >= Int64(AES256GCM.tagSize) else { throw .truncated("the last segment is shorter than its tag") }
        return (full * Int64(segmentSize) + rest - Int64(AES256GCM.tagSize), full + 1)
    }
}
