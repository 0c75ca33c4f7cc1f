import DepotCore
import DepotClient
import DepotTestSupport
import Foundation
import Testing

/// Enumerates the crash points of one process's run through the debug build's seam
/// (`DEPOT_CRASH_TRACE`, `DEPOT_CRASH_AT`; see `Sources/DepotCore/Support/CrashPoints.swift`):
/// every file created, `mkdir`, `rename`, exchange, `unlink`, `rmdir`, `fsync` and `ftruncate`.
enum CrashSeam {
    /// How a crash is modelled: a kill (what was written stays, fsynced or not), or a power cut
    /// that loses what was not made durable (`lose`: unsynced data and folder changes; `data`:
    /// unsynced data only; `entries`: unsynced folder changes only).
    enum Mode: String, CaseIterable, Sendable {
        case kill, lose, data, entries
    }

    /// The crash points of a run: one line each, `N call path [other]`.
    static func trace(_ file: String) -> [String] {
        ((try? FileSystem.readText(file)) ?? "").split(separator: "\n").map(String.init)
    }

    /// The environment that kills a process at its `point`th crash point in `mode`
    /// (`backup`: a folder on the data's file system, for the power cut's saved files).
    static func environment(at point: Int, mode: Mode, backup: String) -> [String: String] {
        var environment = ["DEPOT_CRASH_AT": "\(point)"]
        if mode != .kill {
            environment["DEPOT_CRASH_POWER"] = mode.rawValue
            environment["DEPOT_CRASH_BACKUP"] = backup
        }
        return environment
    }

    /// Every crash point in CI, or every `stride`th (always the last ones) where a sequence is
    /// long; `DEPOT_CRASH_ALL=1` (the heavy suite and `Deploy/reliability.sh`) runs them all.
    static func points(_ count: Int, ciStride: Int = 1) -> [Int] {
        let stride = ProcessInfo.processInfo.environment["DEPOT_CRASH_ALL"] == "1" ? 1 : ciStride
        return Array(Swift.stride(from: 1, through: count, by: stride)) + (count % stride == 0 || stride == 1 ? [] : [count])
    }

    /// `DEPOT_CRASH_ALL=1`: every crash point, every mode.
    static var all: Bool { ProcessInfo.processInfo.environment["DEPOT_CRASH_ALL"] == "1" }

    /// The kill tests run in the parallel suite (and with `DEPOT_CRASH_ALL=1`), the power cuts in the heavy one.
    static var killsEnabled: Bool { !HeavyTests.enabled || all }

    /// CI's stride for kills: every crash point of a short sequence (up to 25), every eighth one
    /// of a longer one, and its last (`DEPOT_CRASH_ALL=1` runs them all).
    static func killStride(_ count: Int) -> Int { count > 25 ? 8 : 1 }

    /// CI's stride for power cuts: every fourth point of a short sequence, every twelfth of a
    /// longer one, its last, and the exit.
    static func powerStride(_ count: Int) -> Int { count > 25 ? 12 : 4 }

    /// The power-cut modes run: every one with `DEPOT_CRASH_ALL=1`, else `lose` only.
    static var powerModes: [Mode] {
        ProcessInfo.processInfo.environment["DEPOT_CRASH_ALL"] == "1" ? [.lose, .data, .entries] : [.lose]
    }

    /// One crash of an enumeration: where, how, the environment that makes it, and its name in messages.
    struct Crash {
        var point: Int
        var mode: Mode
        /// A fresh folder for the power cut's saved files.
        var backup: String
        var environment: [String: String]
        var what: String
    }

    /// The crash points (1-based) where a copy is switched into `packs`: an exchange, or a rename
    /// onto a pack's name there.
    static func switchPoints(_ lines: [String], packs: String) -> [Int] {
        lines.enumerated().compactMap { index, line in
            let fields = line.split(separator: " ").map(String.init)
            guard fields.count >= 4, fields[1] == "exchange" || fields[1] == "rename" else { return nil }
            let target = fields[3]
            guard FileSystem.directory(of: target) == packs, !FileSystem.lastComponent(of: target).hasPrefix(".") else { return nil }
            return index + 1
        }
    }

    /// Runs `body` once per crash point (CI's stride unless ``all``, and every point of
    /// `including`) and mode; stops at the first crash whose `body` returns false (the invariant
    /// did not hold: its messages say why).
    static func enumerate(_ count: Int, modes: [Mode], trace: String, work: String, label: String, including: [Int] = [], _ body: (Crash) async throws -> Bool) async throws {
        let lines = Self.trace(trace)
        for mode in modes {
            let chosen = Set(points(count, ciStride: mode == .kill ? killStride(count) : powerStride(count)) + including.filter { (1...count).contains($0) })
            // A power cut also just after the last crash point (the disk as the process leaves it).
            for point in chosen.sorted() + (mode == .kill ? [] : [count + 1]) {
                let backup = work + "/backup"
                try? FileManager.default.removeItem(atPath: backup)
                try FileSystem.createDirectory(backup)
                let what = point > count ? "\(label) \(mode) at the exit, after the last of \(count) crash points"
                    : "\(label) \(mode) at crash point \(point) of \(count) (\(lines.dropFirst(point - 1).first ?? "?"))"
                guard try await body(Crash(point: point, mode: mode, backup: backup, environment: environment(at: point, mode: mode, backup: backup), what: what)) else { return }
            }
        }
    }

    /// Copies a folder tree (as `cp -a`).
    static func copy(_ from: String, to: String) throws {
        try? FileManager.default.removeItem(atPath: to)
        let copied = try Processes.run("/bin/cp", ["-a", from, to])
        #expect(copied.status == 0, "\(copied.stderr)")
    }

    /// Copies a device's folder (`DEST`) as ``copy(_:to:)`` does, then gives each record of its
    /// state the inode of its copy: a copy has new inodes, and the client, which records the
    /// inode it switched in, would take every pack for another copy (planned again whole, never
    /// patched). The copy is then the same device, as the crash points need it.
    static func copyDevice(_ from: String, to: String) throws {
        try copy(from, to: to)
        let path = to + "/.depot/state.json"
        guard FileSystem.exists(path) else { return }
        // Through the client's own type and encoding (JSONSerialization would write `unpacked` as 0).
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        var state = try decoder.decode(InstalledState.self, from: Data(FileSystem.readFile(path)))
        for (id, record) in state.packs where record.inode != nil {
            guard let identity = System.identity(to + "/packs/" + id) else { continue }
            state.packs[id]?.inode = identity.inode
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        encoder.dateEncodingStrategy = .iso8601
        try FileSystem.writeAtomically(Array(encoder.encode(state)) + [10], to: path)
    }

    /// Every regular file under `root` with its SHA-256 and inode: equal before and after a step
    /// that must change nothing (a reinstall changes an inode even with the same bytes).
    static func digest(_ root: String) -> [String: String] {
        var out: [String: String] = [:]
        for path in TreeFiles.list(root) {
            var info = stat()
            lstat(root + "/" + path, &info)
            let bytes = (try? FileSystem.readFile(root + "/" + path, limit: 256 << 20)) ?? []
            out[path] = Hex.encode(SHA256Hasher.hash(bytes)) + " inode \(info.st_ino)"
        }
        return out
    }
}
