import DepotCore
import Foundation
import Logging
import Synchronization

/// Makes patch downloads after a release, in the background: for each pack of an unmanaged
/// app's live releases that changed, a delta (DepotCore's "Delta" format) from each of its last
/// `depth` earlier revisions to the new plaintext, encrypted as a pack container under the
/// app's current pack key and stored as a blob like any pack. When a channel's patches are
/// stored, the channel's packs are published again with them as the next release (the same
/// containers and revisions: a device with the current revision downloads nothing). A release
/// never waits for this; a manifest without patches is complete.
///
/// A zip pack, which a device keeps unpacked, gets a tree patch (DepotCore's ``TreePatch``): its
/// entries taken from the installed tree, patched, or sent whole. Not patched: managed apps'
/// archives (the system downloads those), and a patch that would not save a tenth of the pack.
final class PatchMaker: Sendable {
    private let releases: ReleaseStore
    private let blobs: any BlobStore
    private let apps: AppStore
    private let folder: DataFolder
    private let urls: PublicURL
    private let storing: BlobsInFlight
    private let logger: Logger
    private let settings: @Sendable (String) -> AppSettings?
    /// How many earlier revisions of a pack get a patch to the new one.
    let depth: Int
    private let queue = DispatchQueue(label: "assetdepot.patches")
    private let scheduled = Mutex<Set<String>>([])
    /// `app/pack@revision` already tried in this process (made, or not worth making).
    private let tried = Mutex<Set<String>>([])

    init(
        releases: ReleaseStore, blobs: any BlobStore, apps: AppStore, folder: DataFolder, urls: PublicURL, storing: BlobsInFlight,
        logger: Logger, depth: Int, settings: @escaping @Sendable (String) -> AppSettings?
    ) {
        (self.releases, self.blobs, self.apps, self.folder, self.urls, self.storing) = (releases, blobs, apps, folder, urls, storing)
        (self.logger, self.depth, self.settings) = (logger, depth, settings)
    }

    /// Makes `app`'s missing patches soon, off the caller's thread (coalesced).
    func schedule(_ app: String) {
        guard depth > 0, scheduled.withLock({ $0.insert(app).inserted }) else { return }
        queue.async { [self] in
            scheduled.withLock { _ = $0.remove(app) }
            do {
                try make(app)
            } catch {
                logger.warning("could not make patches", metadata: ["app": .string(app), "error": .string("\(error)")])
            }
        }
    }

    /// Waits until every patch scheduled so far is made (tests, and a stopping server).
    func waitUntilIdle() { queue.sync {} }

    /// Every channel of `app`: the patches its live release lacks, then a release naming them.
    func make(_ app: String) throws {
        guard let settings = settings(app), !settings.isManaged else { return }
        let history = try releases.list(app)
        for channel in releases.channels(app).keys.sorted() {
            guard let live = try releases.current(app, channel: channel) else { continue }
            var made: [String: [PackPatch]] = [:]
            var holding: [String] = []
            defer { for sha256 in holding { storing.end(sha256) } }
            for entry in live.manifest.packs where entry.patches == nil && !entry.keyID.isEmpty {
                let key = "\(app)/\(entry.id)@\(entry.revision)"
                guard tried.withLock({ $0.insert(key).inserted }) else { continue }
                let earlier = Self.earlierRevisions(of: entry, in: history, depth: depth)
                guard !earlier.isEmpty else { continue }
                let started = ContinuousClock.now
                let patches = try patches(for: entry, from: earlier, app: app, holding: &holding)
                logger.info("made patches", metadata: [
                    "app": .string(app), "pack": .string(entry.id), "revision": .stringConvertible(entry.revision),
                    "from": .string(patches.map { "\($0.fromRevision):\($0.size)" }.joined(separator: ",")),
                    "seconds": .stringConvertible((ContinuousClock.now - started).components.seconds),
                ])
                if !patches.isEmpty { made[entry.id] = patches }
            }
            guard !made.isEmpty else { continue }
            let version = live.version
            _ = try releases.publish(app, channel: channel, change: { packs in
                // Only onto the revisions the patches were made for; a publish that came first wins.
                var changed = false
                let updated = packs.map { pack -> PackEntry in
                    guard pack.patches == nil, let patches = made[pack.id], let madeFor = live.manifest[pack: pack.id],
                          madeFor.sha256 == pack.sha256, madeFor.revision == pack.revision else { return pack }
                    var pack = pack
                    pack.patches = patches
                    changed = true
                    return pack
                }
                return changed ? updated : nil
            })
            logger.info("released patches", metadata: ["app": .string(app), "channel": .string(channel), "after": .stringConvertible(version)])
        }
    }

    /// The pack's earlier revisions any release named, newest first, at most `depth`.
    static func earlierRevisions(of entry: PackEntry, in history: [Manifest], depth: Int) -> [PackEntry] {
        var seen = Set<Int>()
        var out: [PackEntry] = []
        for manifest in history.sorted(by: { $0.version > $1.version }) {
            guard let old = manifest[pack: entry.id], old.revision < entry.revision, old.plaintextSHA256 != entry.plaintextSHA256,
                  !old.keyID.isEmpty, ZipPack.isZip(contentType: old.contentType) == ZipPack.isZip(contentType: entry.contentType),
                  seen.insert(old.revision).inserted else { continue }
            out.append(old)
            if out.count == depth { break }
        }
        return out
    }

    /// Decrypts the new revision once, then for each earlier one: decrypt, delta, encrypt, store.
    private func patches(for entry: PackEntry, from earlier: [PackEntry], app: String, holding: inout [String]) throws -> [PackPatch] {
        let keys = try apps.packKeys(app)
        let scratch = folder.uploads + "/patch-" + Hex.encode(SecureRandom.bytes(8))
        let zip = ZipPack.isZip(contentType: entry.contentType)
        defer {
            for suffix in [".new", ".old", ".delta", ".container"] { FileSystem.remove(scratch + suffix) }
            for suffix in [".new-tree", ".old-tree"] { try? FileManager.default.removeItem(atPath: scratch + suffix) }
        }
        guard try decrypt(entry, to: scratch + ".new", keys: keys.ring) else { return [] }
        if zip { try ZipPack.extract(scratch + ".new", into: scratch + ".new-tree") }
        var out: [PackPatch] = []
        for old in earlier {
            guard try decrypt(old, to: scratch + ".old", keys: keys.ring) else { continue }
            let size: Int64
            if zip {
                // A device keeps a zip unpacked: the patch is made between the two trees.
                try? FileManager.default.removeItem(atPath: scratch + ".old-tree")
                try ZipPack.extract(scratch + ".old", into: scratch + ".old-tree")
                size = try TreePatch.make(base: scratch + ".old-tree", target: scratch + ".new-tree", to: scratch + ".delta").size
            } else {
                // The plaintexts' SHA-256 are the manifest's: their containers' hashes and every
                // segment's authentication were checked as they were decrypted.
                guard let oldDigest = Hex.decode(old.plaintextSHA256), let newDigest = Hex.decode(entry.plaintextSHA256) else { continue }
                size = try DeltaEncoder.encode(
                    base: scratch + ".old", target: scratch + ".new", to: scratch + ".delta", baseSHA256: oldDigest, targetSHA256: newDigest
                ).size
            }
            // Worth it only if it saves a tenth of the pack.
            guard size * 10 < entry.size * 9 else { continue }
            let container = try encrypt(scratch + ".delta", to: scratch + ".container", keys: keys)
            storing.begin(container.sha256)
            holding.append(container.sha256)
            try blobs.put(temporaryFile: scratch + ".container", sha256: container.sha256)
            out.append(PackPatch(
                fromRevision: old.revision, fromPlaintextSHA256: old.plaintextSHA256, url: urls.blob(app, container.sha256), size: container.size,
                sha256: container.sha256
            ))
        }
        return out
    }

    /// A revision's plaintext, from its blob; false if the blob is gone.
    private func decrypt(_ entry: PackEntry, to path: String, keys: KeyRing) throws -> Bool {
        guard let blob = try blobs.open(entry.sha256) else { return false }
        defer { try? blob.file.close() }
        let summary = try PackDecryptor.decrypt(blob.file, to: path, keyRing: keys, expectedSize: entry.size, hashingPlaintext: false)
        guard summary.sha256 == entry.sha256 else { throw DepotError.conflict("blob_mismatch", "blob \(entry.sha256) does not hash to its name") }
        return true
    }

    /// The delta as a pack container under the app's current key.
    private func encrypt(_ path: String, to destination: String, keys: (ring: KeyRing, current: String)) throws -> PackSummary {
        let output = try FileDescriptor(path: destination, flags: O_WRONLY | O_CREAT | O_TRUNC, mode: 0o644)
        let encryptor = try PackEncryptor(header: PackHeader(keyID: keys.current), masterKey: keys.ring[keys.current]!) { try output.write($0) }
        let input = try FileDescriptor.openForReading(path)
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = try buffer.withUnsafeMutableBytes { try input.read(into: $0) }
            if n == 0 { break }
            try buffer.withUnsafeBytes { try encryptor.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }
        let summary = try encryptor.finish()
        try output.sync()
        try output.close()
        return summary
    }
}
