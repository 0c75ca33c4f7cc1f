import Foundation

/// Runs the built `depot` binary and other programs, for tests that drive the real command line.
public enum Processes {
    /// The `depot` executable next to the test bundle (`.build/<config>/depot`), or `DEPOT_TEST_BINARY` (another build's: an earlier
    /// commit's, to see a test fail against the code it was written to catch).
    public static var depotBinary: String {
        if let other = ProcessInfo.processInfo.environment["DEPOT_TEST_BINARY"], !other.isEmpty { return other }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var folder = URL(fileURLWithPath: exe).deletingLastPathComponent()
        for _ in 0..<3 {
            let candidate = folder.appendingPathComponent("depot").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            folder = folder.deletingLastPathComponent()
        }
        return "depot"
    }

    /// The result of a finished process.
    public struct Result: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    /// Runs a program to completion.
    public static func run(_ path: String, _ arguments: [String], environment: [String: String]? = nil, cwd: String? = nil) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        if let environment { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        if let cwd { process.currentDirectoryURL = URL(fileURLWithPath: cwd) }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        let errData = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Result(status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self), stderr: String(decoding: errData, as: UTF8.self))
    }
}

/// Suites that load the whole machine (hundreds of connections, slow-header attacks, tight timing
/// loops) and would make the timing of others flaky, or be made flaky by them: `Deploy/setup.sh test` runs them alone, after the parallel
/// suite, with `DEPOT_HEAVY_TESTS=1`.
public enum HeavyTests {
    public static var enabled: Bool { ProcessInfo.processInfo.environment["DEPOT_HEAVY_TESTS"] == "1" }
    /// The suites that start a real S3 engine (a few hundred MiB of Python processes each):
    /// run after the others, with `DEPOT_S3_TESTS=1`.
    public static var objectStore: Bool { ProcessInfo.processInfo.environment["DEPOT_S3_TESTS"] == "1" }
    /// The dashboard's suite in real Chromium (a browser and its throttled uploads): run last,
    /// alone, with `DEPOT_BROWSER_TESTS=1`.
    public static var browser: Bool { ProcessInfo.processInfo.environment["DEPOT_BROWSER_TESTS"] == "1" }
}
