import DepotCore
import Foundation

/// What /proc says about a running process: its open files and resident memory, for tests that
/// check an origin comes back to where it was after load or an attack.
enum ProcessProbe {
    /// A /proc file, read to its end (they report a size of 0).
    static func read(_ path: String) -> String {
        guard let handle = FileHandle(forReadingAtPath: path) else { return "" }
        defer { try? handle.close() }
        return String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
    }

    static func openFiles(_ pid: Int32) -> Int { FileSystem.contents(of: "/proc/\(pid)/fd").count }

    static func residentKiB(_ pid: Int32) -> Int {
        let line = read("/proc/\(pid)/status").split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    /// Open files once the count stops moving (connections still closing), within 10 s.
    static func settledOpenFiles(_ pid: Int32) -> Int {
        var count = openFiles(pid)
        for _ in 0..<40 {
            Thread.sleep(forTimeInterval: 0.25)
            let now = openFiles(pid)
            if now == count { break }
            count = now
        }
        return count
    }

    /// Open files, waiting up to `seconds` for them to fall to `baseline` or below.
    static func openFiles(_ pid: Int32, backTo baseline: Int, within seconds: Double) -> Int {
        var count = openFiles(pid)
        let deadline = Date().addingTimeInterval(seconds)
        while count > baseline && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.25)
            count = openFiles(pid)
        }
        return count
    }
}
