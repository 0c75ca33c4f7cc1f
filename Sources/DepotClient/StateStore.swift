import DepotCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The install state of one destination, changed only under an exclusive lock and saved
/// (atomically, durably) after every change, so two processes can share it.
public final class StateStore {
    /// The destination folder.
    public let destination: String
    private let lock: FileDescriptor

    var metadata: String { destination + "/.depot" }
    var statePath: String { metadata + "/state.json" }
    /// Where pack downloads wait before they are verified.
    var downloads: String { metadata + "/downloads" }
    /// Where installed packs live.
    public var packs: String { destination + "/packs" }

    /// Opens the destination and takes its exclusive lock, waiting up to `timeout` seconds.
    public init(destination: String, timeout: TimeInterval = 30) throws {
        self.destination = destination
        do {
            try FileSystem.createDirectory(destination + "/.depot/downloads")
            try FileSystem.createDirectory(destination + "/packs")
            lock = try FileDescriptor(path: destination + "/.depot/lock", flags: O_RDWR | O_CREAT, mode: 0o644)
        } catch {
            throw ClientError.state("cannot open \(destination): \(error)")
        }
        let deadline = Date().addingTimeInterval(timeout)
        while flock(lock.rawValue, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR else { throw ClientError.state("cannot lock \(destination): \(SystemError(call: "flock", errno: errno))") }
            guard Date() < deadline else { throw ClientError.state("\(destination) is locked by another process") }
            usleep(20_000)
        }
        FileSystem.removeTemporaryFiles(in: packs)
        for name in FileSystem.contents(of: downloads) { FileSystem.remove(downloads + "/" + name) }
    }

    deinit { flock(lock.rawValue, LOCK_UN) }

    /// The saved state, or an empty one for `app`.
    public func load(app: String) throws -> InstalledState {
        guard FileSystem.exists(statePath) else { return InstalledState(app: app) }
        do {
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            let state = try decoder.decode(InstalledState.self, from: Data(FileSystem.readFile(statePath)))
            guard state.app == app else { throw ClientError.state("\(destination) holds packs of app \(state.app)") }
            return state
        } catch let error as ClientError {
            throw error
        } catch {
            throw ClientError.state("\(statePath) is unreadable: \(error)")
        }
    }

    /// Saves the state atomically and durably.
    public func save(_ state: InstalledState) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        encoder.dateEncodingStrategy = .iso8601
        try FileSystem.writeAtomically(Array(try encoder.encode(state)) + [10], to: statePath)
    }

    /// The installed file of a pack.
    public func packPath(_ id: String) -> String { packs + "/" + id }
}
