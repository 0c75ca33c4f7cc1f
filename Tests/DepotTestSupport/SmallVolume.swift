import DepotCore
import Foundation

/// A small volume for full-disk tests: a tmpfs of a given size mounted at `work/data` (root
/// needed, as the suite runs in CI), unmounted lazily by ``unmount()``.
public struct SmallVolume: Sendable {
    /// The mount point.
    public let path: String

    /// Mounts a tmpfs of `size` (`24m`, `512m`) at `work/data`; throws with mount's words if it cannot.
    public init(in work: TemporaryDirectory, size: String) throws {
        path = work.path + "/data"
        try FileSystem.createDirectory(path)
        let mount = try Processes.run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", path])
        guard mount.status == 0 else { throw POSIXError(.EPERM, userInfo: [NSLocalizedDescriptionKey: "mounting a tmpfs needs root: \(mount.stderr)"]) }
    }

    public func unmount() { _ = try? Processes.run("/bin/umount", ["-l", path]) }
}
