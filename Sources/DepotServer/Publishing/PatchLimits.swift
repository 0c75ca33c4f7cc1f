import DepotCore
import Foundation

/// What making one patch may take of the data volume (``PatchMaker``).
public struct PatchLimits: Sendable, Equatable {
    /// Scratch files and folders in `uploads/` start with this; start-up removes them all.
    static let scratchPrefix = "patch-"
    /// A zip with more entries than this is not patched (its trees would cost inodes and memory
    /// out of proportion; devices still install it whole).
    static let maximumEntries = 1_000_000

    /// What an unpacked tree costs: its bytes, and a block for each entry (a file or folder of a
    /// few bytes still takes one, and an inode).
    static func charge(written: Int64, entries: Int) -> Int64 { written + Int64(entries) * 4096 }

    /// The most a delta (of a target of `target` bytes, or tree charge) and its encrypted
    /// container may take: a delta sends at most the whole target with its framing, and the
    /// container adds 16 bytes per MiB segment and a header.
    static func deltaAndContainer(upTo target: Int64) -> Int64 { 2 * (target + target / 256 + (1 << 20)) }

    /// The most scratch space one patch may use: the decrypted revisions, their unpacked trees
    /// (zip packs), the delta and its encrypted container.
    public var scratchBytes: Int64
    /// The share of the data volume (the one holding `uploads/`) that patch making always
    /// leaves free for uploads and everything else, 0–0.9.
    public var reserve: Double

    /// The share of its time patch making may work, 0.05–1 (`--patch-share`): after a turn
    /// that took `t`, it rests `t × (1 − share) / share`, so that its CPU and disk use stay
    /// within that share of one core and one disk however many releases arrive.
    public var share: Double

    public init(scratchBytes: Int64, reserve: Double = 0.25, share: Double = 0.5) {
        (self.scratchBytes, self.reserve, self.share) = (scratchBytes, reserve, min(1, max(0.05, share)))
    }
}

/// One patch's use of scratch space, against its ``PatchLimits`` and the volume's free space.
struct ScratchBudget {
    let limits: PatchLimits
    /// A path on the volume scratch files go to.
    let volume: String
    /// Bytes the patch holds in scratch files now.
    var used: Int64 = 0

    init(limits: PatchLimits, volume: String) {
        (self.limits, self.volume) = (limits, volume)
    }

    /// Free and total bytes and inodes of the volume (as an unprivileged writer sees them), if
    /// it can be read.
    static func space(of path: String) -> (free: Int64, total: Int64, freeInodes: Int64, inodes: Int64)? {
        var status = statvfs()
        guard statvfs(path, &status) == 0 else { return nil }
        let unit = Int64(clamping: status.f_frsize)
        func bytes(_ blocks: some BinaryInteger) -> Int64 {
            let (product, overflow) = Int64(clamping: blocks).multipliedReportingOverflow(by: unit)
            return overflow ? .max : product
        }
        return (bytes(status.f_bavail), bytes(status.f_blocks), Int64(clamping: status.f_favail), Int64(clamping: status.f_files))
    }

    /// Why `bytes` more may not be written, or nil if they may: over the scratch limit, or
    /// taking the volume below its reserve.
    func refusal(toWrite bytes: Int64) -> String? {
        if used + bytes > limits.scratchBytes {
            return "needs up to \(used + bytes) bytes of scratch space, over the limit of \(limits.scratchBytes) (--patch-scratch-limit)"
        }
        guard let space = Self.space(of: volume) else { return nil }
        let reserve = Int64(Double(space.total) * limits.reserve)
        if space.free - bytes < reserve {
            return "would leave the data volume \(max(0, space.free - bytes)) bytes free, under its reserve of \(reserve) (--patch-disk-reserve \(Int(limits.reserve * 100))%)"
        }
        return nil
    }

    /// The limit an extraction checks as it writes, given what it charged so far
    /// (``PatchLimits/charge(written:entries:)``): the scratch limit at every entry and chunk,
    /// the volume's reserve of bytes and of inodes every 4 MiB charged (and at the first).
    func extractionLimit() -> (Int64) -> String? {
        let start = self
        var checkedAt: Int64 = -1
        var freeAtStart: Int64?
        return { charged in
            var now = start
            now.used += charged
            if now.used > now.limits.scratchBytes {
                return "unpacked past the scratch limit of \(now.limits.scratchBytes) bytes (--patch-scratch-limit)"
            }
            guard checkedAt < 0 || charged - checkedAt >= 4 << 20 else { return nil }
            checkedAt = charged
            guard let space = Self.space(of: now.volume) else { return nil }
            let reserve = Int64(Double(space.total) * now.limits.reserve)
            if space.inodes > 0, space.freeInodes - 1024 < Int64(Double(space.inodes) * now.limits.reserve) {
                return "unpacking took the data volume to \(space.freeInodes) free inodes, under its reserve of \(Int(now.limits.reserve * 100))% (--patch-disk-reserve)"
            }
            // What is charged counts as used even where the file system shows less (empty
            // files, a volume that compresses). Stopped before the next 4 MiB could cross the
            // reserve, not after.
            let startFree = freeAtStart ?? space.free + charged
            freeAtStart = startFree
            let free = min(space.free, startFree - charged)
            return free - (4 << 20) < reserve ? "unpacking took the data volume to \(max(0, free)) bytes free, under its reserve of \(reserve) (--patch-disk-reserve \(Int(now.limits.reserve * 100))%)" : nil
        }
    }
}
