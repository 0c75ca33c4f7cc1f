// Also compiled into CryptoKitBackendTests, against the CryptoKit backend.
#if DEPOT_CRYPTOKIT
import DepotCoreCryptoKit
#else
import DepotCore
#endif
import Foundation
import Testing

/// A fixed key ring and a small segment size, so that tampering can hit every boundary.
private let master = [UInt8](repeating: 0x42, count: 32)
private let ring = try! KeyRing(["k1": master])
private let segment: UInt32 = 64

private func pack(_ plaintext: [UInt8], segmentSize: UInt32 = segment, key: [UInt8] = master, keyID: String = "k1") throws -> [UInt8] {
    try PackEncryptor.encrypt(plaintext, header: PackHeader(keyID: keyID, segmentSize: segmentSize), masterKey: key)
}

private func kind(of body: () throws -> Void) -> PackError.Kind? {
    do { try body() } catch let error as PackError { return error.kind } catch { return nil }
    return nil
}

@Suite("Pack container v1")
struct PackContainerTests {
    @Test("Round trip and exact size formula", arguments: [0, 1, 63, 64, 65, 128, 200, 1000])
    func roundTrip(size: Int) throws {
        let plaintext = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let header = PackHeader(keyID: "k1", segmentSize: segment)
        let container = try PackEncryptor.encrypt(plaintext, header: header, masterKey: master)
        #expect(Int64(container.count) == header.containerSize(plaintextSize: Int64(size)))
        #expect(Int64(container.count) == Int64(header.encodedSize) + Int64(size) + 16 * max(1, Int64((size + 63) / 64)))
        #expect(try PackDecryptor.decrypt(container, keyRing: ring) == plaintext)
        let summary = try PackDecryptor.verify(MemorySource(container), keyRing: ring)
        #expect(summary.plaintextSize == Int64(size))
        #expect(summary.sha256 == Hex.encode(SHA256Hasher.hash(container)))
        #expect(summary.plaintextSHA256 == Hex.encode(SHA256Hasher.hash(plaintext)))
    }

    @Test("Streaming in odd chunk sizes gives a valid pack of the computed size")
    func streamingChunks() throws {
        let plaintext = (0..<5000).map { UInt8(truncatingIfNeeded: $0) }
        var out: [UInt8] = []
        let header = PackHeader(keyID: "k1", segmentSize: segment)
        let encryptor = try PackEncryptor(header: header, masterKey: master) { out.append(contentsOf: $0) }
        var offset = 0
        var step = 1
        while offset < plaintext.count {
            let n = min(step, plaintext.count - offset)
            try encryptor.update(Array(plaintext[offset..<(offset + n)]))
            offset += n
            step = step * 3 % 97 + 1
        }
        let summary = try encryptor.finish()
        #expect(summary.size == Int64(out.count))
        #expect(summary.size == header.containerSize(plaintextSize: 5000))
        #expect(try PackDecryptor.decrypt(out, keyRing: ring) == plaintext)
    }

    @Test("The worked example in the PackContainer article")
    func workedExample() throws {
        let header = PackHeader(
            keyID: "k1", segmentSize: 16,
            salt: (0..<32).map { UInt8($0) }, noncePrefix: [0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6]
        )
        let master = (0..<32).map { UInt8(0x80 + $0) }
        let container = try PackEncryptor.encrypt(Array("AssetDepot pack v1 example".utf8), header: header, masterKey: master)
        #expect(Hex.encode(try header.dataKey(master: master)) == WorkedExample.dataKey)
        #expect(Hex.encode(container) == WorkedExample.container)
    }

    @Test("Header parser names each bad field")
    func headerErrors() throws {
        let good = try pack([1, 2, 3])
        #expect(kind { _ = try PackHeader.parse(Array(good.prefix(3))) } == .headerTruncated)
        #expect(kind { _ = try PackHeader.parse(Array(good.prefix(30))) } == .headerTruncated)
        var bad = good; bad[0] = 0x58
        #expect(kind { _ = try PackHeader.parse(bad) } == .badMagic)
        bad = good; bad[4] = 2
        #expect(kind { _ = try PackHeader.parse(bad) } == .unsupportedVersion)
        bad = good; bad[5] = 9
        #expect(kind { _ = try PackHeader.parse(bad) } == .unsupportedAlgorithm)
        bad = good; bad[6] = 0xff
        #expect(kind { _ = try PackHeader.parse(bad) } == .invalidSegmentSize)
        bad = good; bad[6] = 0; bad[7] = 0; bad[8] = 0; bad[9] = 0
        #expect(kind { _ = try PackHeader.parse(bad) } == .invalidSegmentSize)
        bad = good; bad[10] = 0
        #expect(kind { _ = try PackHeader.parse(bad) } == .invalidKeyID)
        bad = good; bad[11] = 0xff
        #expect(kind { _ = try PackHeader.parse(bad) } == .invalidKeyID)
    }

    @Test("Truncation at every segment boundary is reported as truncation")
    func truncationAtBoundaries() throws {
        let plaintext = [UInt8](repeating: 7, count: 64 * 5 + 10)
        let container = try pack(plaintext)
        let headerSize = PackHeader(keyID: "k1").encodedSize
        for segments in 0..<6 {
            let cut = Array(container.prefix(headerSize + segments * (64 + 16)))
            #expect(kind { _ = try PackDecryptor.decrypt(cut, keyRing: ring) } == .truncated, "cut after \(segments) segments")
        }
        // Cut inside the last tag: shorter than a tag after a full record.
        let cut = Array(container.prefix(headerSize + 5 * 80 + 8))
        #expect(kind { _ = try PackDecryptor.decrypt(cut, keyRing: ring) } == .truncated)
    }

    @Test("Last segment dropped, segments swapped, duplicated, appended")
    func reordering() throws {
        let plaintext = (0..<(64 * 4 + 20)).map { UInt8(truncatingIfNeeded: $0) }
        let container = try pack(plaintext)
        let h = PackHeader(keyID: "k1").encodedSize
        func seg(_ i: Int) -> [UInt8] { Array(container[(h + i * 80)..<min(container.count, h + (i + 1) * 80)]) }
        let head = Array(container.prefix(h))

        #expect(kind { _ = try PackDecryptor.decrypt(head + seg(0) + seg(1) + seg(2) + seg(3), keyRing: ring) } == .truncated)
        #expect(kind { _ = try PackDecryptor.decrypt(head + seg(0) + seg(2) + seg(1) + seg(3) + seg(4), keyRing: ring) } == .segmentOutOfOrder)
        #expect(kind { _ = try PackDecryptor.decrypt(head + seg(1) + seg(0) + seg(2) + seg(3) + seg(4), keyRing: ring) } == .segmentOutOfOrder)
        #expect(kind { _ = try PackDecryptor.decrypt(head + seg(0) + seg(1) + seg(1) + seg(2) + seg(3) + seg(4), keyRing: ring) } == .segmentOutOfOrder)
        // Final segment moved to the middle: it authenticates as a final segment with data after it.
        #expect(kind { _ = try PackDecryptor.decrypt(head + seg(0) + seg(1) + seg(2) + seg(3) + seg(0) + seg(4), keyRing: ring) } == .segmentOutOfOrder)
        let fullLast = try pack([UInt8](repeating: 1, count: 64 * 3))
        let tail = Array(fullLast.suffix(80))
        #expect(kind { _ = try PackDecryptor.decrypt(fullLast + tail, keyRing: ring) } == .trailingData)
    }

    @Test("A segment spliced from another pack under the same master key")
    func splice() throws {
        let a = try pack([UInt8](repeating: 1, count: 64 * 3 + 5))
        let b = try pack([UInt8](repeating: 1, count: 64 * 3 + 5))
        let h = PackHeader(keyID: "k1").encodedSize
        var spliced = a
        spliced.replaceSubrange((h + 80)..<(h + 160), with: b[(h + 80)..<(h + 160)])
        #expect(kind { _ = try PackDecryptor.decrypt(spliced, keyRing: ring) } == .segmentCorrupted)
        spliced = a
        spliced.replaceSubrange(h..<(h + 80), with: b[h..<(h + 80)])
        #expect(kind { _ = try PackDecryptor.decrypt(spliced, keyRing: ring) } == .segmentCorrupted)
    }

    @Test("One flipped bit anywhere fails with a specific error and releases nothing")
    func bitFlips() throws {
        let plaintext = (0..<(64 * 2 + 9)).map { UInt8(truncatingIfNeeded: $0 * 5) }
        let container = try pack(plaintext)
        let h = PackHeader(keyID: "k1").encodedSize
        let headerKinds: Set<PackError.Kind> = [.badMagic, .unsupportedVersion, .unsupportedAlgorithm, .invalidSegmentSize,
                                                .invalidKeyID, .unknownKeyID, .headerTruncated, .keyMismatch, .truncated]
        for byte in 0..<container.count {
            for bit in [0, 7] {
                var damaged = container
                damaged[byte] ^= UInt8(1 << bit)
                var released = 0
                let k = kind { _ = try PackDecryptor.process(MemorySource(damaged), keyRing: ring) { released += $0.count } }
                #expect(k != nil, "byte \(byte) bit \(bit) went unnoticed")
                if byte < h {
                    #expect(headerKinds.contains(k ?? .sizeMismatch), "header byte \(byte): \(String(describing: k))")
                    #expect(released == 0)
                } else {
                    #expect(k == .segmentCorrupted, "byte \(byte): \(String(describing: k))")
                }
            }
        }
    }

    @Test("Wrong key id and wrong key")
    func wrongKeys() throws {
        let container = try pack([1, 2, 3, 4], key: master, keyID: "k2")
        #expect(kind { _ = try PackDecryptor.decrypt(container, keyRing: ring) } == .unknownKeyID)
        let other = try KeyRing(["k1": [UInt8](repeating: 0x43, count: 32)])
        let mine = try pack([UInt8](repeating: 3, count: 300))
        #expect(kind { _ = try PackDecryptor.decrypt(mine, keyRing: other) } == .keyMismatch)
    }

    @Test("decrypt(file:to:) writes nothing for a damaged pack and keeps the old file")
    func atomicFileDecryption() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("depot-pack-\(UInt32.random(in: 0...UInt32.max))").path
        try FileSystem.createDirectory(dir)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let plaintext = [UInt8](repeating: 9, count: 64 * 3 + 1)
        var container = try pack(plaintext)
        try FileSystem.writeAtomically(container, to: dir + "/good.pack")
        try PackDecryptor.decrypt(file: dir + "/good.pack", to: dir + "/out", keyRing: ring)
        #expect(try FileSystem.readFile(dir + "/out") == plaintext)

        container[container.count - 1] ^= 1
        try FileSystem.writeAtomically(container, to: dir + "/bad.pack")
        #expect(kind { try PackDecryptor.decrypt(file: dir + "/bad.pack", to: dir + "/out", keyRing: ring) } == .segmentCorrupted)
        #expect(try FileSystem.readFile(dir + "/out") == plaintext)
        #expect(FileSystem.contents(of: dir).sorted() == ["bad.pack", "good.pack", "out"])
        #expect(kind { try PackDecryptor.decrypt(file: dir + "/good.pack", to: dir + "/x", keyRing: ring, expectedSize: 5) } == .sizeMismatch)
    }
}
