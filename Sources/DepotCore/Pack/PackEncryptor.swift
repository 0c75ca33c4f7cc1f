/// Encrypts a stream of plaintext into a pack container v1, pushed chunk by chunk.
///
/// Holds two segments of plaintext and two of ciphertext, whatever the pack size: a segment is
/// sealed as soon as the next byte proves it is not the last. The container's SHA-256 and the
/// plaintext's are computed on threads of their own (`BackgroundHasher`) while the caller's
/// thread receives, encrypts and writes the next segment. See <doc:PackContainer>.
public final class PackEncryptor {
    /// The header written at the start of the container.
    public let header: PackHeader
    private let encodedHeader: [UInt8]
    private let cipher: AES256GCM
    private let sink: (UnsafeRawBufferPointer) throws -> Void
    private let segmentSize: Int
    /// Two of each, taken in turn: one is being hashed while the other fills.
    private let plains: [UnsafeMutableRawBufferPointer]
    private let seals: [UnsafeMutableRawBufferPointer]
    private let headerBytes: UnsafeMutableRawBufferPointer
    private var turn = 0
    private var pendingCount = 0
    private var segmentIndex: UInt32 = 0
    private let containerHash = BackgroundHasher(prefix: [])
    private let plaintextHash = BackgroundHasher(prefix: [])
    private var plaintextSize: Int64 = 0
    private var containerSize: Int64 = 0
    private var started = false
    private var finished = false
    /// Set when this encryptor took over a container another one started.
    private var resumed = false

    /// Prepares an encryptor; nothing is written until the first ``update(_:)-([UInt8])`` or ``finish()``.
    ///
    /// - Parameters:
    ///   - header: the header (key id, segment size, fresh salt and nonce prefix).
    ///   - masterKey: the 32-byte master key named by `header.keyID`.
    ///   - sink: receives the container bytes in order.
    public init(
        header: PackHeader, masterKey: [UInt8], sink: @escaping (UnsafeRawBufferPointer) throws -> Void
    ) throws(CryptoError) {
        guard masterKey.count == 32 else { throw .invalidKeySize(expected: 32, got: masterKey.count) }
        self.header = header
        self.encodedHeader = header.encoded
        self.cipher = try AES256GCM(key: header.dataKey(master: masterKey))
        self.sink = sink
        self.segmentSize = Int(header.segmentSize)
        plains = (0..<2).map { _ in UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, Int(header.segmentSize)), alignment: 64) }
        seals = (0..<2).map { _ in UnsafeMutableRawBufferPointer.allocate(byteCount: Int(header.segmentSize) + AES256GCM.tagSize, alignment: 64) }
        headerBytes = UnsafeMutableRawBufferPointer.allocate(byteCount: encodedHeader.count, alignment: 8)
        encodedHeader.withUnsafeBytes { headerBytes.copyMemory(from: $0) }
    }

    deinit {
        containerHash.stop()
        plaintextHash.stop()
        (plains + seals + [headerBytes]).forEach { $0.deallocate() }
    }

    /// Takes over a container that another encryptor began (a resumable upload across requests
    /// and restarts): `sealedSegments` segments are already written after the header, and
    /// `pending` (at most one segment) is plaintext received but not yet sealed.
    ///
    /// Writes no header. It sees only part of the pack, so it cannot report the pack's size and
    /// hashes: end it with ``sealFinal()``, and verify the finished container for those.
    public convenience init(
        resuming header: PackHeader, masterKey: [UInt8], sealedSegments: UInt32, pending: [UInt8],
        sink: @escaping (UnsafeRawBufferPointer) throws -> Void
    ) throws(CryptoError) {
        precondition(pending.count <= Int(header.segmentSize), "more than one segment pending")
        try self.init(header: header, masterKey: masterKey, sink: sink)
        started = true
        resumed = true
        segmentIndex = sealedSegments
        pending.withUnsafeBytes { plains[turn].copyMemory(from: $0) }
        pendingCount = pending.count
    }

    /// Takes over a container of which only the header is written (a resumable upload's first
    /// request): it sees the whole pack, so it reports the pack's size and hashes with
    /// ``finish()`` as a fresh encryptor does, and the container needs no second reading.
    public convenience init(
        continuingAfterHeader header: PackHeader, masterKey: [UInt8], sink: @escaping (UnsafeRawBufferPointer) throws -> Void
    ) throws(CryptoError) {
        try self.init(header: header, masterKey: masterKey, sink: sink)
        started = true
        containerHash.submit(UnsafeRawBufferPointer(headerBytes))
        containerSize = Int64(encodedHeader.count)
    }

    /// How many segments have been sealed and written so far.
    public var sealedSegments: UInt32 { segmentIndex }

    /// Plaintext received but not sealed yet: what a resumable upload keeps between requests.
    public var pendingPlaintext: [UInt8] { Array(plains[turn][0..<pendingCount]) }

    /// Adds plaintext.
    public func update(_ bytes: UnsafeRawBufferPointer) throws {
        precondition(!finished, "update after finish")
        try startIfNeeded()
        var offset = 0
        while offset < bytes.count {
            if pendingCount == segmentSize {
                try sealPending(final: false)
            }
            let take = min(segmentSize - pendingCount, bytes.count - offset)
            plains[turn].baseAddress!.advanced(by: pendingCount).copyMemory(from: bytes.baseAddress! + offset, byteCount: take)
            pendingCount += take
            offset += take
        }
        plaintextSize += Int64(bytes.count)
    }

    /// Adds plaintext.
    public func update(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try update($0) }
    }

    /// Seals the final segment and returns the container's numbers.
    public func finish() throws -> PackSummary {
        precondition(!resumed, "a resumed encryptor ends with sealFinal()")
        try sealFinal()
        return PackSummary(
            size: containerSize, sha256: Hex.encode(containerHash.finalize()),
            plaintextSize: plaintextSize, plaintextSHA256: Hex.encode(plaintextHash.finalize()),
            keyID: header.keyID
        )
    }

    /// Seals the final segment; the container is complete.
    public func sealFinal() throws {
        precondition(!finished, "finish called twice")
        try startIfNeeded()
        try sealPending(final: true)
        finished = true
    }

    private func startIfNeeded() throws {
        guard !started else { return }
        started = true
        try emit(UnsafeRawBufferPointer(headerBytes))
    }

    private func sealPending(final: Bool) throws {
        let nonce = header.nonce(segment: segmentIndex, final: final)
        let plain = UnsafeRawBufferPointer(rebasing: plains[turn][0..<pendingCount])
        try cipher.seal(plain, nonce: nonce, aad: encodedHeader, into: seals[turn])
        // Both buffers of this turn stay untouched until the hashers are done with them: the
        // next turn's submissions wait for that.
        plaintextHash.submit(plain)
        try emit(UnsafeRawBufferPointer(rebasing: seals[turn][0..<(pendingCount + AES256GCM.tagSize)]))
        turn ^= 1
        pendingCount = 0
        segmentIndex += 1
    }

    private func emit(_ bytes: UnsafeRawBufferPointer) throws {
        containerHash.submit(bytes)
        try sink(bytes)
        containerSize += Int64(bytes.count)
    }

    /// Encrypts a whole buffer in memory (tests and small inputs).
    public static func encrypt(_ plaintext: [UInt8], header: PackHeader, masterKey: [UInt8]) throws -> [UInt8] {
        var out: [UInt8] = []
        let encryptor = try PackEncryptor(header: header, masterKey: masterKey) { out.append(contentsOf: $0) }
        try encryptor.update(plaintext)
        _ = try encryptor.finish()
        return out
    }
}
