import DepotCore
import Foundation

/// A fresh folder under the system temporary directory, removed by ``remove()``.
public struct TemporaryDirectory: Sendable {
    public let path: String

    public init(_ label: String = "depot") {
        self.init(label, under: FileManager.default.temporaryDirectory.path)
    }

    private init(_ label: String, under parent: String) {
        path = parent + "/\(label)-" + Hex.encode(SecureRandom.bytes(6))
        try! FileSystem.createDirectory(path)
    }

    /// A fresh folder in memory (`/dev/shm`, where `fsync` costs nothing), or under the system
    /// temporary directory where there is none: for fixtures of thousands of files.
    public static func inMemory(_ label: String) -> TemporaryDirectory {
        FileSystem.isDirectory("/dev/shm") && access("/dev/shm", W_OK) == 0 ? TemporaryDirectory(label, under: "/dev/shm") : TemporaryDirectory(label)
    }

    public func remove() { try? FileManager.default.removeItem(atPath: path) }

    /// Writes a file of `size` pseudo-random bytes (fast, seeded) and returns its path.
    public func file(_ name: String, size: Int, seed: UInt64 = 1) throws -> String {
        let path = self.path + "/" + name
        try TestData.write(path: path, size: size, seed: seed)
        return path
    }
}

/// Reproducible test content, written in blocks so that large files cost little memory.
public enum TestData {
    public static func write(path: String, size: Int, seed: UInt64) throws {
        let fd = try FileDescriptor(path: path, flags: O_WRONLY | O_CREAT | O_TRUNC, mode: 0o644)
        var state = seed &* 0x9E3779B97F4A7C15 | 1
        var block = [UInt64](repeating: 0, count: 1 << 17)
        var left = size
        while left > 0 {
            for i in 0..<block.count {
                state ^= state << 13
                state ^= state >> 7
                state ^= state << 17
                block[i] = state
            }
            let n = min(left, block.count * 8)
            try block.withUnsafeBytes { try fd.write(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            left -= n
        }
        try fd.close()
    }
}
