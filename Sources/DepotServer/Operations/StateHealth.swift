import DepotCore
import Foundation
import Logging
import Synchronization

/// The data-folder files this process could not read: what `/healthz` answers 503 for and the
/// log names, rather than a silent `401` for every token when `tokens.json` became unreadable
/// (a file an admin command run as root rewrote `root:root 0600`, before commands adopted the
/// folder's owner).
///
/// Process-wide and keyed by path: ``FileStampCache`` reports into it wherever a small file is
/// read, and each origin's `/healthz` reads the entries under its own data folder. An entry goes
/// when its file is read again, or when a look finds it readable (the operator fixed the mode).
public final class StateHealth: Sendable {
    public static let shared = StateHealth()

    /// A file that could not be read, and why.
    public struct Problem: Sendable, Equatable {
        public var path: String
        public var error: String
    }

    private let problems = Mutex<[String: String]>([:])
    /// Whether any problem is recorded: the common case is one atomic load on a successful read.
    private let any = Atomic<Bool>(false)
    private let logger = Logger(label: "assetdepot")

    /// Records that `path` exists but could not be read; logs it the first time (and again when
    /// the reason changes).
    public func failed(_ path: String, _ error: any Error) {
        let text = "\(error)"
        let new = problems.withLock { problems in
            defer { any.store(true, ordering: .releasing) }
            return problems.updateValue(text, forKey: path) != text
        }
        if new {
            logger.error("cannot read \(path): \(text); the origin answers as if it held nothing there (tokens: every token 401) until the file is readable by this user (uid \(getuid())); /healthz answers 503 meanwhile")
        }
    }

    /// Records that `path` was read.
    public func succeeded(_ path: String) {
        guard any.load(ordering: .acquiring) else { return }
        let cleared = problems.withLock { problems in
            let removed = problems.removeValue(forKey: path) != nil
            if problems.isEmpty { any.store(false, ordering: .releasing) }
            return removed
        }
        if cleared { logger.notice("\(path) is readable again") }
    }

    /// The problems under `root`, each looked at again first: a file now readable (or gone) is
    /// no longer a problem.
    public func problems(under root: String) -> [Problem] {
        guard any.load(ordering: .acquiring) else { return [] }
        let prefix = root.hasSuffix("/") ? root : root + "/"
        let candidates = problems.withLock { $0.filter { $0.key.hasPrefix(prefix) } }
        var out: [Problem] = []
        for (path, error) in candidates.sorted(by: { $0.key < $1.key }) {
            if Self.readable(path) { succeeded(path) } else { out.append(Problem(path: path, error: error)) }
        }
        return out
    }

    /// Whether this process can read `path` (or it is gone: nothing to read).
    static func readable(_ path: String) -> Bool {
        var info = stat()
        guard stat(path, &info) == 0 else { return true }
        let isFolder = (info.st_mode & S_IFMT) == S_IFDIR
        return access(path, isFolder ? (R_OK | X_OK) : R_OK) == 0
    }

    /// Looks at every small file of a data folder (not the blobs, which are opened per request
    /// and answer 404/500 on their own, nor uploads): each must be readable, each folder readable
    /// and writable, by this process. Records and logs what is not; returns how many.
    @discardableResult
    public func survey(_ folder: DataFolder) -> Int {
        var found = 0
        func look(_ path: String, depth: Int) {
            var info = stat()
            guard lstat(path, &info) == 0 else { return }
            let isFolder = (info.st_mode & S_IFMT) == S_IFDIR
            guard (info.st_mode & S_IFMT) == S_IFREG || isFolder else { return }
            let mode = isFolder ? (R_OK | W_OK | X_OK) : (path.hasSuffix(".lock") ? R_OK : R_OK | W_OK)
            if access(path, mode) != 0 {
                found += 1
                failed(path, SystemError(call: "access", errno: errno, path: path))
                return
            }
            // Blobs are opened per request (and answer on their own); uploads are scratch.
            guard isFolder, depth < 6, path != folder.blobs, path != folder.uploads else { return }
            for name in FileSystem.contents(of: path) {
                // Not the origin's: what a restore set aside (root's, 0700) and a volume's lost+found.
                if depth == 0 && (DataRestore.keptInPlace(name) || name == "lost+found") { continue }
                look(path + "/" + name, depth: depth + 1)
            }
        }
        look(folder.root, depth: 0)
        return found
    }
}
