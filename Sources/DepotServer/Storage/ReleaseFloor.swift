import DepotCore
import Foundation

/// The lowest release number (and changed pack revision) the origin may issue next:
/// `release-floor` at the data folder's root, one decimal number and a newline, written by a
/// restore (``DataRestore``). A restored folder has forgotten the numbers it issued after its
/// backup was taken, which devices and edges remember (a device refuses a lower manifest
/// version; `/releases/{n}` is cached as immutable): numbering continues from the floor, above
/// every number issued before the restore.
///
/// The floor of a restore is the Unix time in seconds at the restore (at least the folder's
/// highest release number + 1 and the previous floor + 1): every number issued before it lies
/// below, as long as the origin made fewer than one release per second on average since the
/// previous restore (or since it began), and the host's clock was right (NTP).
enum ReleaseFloor {
    /// The floor's file in `folder`.
    static func path(_ folder: DataFolder) -> String { folder.root + "/release-floor" }

    /// The floor, or nil where no restore set one.
    static func read(_ folder: DataFolder) -> Int? {
        ReleaseStore.readNumber(path(folder))
    }

    /// Release numbers (and changed pack revisions) stay below 2^53, so JavaScript and every JSON
    /// reader hold them exactly; seconds since 1970 are about 2^31.
    static let largest = (1 << 53) - 1

    /// The highest release number each app of `folder` has: the highest its pointers (`head`,
    /// `current`, `channels/*`) name, and (unless `pointersOnly`) the highest release file.
    static func highestReleases(_ folder: DataFolder, pointersOnly: Bool = false) -> [String: Int] {
        var out: [String: Int] = [:]
        for app in FileSystem.contents(of: folder.apps) where FileSystem.isDirectory(folder.app(app)) && !app.hasPrefix(".") {
            var highest = pointersOnly ? 0 : ReleaseStore.versions(in: folder.releases(app)).last ?? 0
            for pointer in [folder.head(app), folder.currentPointer(app)] + FileSystem.contents(of: folder.channels(app)).map({ folder.channels(app) + "/" + $0 }) {
                if let number = ReleaseStore.readNumber(pointer) { highest = max(highest, number) }
            }
            out[app] = highest
        }
        return out
    }

    /// Raises the floor of a folder just restored (no origin runs on it: the caller holds its
    /// lock) to max(now in seconds, highest release + 1, old floor + 1), durably; returns it.
    static func raiseForRestore(_ folder: DataFolder, atLeast asked: Int? = nil, now: Date = WallClock.now()) throws -> Int {
        let highest = highestReleases(folder).values.max() ?? 0
        let floor = max(Int(now.timeIntervalSince1970), highest + 1, (read(folder) ?? 0) + 1, asked ?? 0)
        guard floor <= largest else { throw DepotError.conflict("release_floor_too_high", "the next release number would be \(floor), past 2^53") }
        try FileSystem.writeAtomically(Array("\(floor)\n".utf8), to: path(folder))
        return floor
    }

    /// Raises the floor to at least `number`, durably (an app removed: its id made again later must
    /// not reuse the numbers, nor the pack revisions, which never exceed them, that its devices and
    /// edges saw). Lowers nothing.
    static func raise(_ folder: DataFolder, toAtLeast number: Int) throws {
        guard number > (read(folder) ?? 0) else { return }
        guard number <= largest else { throw DepotError.conflict("release_floor_too_high", "the next release number would be \(number), past 2^53") }
        try FileSystem.writeAtomically(Array("\(number)\n".utf8), to: path(folder))
    }
}
