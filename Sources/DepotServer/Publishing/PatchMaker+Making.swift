import DepotCore
import Foundation
import Logging

/// Making one pack's patches within the limits: decrypt, unpack (zips), delta, encrypt, store.
extension PatchMaker {
    /// The patches to `entry` from each earlier revision that fits the limits, logged.
    func make(_ entry: PackEntry, from earlier: [ReleaseIndex.Revision], app: String) throws -> [PackPatch] {
        let started = ContinuousClock.now
        let patches = try patches(for: entry, from: earlier, app: app)
        logger.info("made patches", metadata: [
            "app": .string(app), "pack": .string(entry.id), "revision": .stringConvertible(entry.revision),
            "from": .string(patches.map { "\($0.fromRevision):\($0.size)" }.joined(separator: ",")),
            "seconds": .stringConvertible((ContinuousClock.now - started).components.seconds),
        ])
        return patches
    }

    /// Decrypts the new revision once, then for each earlier one: decrypt, delta, encrypt, store.
    /// Each step is checked against the limits first, with what it may write at most (a tree:
    /// its manifest's `installSize`, which unpacking enforces; a delta and its container: the
    /// new tree or plaintext, and a margin); unpacking also while it runs. Stored patch blobs
    /// are held against removal until released. A failure with one earlier revision skips it.
    private func patches(for entry: PackEntry, from earlier: [ReleaseIndex.Revision], app: String) throws -> [PackPatch] {
        let keys = try apps.packKeys(app)
        let scratch = folder.uploads + "/" + PatchLimits.scratchPrefix + Hex.encode(SecureRandom.bytes(8))
        let zip = ZipPack.isZip(contentType: entry.contentType)
        func clear(_ suffixes: [String]) {
            for suffix in suffixes {
                try? FileManager.default.removeItem(atPath: scratch + suffix)
            }
        }
        defer { clear([".new", ".old", ".delta", ".container", ".new-tree", ".old-tree"]) }
        var budget = ScratchBudget(limits: limits, volume: folder.uploads)
        let oldest = earlier.map { $0.size + (zip ? $0.installSize : 0) }.min() ?? 0
        let declaredTree = zip ? entry.installSize : 0
        if let refusal = budget.refusal(toWrite: entry.size + declaredTree + oldest + PatchLimits.deltaAndContainer(upTo: max(entry.size, declaredTree))) {
            skip(entry, app: app, refusal)
            return []
        }
        guard try decrypt(entry.sha256, size: entry.size, to: scratch + ".new", keys: keys.ring) else { return [] }
        budget.used = entry.size
        var target = entry.size
        if zip {
            guard let tree = try extract(scratch + ".new", into: scratch + ".new-tree", budget: budget, declared: entry.installSize, entry: entry, app: app) else { return [] }
            budget.used += tree
            target = max(target, tree)
        }
        var out: [PackPatch] = []
        for old in earlier {
            clear([".old", ".delta", ".container", ".old-tree"])
            if let refusal = budget.refusal(toWrite: old.size + (zip ? old.installSize : 0) + PatchLimits.deltaAndContainer(upTo: target)) {
                skip(entry, app: app, refusal, from: old.revision)
                continue
            }
            do {
                guard let patch = try patch(to: entry, from: old, zip: zip, scratch: scratch, budget: budget, target: target, keys: keys, app: app) else { continue }
                out.append(patch)
            } catch {
                interrupted.withLock { $0 = true }
                logger.warning("could not make a patch", metadata: [
                    "app": .string(app), "pack": .string(entry.id), "revision": .stringConvertible(entry.revision), "from": .stringConvertible(old.revision),
                    "error": .string("\(error)"),
                ])
            }
        }
        return out
    }

    /// One patch, from `old` to the new revision already in `scratch.new` (and `.new-tree`),
    /// stored and held; nil when it is not worth it or `old` is gone or too large.
    private func patch(
        to entry: PackEntry, from old: ReleaseIndex.Revision, zip: Bool, scratch: String, budget: ScratchBudget, target: Int64, keys: (ring: KeyRing, current: String),
        app: String
    ) throws -> PackPatch? {
        guard try decrypt(old.sha256, size: old.size, to: scratch + ".old", keys: keys.ring) else { return nil }
        let size: Int64
        if zip {
            // A device keeps a zip unpacked: the patch is made between the two trees.
            var oldBudget = budget
            oldBudget.used += old.size
            guard let tree = try extract(scratch + ".old", into: scratch + ".old-tree", budget: oldBudget, declared: old.installSize, entry: entry, app: app, from: old.revision) else {
                return nil
            }
            // What the old tree really took, before the delta and its container are written.
            oldBudget.used += tree
            if let refusal = oldBudget.refusal(toWrite: PatchLimits.deltaAndContainer(upTo: target)) {
                skip(entry, app: app, refusal, from: old.revision)
                return nil
            }
            size = try TreePatch.make(base: scratch + ".old-tree", target: scratch + ".new-tree", to: scratch + ".delta").size
        } else {
            // The plaintexts' SHA-256 are the manifest's: their containers' hashes and every
            // segment's authentication were checked as they were decrypted.
            guard let oldDigest = Hex.decode(old.plaintextSHA256), let newDigest = Hex.decode(entry.plaintextSHA256) else { return nil }
            size = try DeltaEncoder.encode(
                base: scratch + ".old", target: scratch + ".new", to: scratch + ".delta", baseSHA256: oldDigest, targetSHA256: newDigest
            ).size
        }
        // Worth it only if it saves a tenth of the pack.
        guard size * 10 < entry.size * 9 else { return nil }
        let container = try encrypt(scratch + ".delta", to: scratch + ".container", keys: keys)
        storing.begin(container.sha256)
        do {
            try blobs.put(temporaryFile: scratch + ".container", sha256: container.sha256)
        } catch {
            storing.end(container.sha256)
            throw error
        }
        return PackPatch(
            fromRevision: old.revision, fromPlaintextSHA256: old.plaintextSHA256, url: urls.blob(app, container.sha256), size: container.size,
            sha256: container.sha256
        )
    }

    /// Unpacks a revision's zip within the budget and no further than its manifest's
    /// `installSize` (a device refuses more); returns what it charged (bytes, and a block per
    /// entry), or nil (the patch skipped, logged, what was unpacked removed) when a limit stopped it.
    private func extract(
        _ zip: String, into tree: String, budget: ScratchBudget, declared: Int64, entry: PackEntry, app: String, from revision: Int? = nil
    ) throws -> Int64? {
        // Counted in the archive's directory first: a tree of a million entries is not unpacked at all.
        if let files = try? ZipPack.inspect(zip).files, files > PatchLimits.maximumEntries {
            skip(entry, app: app, "it has \(files) files, more than the \(PatchLimits.maximumEntries) entries a patch is made for", from: revision)
            return nil
        }
        let check = budget.extractionLimit()
        var charged: Int64 = 0
        do {
            try ZipPack.extract(zip, into: tree) { written, entries in
                if written > declared { return "it unpacks to more than its manifest's installSize of \(declared) bytes (a device refuses it too)" }
                if entries > PatchLimits.maximumEntries { return "it has more than \(PatchLimits.maximumEntries) entries" }
                charged = PatchLimits.charge(written: written, entries: entries)
                return check(charged)
            }
            return charged
        } catch .limitReached(let why) {
            try? FileManager.default.removeItem(atPath: tree)
            skip(entry, app: app, why, from: revision)
            return nil
        }
    }

    /// Logs and counts a patch not made for want of space (or a zip that lies about its size).
    private func skip(_ entry: PackEntry, app: String, _ why: String, from revision: Int? = nil) {
        interrupted.withLock { $0 = true }
        let reason = why.contains("reserve") ? "disk_reserve" : why.contains("installSize") ? "oversized_zip" : why.contains("entries") ? "too_many_entries" : "scratch_limit"
        metrics.patchSkipped(app: app, reason: reason)
        logger.warning("patch skipped: devices download the whole pack", metadata: [
            "app": .string(app), "pack": .string(entry.id), "revision": .stringConvertible(entry.revision),
            "from": .string(revision.map(String.init) ?? "any"), "reason": .string(why),
        ])
    }

    /// A revision's plaintext, from its blob; false if the blob is gone.
    private func decrypt(_ sha256: String, size: Int64, to path: String, keys: KeyRing) throws -> Bool {
        guard let blob = try blobs.open(sha256) else { return false }
        defer { try? blob.file.close() }
        let summary = try PackDecryptor.decrypt(blob.file, to: path, keyRing: keys, expectedSize: size, hashingPlaintext: false)
        guard summary.sha256 == sha256 else { throw DepotError.conflict("blob_mismatch", "blob \(sha256) does not hash to its name") }
        return true
    }

    /// The CPU time the calling thread has used, in seconds.
    static func threadCPUSeconds() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
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
