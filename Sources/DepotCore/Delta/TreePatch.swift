import Foundation

/// A patch for a zip pack, which a device keeps unpacked as a folder: the new revision's tree,
/// entry by entry, each taken from the installed tree (checked by SHA-256), patched from one of
/// its files (a <doc:Delta>), or sent whole. Entries the new tree lacks are not listed, so they
/// are gone from the result. The DocC article "Delta" specifies it beside the file delta.
///
///     "ADTR" version 1, flags 0, varint entry count, then per entry:
///     varint path length, path (UTF-8, the zip's rules: relative, no "..", no "\", no NUL)
///     kind: 0 folder · 1 keep · 2 delta · 3 data
///     files: 32-byte SHA-256 and varint size of the resulting file, then
///       keep:  varint length, path of the installed file to take
///       delta: varint length, path of the installed file to patch; varint length, delta bytes
///       data:  varint length, the bytes
public enum TreePatch {
    public static let magic: [UInt8] = Array("ADTR".utf8)

    enum Kind: UInt8 { case folder = 0, keep = 1, delta = 2, data = 3 }

    /// What a tree patch holds.
    public struct Summary: Sendable, Equatable {
        public var size: Int64
        public var kept = 0, patched = 0, sent = 0
    }

    // MARK: Making one

    /// Writes the patch that turns the tree at `base` into the tree at `target` (both unpacked
    /// zips) into `output`. A file is kept when the base has the same bytes (at its own path or
    /// another), patched when a delta from the base's file at the same path saves a tenth, and
    /// sent whole otherwise.
    @discardableResult
    public static func make(base: String, target: String, to output: String) throws -> Summary {
        var byDigest: [String: String] = [:]
        for path in files(under: base) {
            let digest = try SHA256Hasher.hexDigest(ofFile: base + "/" + path)
            if byDigest[digest] == nil { byDigest[digest] = path }
        }
        let file = try FileDescriptor(path: output, flags: O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600)
        var summary = Summary(size: 0)
        func write(_ bytes: [UInt8]) throws {
            try file.write(bytes)
            summary.size += Int64(bytes.count)
        }
        func string(_ text: String) -> [UInt8] { DeltaFormat.varint(UInt64(text.utf8.count)) + Array(text.utf8) }
        let entries = entries(under: target)
        try write(magic + [1, 0] + DeltaFormat.varint(UInt64(entries.count)))
        let scratch = output + ".entry-delta"
        defer { FileSystem.remove(scratch) }
        for (path, isFolder) in entries {
            if isFolder {
                try write(string(path) + [Kind.folder.rawValue])
                continue
            }
            let full = target + "/" + path
            let digest = try SHA256Hasher.hexDigest(ofFile: full)
            let size = FileSystem.fileSize(full) ?? 0
            func head(_ kind: Kind) -> [UInt8] { string(path) + [kind.rawValue] + Hex.decode(digest)! + DeltaFormat.varint(UInt64(size)) }
            if let same = byDigest[digest] {
                try write(head(.keep) + string(same))
                summary.kept += 1
                continue
            }
            let old = base + "/" + path
            if FileSystem.exists(old) && !FileSystem.isDirectory(old),
               let delta = try? DeltaEncoder.encode(base: old, target: full, to: scratch), delta.size * 10 < size * 9 {
                try write(head(.delta) + string(path) + DeltaFormat.varint(UInt64(delta.size)))
                try append(scratch, to: file, count: delta.size)
                summary.size += delta.size
                summary.patched += 1
                continue
            }
            let record = head(.data)
            try write(record + DeltaFormat.varint(UInt64(size)))
            try append(full, to: file, count: size)
            summary.size += size
            summary.sent += 1
        }
        try file.sync()
        return summary
    }

    private static func append(_ path: String, to file: FileDescriptor, count: Int64) throws {
        let input = try FileDescriptor.openForReading(path)
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var left = count
        while left > 0 {
            let n = try buffer.withUnsafeMutableBytes { try input.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<Int(min(Int64($0.count), left))])) }
            guard n > 0 else { throw DeltaError.malformed("\(path) changed while it was read") }
            try buffer.withUnsafeBytes { try file.write(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            left -= Int64(n)
        }
    }

    /// Every file and folder under `root`, relative, sorted (folders before what they hold).
    static func entries(under root: String, _ prefix: String = "") -> [(path: String, isFolder: Bool)] {
        var out: [(String, Bool)] = []
        for name in FileSystem.contents(of: root + (prefix.isEmpty ? "" : "/" + prefix)) {
            let path = prefix.isEmpty ? name : prefix + "/" + name
            if FileSystem.isDirectory(root + "/" + path) {
                out.append((path, true))
                out += entries(under: root, path)
            } else {
                out.append((path, false))
            }
        }
        return out
    }

    static func files(under root: String) -> [String] { entries(under: root).filter { !$0.isFolder }.map(\.path) }

    // MARK: Applying one

    /// Builds the new tree in `staged` (which must not exist) from the installed tree at `base`
    /// and the patch at `patch`. Every path is checked against the zip rules before it is used;
    /// every file written, kept or patched must have the SHA-256 the patch states. The files'
    /// declared sizes may add up to at most `limit` bytes, checked before each file is written.
    /// A base file that is missing or cannot be opened is a `DeltaError` of the base (the
    /// installed tree is not the patch's base). What was built so far stays for the caller to
    /// remove if this throws.
    public static func apply(patch path: String, base: String, into staged: String, limit: Int64 = .max) throws {
        var reader = try PatchReader(FileDescriptor.openForReading(path))
        guard try reader.bytes(6) == magic + [1, 0] else { throw DeltaError.malformed("not an ADTR tree patch of version 1") }
        try FileSystem.createDirectory(staged, durable: false)
        let count = try reader.varint()
        guard count <= 1_000_000 else { throw DeltaError.malformed("\(count) entries (at most 1,000,000)") }
        var declared: UInt64 = 0
        func baseFile(_ relative: String) throws -> FileDescriptor {
            do { return try FileDescriptor.openForReading(base + "/" + relative) } catch {
                throw DeltaError.baseMismatch("the installed file \(relative) cannot be read: \(error)")
            }
        }
        func string() throws -> String {
            let length = try reader.varint()
            guard length <= 4096 else { throw DeltaError.malformed("a path of \(length) bytes") }
            let bytes = try reader.bytes(Int(length))
            guard let text = String(bytes: bytes, encoding: .utf8) else { throw DeltaError.malformed("a path that is not UTF-8") }
            return text
        }
        func checked(_ path: String) throws -> String {
            if let why = ZipEntryPath.refusal(path, isLink: false) { throw DeltaError.malformed("entry \(path): \(why)") }
            return path
        }
        for _ in 0..<count {
            let path = try checked(try string())
            guard let kindByte = try reader.byte(), let kind = Kind(rawValue: kindByte) else { throw DeltaError.malformed("an unknown entry kind for \(path)") }
            let destination = staged + "/" + path
            try FileSystem.createDirectory(FileSystem.directory(of: destination), durable: false)
            if kind == .folder {
                try FileSystem.createDirectory(destination, durable: false)
                continue
            }
            let digest = try reader.bytes(32)
            let size = try reader.varint()
            guard size <= UInt64(max(0, limit)) - min(UInt64(max(0, limit)), declared) else {
                throw DeltaError.malformed("entry \(path): its \(size) bytes take the tree past the \(limit) bytes it may have")
            }
            declared += size
            let output = try FileDescriptor(path: destination, flags: O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
            let hasher = SHA256Hasher()
            var written: UInt64 = 0
            let sink: (UnsafeRawBufferPointer) throws -> Void = { bytes in
                // Never more than the entry states: a patch cannot fill the disk past its sizes.
                guard UInt64(bytes.count) <= size - written else { throw DeltaError.resultMismatch("entry \(path) runs past its \(size) bytes") }
                hasher.update(bytes)
                written += UInt64(bytes.count)
                try output.write(bytes)
            }
            switch kind {
            case .keep:
                let source = try baseFile(checked(try string()))
                var buffer = [UInt8](repeating: 0, count: 1 << 20)
                while true {
                    let n = try buffer.withUnsafeMutableBytes { try source.read(into: $0) }
                    if n == 0 { break }
                    try buffer.withUnsafeBytes { try sink(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
                }
            case .delta:
                let old = try baseFile(checked(try string()))
                // The entry's delta goes to a file first: the decoder reads it at its own pace.
                let deltaPath = staged + ".delta"
                defer { FileSystem.remove(deltaPath) }
                let deltaFile = try FileDescriptor(path: deltaPath, flags: O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600)
                var left = try reader.varint()
                while left > 0 {
                    let piece = try reader.piece(max: Int(min(UInt64(DeltaDecoder.chunk), left)))
                    try deltaFile.write(piece)
                    left -= UInt64(piece.count)
                }
                try deltaFile.close()
                try DeltaDecoder.apply(patch: FileDescriptor.openForReading(deltaPath), base: old, accepting: { header in
                    guard header.targetSize == Int64(clamping: size) else { throw DeltaError.malformed("entry \(path): its delta makes \(header.targetSize) bytes, the entry states \(size)") }
                }, into: sink)
            case .data:
                var left = try reader.varint()
                while left > 0 {
                    let piece = try reader.piece(max: Int(min(UInt64(DeltaDecoder.chunk), left)))
                    try piece.withUnsafeBytes { try sink($0) }
                    left -= UInt64(piece.count)
                }
            case .folder:
                break
            }
            // Synced with the whole tree at the end (``ZipPack/syncTree(_:_:)``: one drive flush).
            try output.close()
            guard written == size, hasher.finalize() == digest else {
                throw DeltaError.resultMismatch("entry \(path) is not the file the patch describes")
            }
        }
        guard reader.atEnd else { throw DeltaError.malformed("bytes after the last entry") }
        try ZipPack.syncTree(staged)
    }
}
