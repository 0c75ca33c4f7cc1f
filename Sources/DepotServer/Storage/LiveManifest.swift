import DepotCore
import DepotHTTP
import Foundation
import Synchronization

/// A live release as served: the envelope's bytes (held once, in the memory responses are sent
/// from), its ETag and the few facts the routes read per request. The decoded manifest is not
/// kept: a channel's live release costs its bytes, not the several times as much its decoded
/// packs take (300 channels each serving a 3,500-pack release kept ~1.5 GB decoded); the paths
/// that need the packs (a publish, the Info.plist keys once per release, a report's listing once
/// per release, the hourly sweep) decode them again.
///
/// The envelope's bytes are kept in memory up to the origin's budget (``LiveCache``,
/// `--manifest-memory`); past it a channel's live release keeps only its facts and the file it
/// was read from (the release, or its signed copy for the channel), and is sent from that file
/// (the page cache keeps what is asked often, as for blobs).
struct LiveManifest: Sendable {
    let version: Int
    /// The envelope as every response sends it, when kept in memory; nil: sent from ``file``.
    let body: SharedBytes?
    /// Where the envelope's bytes are on disk (the file it was read from or written to), and the
    /// inode they were in: a file replaced since (re-signed) is not these bytes any more.
    let file: EnvelopeFile?
    /// The envelope's size in bytes.
    let size: Int
    let etag: String
    let publishedAt: Date
    let expiresAt: Date
    /// The channel the manifest names (nil: signed before manifests named one).
    let channel: String?
    let rollout: Rollout?
    /// Its packs and its rollout's candidates.
    let entryCount: Int

    /// `path`: the file holding exactly `envelope` (read from it, or written to it), if any: a
    /// release past the memory budget is sent from it.
    init(version: Int, envelope: [UInt8], etag: String, manifest: Manifest, path: String? = nil) {
        (self.version, body, self.etag, size) = (version, SharedBytes(envelope), etag, envelope.count)
        (publishedAt, expiresAt, channel, rollout) = (manifest.publishedAt, manifest.expiresAt, manifest.channel, manifest.rollout)
        entryCount = manifest.allEntries.count
        file = path.flatMap { EnvelopeFile(path: $0, size: envelope.count) }
        DecodedManifests.shared.keep(manifest, etag: etag)
    }

    private init(_ other: LiveManifest, body: SharedBytes?) {
        (version, self.body, file, size, etag) = (other.version, body, other.file, other.size, other.etag)
        (publishedAt, expiresAt, channel, rollout, entryCount) = (other.publishedAt, other.expiresAt, other.channel, other.rollout, other.entryCount)
    }

    /// The same release with its bytes left on disk (nil: it has no file to be sent from).
    func onFile() -> LiveManifest? { file == nil ? nil : LiveManifest(self, body: nil) }

    /// A copy of the envelope's bytes (read from its file past the memory budget).
    var envelope: [UInt8] {
        get throws {
            if let body { return body.bytes }
            guard let opened = file?.open() else { throw Self.replaced }
            defer { try? opened.close() }
            var bytes = [UInt8](repeating: 0, count: size)
            let count = try bytes.withUnsafeMutableBytes { try opened.readFully(into: $0) }
            guard count == size else { throw Self.replaced }
            return bytes
        }
    }

    static let replaced = HTTPFailure(status: 503, code: "manifest_busy", message: "the live manifest's file was replaced while it was being read; ask again", headers: [("Retry-After", "1")])

    /// The manifest, decoded from the envelope again (the last few decoded are kept: a publisher
    /// staging packs one by one decodes the live manifest once, not once per pack).
    var manifest: Manifest {
        get throws {
            if let kept = DecodedManifests.shared.kept(etag) { return kept }
            let decoded = try ReleaseStore.decodeManifest(envelope)
            DecodedManifests.shared.keep(decoded, etag: etag)
            return decoded
        }
    }
}

/// A live envelope's file: its path and the inode and size it had when its bytes were known.
struct EnvelopeFile: Sendable {
    let path: String
    let device: UInt64
    let inode: UInt64
    let size: Int
    /// The inode's change time, in nanoseconds: an inode number reused by a later file of the
    /// same size (a copy re-signed twice) still differs in it.
    let changed: Int64

    init?(path: String, size: Int) {
        var info = stat()
        guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG, Int(info.st_size) == size else { return nil }
        (self.path, device, inode, self.size, changed) = (path, UInt64(info.st_dev), UInt64(info.st_ino), size, Self.changeTime(info))
    }

    private static func changeTime(_ info: stat) -> Int64 { Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec) }

    /// The file opened for reading, if it is still the same one (a rename puts a new inode at
    /// the path: a re-signed copy is other bytes).
    func open() -> FileDescriptor? {
        guard let opened = try? FileDescriptor(path: path, flags: O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) else { return nil }
        var info = stat()
        guard fstat(opened.rawValue, &info) == 0, info.st_mode & S_IFMT == S_IFREG, UInt64(info.st_dev) == device, UInt64(info.st_ino) == inode,
              Int(info.st_size) == size, Self.changeTime(info) == changed else {
            try? opened.close()
            return nil
        }
        return opened
    }
}

/// Every channel's live release, by `app NUL channel`: envelopes in memory up to `budget` bytes
/// in all (`depot serve --manifest-memory`), the rest sent from their files.
struct LiveCache: Sendable {
    private(set) var entries: [String: LiveManifest] = [:]
    /// Envelope bytes held in memory, and how many releases are sent from their files.
    private(set) var bytes = 0
    let budget: Int

    init(budget: Int) { self.budget = budget }

    var keys: [String] { Array(entries.keys) }
    var onFile: Int { entries.values.count { $0.body == nil } }

    subscript(key: String) -> LiveManifest? {
        get { entries[key] }
        set {
            if let old = entries[key], let body = old.body { bytes -= body.count }
            guard var value = newValue else {
                entries[key] = nil
                return
            }
            if let body = value.body {
                if bytes + body.count > budget, let onFile = value.onFile() {
                    value = onFile
                } else {
                    bytes += body.count
                }
            }
            entries[key] = value
        }
    }
}

/// The last few live manifests decoded, by ETag (a handful: their memory is what keeping every
/// channel's decoded manifest cost).
final class DecodedManifests: Sendable {
    static let shared = DecodedManifests()
    static let limit = 2
    private let recent = Mutex<[(etag: String, manifest: Manifest)]>([])

    func kept(_ etag: String) -> Manifest? {
        recent.withLock { recent in recent.first { $0.etag == etag }?.manifest }
    }

    func keep(_ manifest: Manifest, etag: String) {
        recent.withLock { recent in
            recent.removeAll { $0.etag == etag }
            recent.insert((etag, manifest), at: 0)
            if recent.count > Self.limit { recent.removeLast() }
        }
    }
}
