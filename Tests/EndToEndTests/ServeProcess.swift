import DepotTestSupport
import Foundation

/// The real `depot serve` process, configured through DEPOT_* variables.
final class ServeProcess {
    let process = Process()
    let port: String
    let token: String
    /// The admin token the embedded default prints (empty for an existing data folder).
    let adminToken: String
    /// What it printed on start.
    let banner: String
    private let output = Pipe()
    private let errors = Pipe()
    private let errorLog = LogBuffer()
    private let errorsEnded = DispatchSemaphore(value: 0)

    /// Starts `depot serve`; with `bootstrap`, waits for the banner of a new data folder (its token).
    /// `binary` is the executable started (the one just built by default), `directory` its working
    /// directory (the test's by default).
    init(data: String, environment: [String: String], bootstrap: Bool = true, binary: String = Processes.depotBinary, directory: String? = nil, arguments: [String] = []) throws {
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["serve"] + arguments
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        process.environment = ProcessInfo.processInfo.environment.merging(["DEPOT_DATA": data, "DEPOT_LISTEN": "127.0.0.1:0", "DEPOT_PATCH_DEPTH": "0"].merging(environment) { $1 }) { $1 }
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        // Its log is read as it comes, so that a long test never fills the pipe and stalls it.
        let handle = errors.fileHandleForReading, log = errorLog, ended = errorsEnded
        Thread.detachNewThread {
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                log.append(chunk)
            }
            ended.signal()
        }
        var banner = ""
        while !banner.contains(bootstrap ? "depot sync" : "public URL") || !banner.hasSuffix("\n") {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            banner += String(decoding: chunk, as: UTF8.self)
        }
        self.banner = banner
        let first = banner.split(separator: "\n").first ?? ""
        port = first.split(separator: ",").first?.split(separator: ":").last.map(String.init) ?? "0"
        token = banner.split(separator: "\n").first { $0.contains("export DEPOT_TOKEN=") }?.split(separator: "=").last.map(String.init) ?? ""
        adminToken = banner.split(separator: "\n").first { $0.contains("export DEPOT_ADMIN_TOKEN=") }?.split(separator: "=").last.map(String.init) ?? ""
    }

    var url: String { "http://127.0.0.1:\(port)" }

    /// Reads stdout until a line containing `text` appears (or the output ends); returns what was read.
    func waitForOutput(_ text: String) -> String {
        var seen = ""
        while !seen.contains(text) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            seen += String(decoding: chunk, as: UTF8.self)
        }
        return seen
    }

    /// Everything printed on stdout after the banner, once the process has ended.
    func remainingOutput() -> String { String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
    /// What it has logged so far (while it runs).
    func errorOutputSoFar() -> String { String(decoding: errorLog.contents, as: UTF8.self) }

    /// Everything it logged, once the process has ended (its stderr closed).
    func errorOutput() -> String {
        errorsEnded.wait()
        errorsEnded.signal()
        return String(decoding: errorLog.contents, as: UTF8.self)
    }

    deinit {
        if process.isRunning { process.terminate() }
    }
}

/// Bytes appended by one thread and read by another.
final class LogBuffer: @unchecked Sendable {
    // @unchecked: `data` is behind `lock`.
    private let lock = NSLock()
    private var data = Data()
    func append(_ chunk: Data) { lock.withLock { data.append(chunk) } }
    var contents: Data { lock.withLock { data } }
}
