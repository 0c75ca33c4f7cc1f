import DepotCore
import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// What `depot serve` asks of its process: the open-file limit, where the dashboard is, the
/// stop signals.
extension Serve {
    /// Raises the soft limit on open files to the hard one (shells often start at 1,024);
    /// returns the limit in force.
    static func raiseOpenFileLimit() -> Int {
        #if canImport(Glibc)
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return Int(clamping: limit.rlim_cur)
        #else
        return .max
        #endif
    }

    /// Where `serve` looks for the dashboard when no --public-dir is given, in order:
    /// ./Public; PREFIX/share/assetdepot/Public for an executable installed as PREFIX/bin/depot
    /// (the package's /usr/bin/depot and /usr/share/assetdepot/Public); the Public folder of the
    /// source tree the executable was built in (.build/<config>/depot). `executable` has its
    /// symbolic links resolved, so a link on the PATH finds the folder of the file it names.
    static func publicDirectoryCandidates(executable: String = CommandLine.executablePath) -> [String] {
        let bin = FileSystem.directory(of: URL(fileURLWithPath: executable).resolvingSymlinksInPath().path)
        var candidates = ["./Public", FileSystem.directory(of: bin) + "/share/assetdepot/Public"]
        var folder = bin
        for _ in 0..<4 {
            candidates.append(folder + "/Public")
            folder = FileSystem.directory(of: folder)
        }
        return candidates
    }

    /// The first of ``publicDirectoryCandidates(executable:)`` that holds an index.html.
    static func defaultPublicDirectory(executable: String = CommandLine.executablePath) -> String? {
        publicDirectoryCandidates(executable: executable).first { FileSystem.exists($0 + "/index.html") }
    }
}

/// Waits for SIGINT or SIGTERM. The signals are ignored process-wide (their default action would
/// kill every thread at once) and observed through dispatch sources instead.
final class StopSignal: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    private let received = Mutex<Int32>(0)
    /// Kept alive for as long as the signals are watched.
    private let sources: Mutex<[any DispatchSourceSignal]>

    init() {
        let numbers = [SIGINT, SIGTERM]
        for number in numbers { signal(number, SIG_IGN) }
        sources = Mutex(numbers.map { DispatchSource.makeSignalSource(signal: $0, queue: .global()) })
        sources.withLock { sources in
            for (source, number) in zip(sources, numbers) {
                source.setEventHandler { [unowned self] in
                    received.withLock { $0 = number }
                    semaphore.signal()
                }
                source.resume()
            }
        }
    }

    /// Blocks until a stop signal arrives; returns its number.
    func wait() -> Int32 {
        semaphore.wait()
        return received.withLock { $0 }
    }
}

extension CommandLine {
    static var executablePath: String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? arguments[0]
    }
}
