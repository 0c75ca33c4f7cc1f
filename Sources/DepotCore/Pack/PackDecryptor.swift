#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Bytes that can be read at any offset: a file, or memory in tests.
public protocol RandomAccessSource {
    /// The total size in bytes.
    func size() throws -> Int64
    /// Fills as much of `buffer` as the source has from `offset`; returns the count.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int
}

extension FileDescriptor: RandomAccessSource {}

/// An in-memory ``RandomAccessSource``.
public struct MemorySource: RandomAccessSource {
    /// The bytes.
    public var bytes: [UInt8]
    public init(_ bytes: [UInt8]) { self.bytes = bytes }
    public func size() -> Int64 { Int64(bytes.count) }
    public func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) -> Int {
        guard offset < Int64(bytes.count) else { return 0 }
        let count = min(buffer.count, bytes.count - Int(offset))
        bytes.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + Int(offset), byteCount: count) }
        return count
    }
}

/// Decrypts and authenticates a pack container v1, segment by segment, with bounded memory.
///
/// Plaintext reaches the caller's file only through ``decrypt(file:to:keyRing:expectedSize:hashingPlaintext:sync:)``,
/// which writes a temporary file and renames it into place after the last segment verified:
/// a damaged pack leaves nothing behind. See <doc:PackContainer>.
public enum PackDecryptor {
    /// The largest number of other indices tried when classifying a failed segment.
    static let reorderSearchLimit = 1024

    /// Authenticates and decrypts `source`, passing each verified segment's plaintext to `sink`.
    ///
    /// The sink sees segments before the whole pack is verified; use it only with a sink that
    /// discards its output on error (as ``decrypt(file:to:keyRing:expectedSize:hashingPlaintext:sync:)`` does).
    ///
    /// Without `hashingPlaintext` the summary's ``PackSummary/plaintextSHA256`` is empty: a
    /// caller that checks the container's SHA-256 against a signed manifest needs no second
    /// hash, since the authenticated decryption of those exact bytes has one possible result.
    public static func process(
        _ source: some RandomAccessSource, keyRing: KeyRing, expectedSize: Int64? = nil, hashingPlaintext: Bool = true,
        sink: (UnsafeRawBufferPointer) throws -> Void
    ) throws -> PackSummary {
        let size = try source.size()
        if let expectedSize, expectedSize != size { throw PackError.sizeMismatch(expected: expectedSize, actual: size) }
        var head = [UInt8](repeating: 0, count: PackHeader.minimumSize + 255)
        let headCount = try head.withUnsafeMutableBytes { try source.read(into: $0, at: 0) }
        let (header, headerSize) = try PackHeader.parse(head[0..<headCount])
        let encodedHeader = Array(head[0..<headerSize])
        guard let master = keyRing[header.keyID] else { throw PackError.unknownKeyID(header.keyID) }
        let cipher = try AES256GCM(key: header.dataKey(master: master))
        let (plaintextSize, segments) = try header.layout(containerSize: size)

        // Both SHA-256s on threads of their own, while this one reads, decrypts and hands out the
        // same bytes: two buffers of each, so that the next segment goes on while the previous
        // one is still being hashed.
        let containerHash = BackgroundHasher(prefix: encodedHeader)
        let plaintextHash = hashingPlaintext ? BackgroundHasher(prefix: []) : nil
        let segmentSize = Int(header.segmentSize)
        let record = segmentSize + AES256GCM.tagSize
        let buffers = (0..<2).map { _ in UnsafeMutableRawBufferPointer.allocate(byteCount: record, alignment: 64) }
        let plains = (0..<2).map { _ in UnsafeMutableRawBufferPointer.allocate(byteCount: max(segmentSize, 1), alignment: 64) }
        defer {
            containerHash.stop()
            plaintextHash?.stop()
            (buffers + plains).forEach { $0.deallocate() }
        }
        var offset = Int64(headerSize)
        for index in 0..<Int(segments) {
            let isLast = index == Int(segments) - 1
            let count = isLast ? Int(size - offset) : record
            // This buffer was hashed two segments ago, and submit() below waited for that.
            let sealed = UnsafeMutableRawBufferPointer(rebasing: buffers[index % 2][0..<count])
            let got = try source.read(into: sealed, at: offset)
            guard got == count else { throw PackError.truncated("the file shrank while it was read") }
            containerHash.submit(UnsafeRawBufferPointer(sealed))
            let nonce = header.nonce(segment: UInt32(index), final: isLast)
            let plain = plains[index % 2]
            do {
                try cipher.open(UnsafeRawBufferPointer(sealed), nonce: nonce, aad: encodedHeader, into: plain)
            } catch {
                throw classify(
                    failedSegment: index, of: Int(segments), sealed: Array(sealed), header: header,
                    encodedHeader: encodedHeader, cipher: cipher, source: source, headerSize: headerSize, size: size
                )
            }
            let text = UnsafeRawBufferPointer(rebasing: plain[0..<(count - AES256GCM.tagSize)])
            plaintextHash?.submit(text)
            try sink(text)
            offset += Int64(count)
        }
        return PackSummary(
            size: size, sha256: Hex.encode(containerHash.finalize()), plaintextSize: plaintextSize,
            plaintextSHA256: plaintextHash.map { Hex.encode($0.finalize()) } ?? "", keyID: header.keyID
        )
    }

    /// Decrypts the pack at `path` into `destination`, atomically and durably.
    ///
    /// The plaintext is written to a temporary file beside `destination`, fsynced and renamed
    /// over it only after every segment authenticated; on any error the temporary file is removed
    /// and `destination` is untouched.
    @discardableResult
    public static func decrypt(
        file path: String, to destination: String, keyRing: KeyRing, expectedSize: Int64? = nil, hashingPlaintext: Bool = true,
        sync: SyncLevel = .full
    ) throws -> PackSummary {
        try decrypt(FileDescriptor.openForReading(path), to: destination, keyRing: keyRing, expectedSize: expectedSize, hashingPlaintext: hashingPlaintext, sync: sync)
    }

    /// Decrypts `source` into `destination`, atomically and durably, as ``decrypt(file:to:keyRing:expectedSize:hashingPlaintext:sync:)``.
    /// `sync` is how far the file and its folder are synced (``SyncLevel``): `.ordered` for a
    /// caller that flushes the drive once itself, after more files.
    @discardableResult
    public static func decrypt(
        _ source: some RandomAccessSource, to destination: String, keyRing: KeyRing, expectedSize: Int64? = nil, hashingPlaintext: Bool = true,
        sync: SyncLevel = .full
    ) throws -> PackSummary {
        let temporary = FileSystem.temporaryPath(besides: destination)
        do {
            let output = try FileDescriptor(path: temporary, flags: O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
            var behind = WriteBehind()
            let summary = try process(source, keyRing: keyRing, expectedSize: expectedSize, hashingPlaintext: hashingPlaintext) { bytes in
                try output.write(bytes)
                behind.wrote(bytes.count, to: output)
            }
            try output.sync(sync)
            try output.close()
            try FileSystem.durableRename(temporary, to: destination, sync)
            return summary
        } catch {
            FileSystem.remove(temporary)
            throw error
        }
    }

    /// Verifies a pack without keeping its plaintext.
    public static func verify(_ source: some RandomAccessSource, keyRing: KeyRing, expectedSize: Int64? = nil) throws -> PackSummary {
        try process(source, keyRing: keyRing, expectedSize: expectedSize) { _ in }
    }

    /// Decrypts a whole container in memory (tests and small inputs).
    public static func decrypt(_ container: [UInt8], keyRing: KeyRing) throws -> [UInt8] {
        var out: [UInt8] = []
        _ = try process(MemorySource(container), keyRing: keyRing) { out.append(contentsOf: $0) }
        return out
    }

    /// Names the damage behind a segment that did not authenticate.
    private static func classify(
        failedSegment index: Int, of segments: Int, sealed: [UInt8], header: PackHeader, encodedHeader: [UInt8],
        cipher: AES256GCM, source: some RandomAccessSource, headerSize: Int, size: Int64
    ) -> PackError {
        func opens(_ bytes: [UInt8], as position: Int, final: Bool) -> Bool {
            var scratch = [UInt8](repeating: 0, count: max(1, bytes.count))
            let nonce = header.nonce(segment: UInt32(position), final: final)
            return (try? bytes.withUnsafeBytes { s in
                try scratch.withUnsafeMutableBytes { try cipher.open(s, nonce: nonce, aad: encodedHeader, into: $0) }
            }) != nil
        }
        let isLast = index == segments - 1
        // The right segment with the wrong final flag: the stream was cut, or extended.
        if opens(sealed, as: index, final: !isLast) {
            return isLast ? .truncated("segment \(index) is not the final segment; the rest is missing") : .trailingData(segment: index)
        }
        // A segment of this pack at the wrong place.
        // Original indices may run past the current count when segments were dropped as well.
        let upper = segments + 64
        var tried = 0
        var distance = 1
        while tried < reorderSearchLimit {
            let below = index - distance, above = index + distance
            if below < 0 && above >= upper { break }
            for candidate in [below, above] where candidate >= 0 && candidate < upper {
                tried += 1
                if opens(sealed, as: candidate, final: false) || opens(sealed, as: candidate, final: true) {
                    return .segmentOutOfOrder(index: index, belongsAt: candidate)
                }
            }
            distance += 1
        }
        if index > 0 { return .segmentCorrupted(index: index) }
        // Segment 0 failed: if another segment authenticates, key and header are right.
        let record = Int64(header.segmentSize) + Int64(AES256GCM.tagSize)
        for other in [1, segments - 1] where other > 0 && other < segments {
            let start = Int64(headerSize) + Int64(other) * record
            let length = other == segments - 1 ? Int(size - start) : Int(record)
            var bytes = [UInt8](repeating: 0, count: length)
            let got = (try? bytes.withUnsafeMutableBytes { try source.read(into: $0, at: start) }) ?? 0
            if got == length && opens(bytes, as: other, final: other == segments - 1) { return .segmentCorrupted(index: 0) }
        }
        return .keyMismatch
    }
}
