import DepotCore

/// What an upload's bytes go through on their way to a blob: encryption (``PackEncryptor``) for
/// an unmanaged app, a checked copy (``ArchiveWriter``) for a managed app's Apple Archive.
protocol PackTransform: AnyObject {
    func update(_ chunk: UnsafeRawBufferPointer) throws
    /// The last byte arrived: what was stored.
    func finish() throws -> PackSummary
}

extension PackEncryptor: PackTransform {}

/// A managed app's pack on its way in: stored as uploaded (the system unpacks it on the device),
/// hashed as it passes when it sees every byte, and refused with 422 before anything is written
/// unless it starts with an Apple Archive magic.
final class ArchiveWriter: PackTransform {
    /// The first bytes seen (up to four), to recognise the archive.
    private var prefix: [UInt8]
    private let sink: (UnsafeRawBufferPointer) throws -> Void
    private let hasher: SHA256Hasher?
    private var size: Int64 = 0

    /// `prefix`: the bytes already stored (a resumed upload's first ones); `hashing`: whether
    /// this writer sees every byte (otherwise the caller hashes the finished file).
    init(prefix: [UInt8] = [], hashing: Bool = true, sink: @escaping (UnsafeRawBufferPointer) throws -> Void) {
        self.prefix = Array(prefix.prefix(4))
        self.sink = sink
        hasher = hashing ? SHA256Hasher() : nil
    }

    func update(_ chunk: UnsafeRawBufferPointer) throws {
        if prefix.count < 4 {
            prefix += chunk.prefix(4 - prefix.count)
            if prefix.count == 4 && AppleArchive.kind(ofPrefix: prefix) == nil { throw Self.notAnArchive(prefix) }
        }
        hasher?.update(chunk)
        try sink(chunk)
        size += Int64(chunk.count)
    }

    func finish() throws -> PackSummary {
        guard prefix.count == 4 else { throw Self.notAnArchive(prefix) }
        let sha256 = Hex.encode(hasher?.finalize() ?? [])
        return PackSummary(size: size, sha256: sha256, plaintextSize: size, plaintextSHA256: sha256, keyID: "")
    }

    /// The summary of a stored archive file, hashed in one pass (an upload that spanned requests).
    static func summary(ofFile path: String) throws -> PackSummary {
        let file = try FileDescriptor.openForReading(path)
        defer { try? file.close() }
        let size = try file.size()
        let sha256 = try SHA256Hasher.hexDigest(ofFile: path)
        return PackSummary(size: size, sha256: sha256, plaintextSize: size, plaintextSHA256: sha256, keyID: "")
    }

    static func notAnArchive(_ prefix: [UInt8]) -> DepotError {
        let shown = prefix.isEmpty ? "an empty body" : "a body starting " + Hex.encode(prefix)
        return DepotError(
            .unprocessable, "not_an_apple_archive",
            "a managed app's packs are Apple Archives as ba-package builds them (starting AA01, pbze, pbzx, pbz4 or pbzz); got \(shown); nothing was stored"
        )
    }
}
