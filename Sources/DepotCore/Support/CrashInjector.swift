#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

#if DEBUG
/// The state of an injecting process: the count, and for a power cut what is not yet durable.
final class Injector: @unchecked Sendable {
    // @unchecked: every field is behind `lock`.
    private let lock = NSLockLike()
    private let target: (call: CrashPoints.Call?, count: Int)?
    private let trace: Int32
    private let power: String?
    private let backup: String?
    private var counts: [String: Int] = [:]
    private var total = 0
    private var dead = false
    /// Open descriptors and their paths.
    private var paths: [Int32: String] = [:]
    /// Files written and not fsynced since: their size when last durable, and where they are.
    private var dirty: [FileIdentity: (durable: Int64, path: String)] = [:]
    private var lastWritten: FileIdentity?
    /// Folder changes not yet durable, oldest first, with the folders whose fsync makes them so.
    private var pending: [(change: Change, folders: Set<FileIdentity>)] = []
    /// Replaced and removed files kept (as hard links) until the crash, so a lost change can be undone.
    private var saved = 0
    private var savedFor: [String: String] = [:]
    /// Rename targets that were folders before the rename (an empty folder a rename replaced).
    private var folderTargets: Set<String> = []

    enum Change {
        case made(String, directory: Bool)
        case renamed(from: String, to: String, previous: String?, previousWasDirectory: Bool)
        case exchanged(String, String)
        case unlinked(String, saved: String?)
        case removedDirectory(String)
    }

    static func fromEnvironment() -> Injector? {
        let environment = { (name: String) -> String? in getenv(name).map { String(cString: $0) } }
        let at = environment("DEPOT_CRASH_AT")
        let trace = environment("DEPOT_CRASH_TRACE")
        guard at != nil || trace != nil else { return nil }
        var target: (CrashPoints.Call?, Int)?
        if let at {
            let parts = at.split(separator: ":")
            if parts.count == 2, let call = CrashPoints.Call(rawValue: String(parts[0])), let n = Int(parts[1]) {
                target = (call, n)
            } else if let n = Int(at) {
                target = (nil, n)
            }
        }
        let fd = trace.map { open($0, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644) } ?? -1
        let injector = Injector(target: target, trace: fd, power: environment("DEPOT_CRASH_POWER"), backup: environment("DEPOT_CRASH_BACKUP"))
        // A power cut just after the last crash point (N = their count + 1): the disk as the
        // process leaves it, which a missing final fsync would leave incomplete.
        if injector.modelling { atexit { CrashPoints.injector?.exiting() } }
        return injector
    }

    /// The process ends: with a target one past its last crash point, the power cut comes now.
    func exiting() {
        lock.lock()
        guard !dead, let target, target.call == nil, target.count == total + 1 else { lock.unlock(); return }
        dead = true
        cut()
        kill(getpid(), SIGKILL)
        while true { pause() }
    }

    private init(target: (CrashPoints.Call?, Int)?, trace: Int32, power: String?, backup: String?) {
        self.target = target.map { (call: $0.0, count: $0.1) }
        self.trace = trace
        self.power = power
        self.backup = backup
    }

    private var modelling: Bool { power != nil && backup != nil }
    /// `DEPOT_CRASH_STOP=1`: the crash point stops the process (SIGSTOP) instead of killing it.
    private let stop = getenv("DEPOT_CRASH_STOP").map { String(cString: $0) == "1" } ?? false

    func reach(_ call: CrashPoints.Call, _ path: String, _ other: String?) {
        lock.lock()
        if dead { lock.unlock(); while true { pause() } }
        total += 1
        counts[call.rawValue, default: 0] += 1
        if trace >= 0 {
            let line = "\(total) \(call.rawValue) \(path)\(other.map { " " + $0 } ?? "")\n"
            _ = line.withCString { write(trace, $0, strlen($0)) }
        }
        let hit = target.map { $0.call == nil ? $0.count == total : $0.call == call && $0.count == counts[call.rawValue] } ?? false
        if modelling && !hit { prepare(call, path, other) }
        guard hit else { lock.unlock(); return }
        if stop {
            // Paused, not killed: a test runs another process meanwhile and then continues this one.
            lock.unlock()
            kill(getpid(), SIGSTOP)
            return
        }
        dead = true
        if modelling { cut() }
        kill(getpid(), SIGKILL)
        while true { pause() }
    }

    // MARK: The power-cut model

    func opened(_ fd: Int32, _ path: String, created: Bool) {
        guard modelling else { return }
        lock.lock(); defer { lock.unlock() }
        paths[fd] = path
        if created, let id = identity(fd: fd) {
            dirty[id] = (0, path)
            pending.append((.made(path, directory: false), folders(of: [path])))
        }
    }

    func closed(_ fd: Int32) {
        guard modelling else { return }
        lock.lock(); defer { lock.unlock() }
        paths[fd] = nil
    }

    func writing(_ fd: Int32) {
        guard modelling else { return }
        lock.lock(); defer { lock.unlock() }
        guard let path = paths[fd], let (id, size) = identityAndSize(fd: fd) else { return }
        if dirty[id] == nil { dirty[id] = (size, path) }
        lastWritten = id
    }

    /// Before a change: keeps what it replaces or removes, so that a lost change can be undone.
    private func prepare(_ call: CrashPoints.Call, _ path: String, _ other: String?) {
        switch call {
        case .unlink:
            savedFor[path] = keep(path)
        case .rename:
            guard let other else { return }
            savedFor[other] = keep(other)
            var info = stat()
            if lstat(other, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR { folderTargets.insert(other) } else { folderTargets.remove(other) }
        default: break
        }
    }

    private func keep(_ path: String) -> String? {
        guard let backup else { return nil }
        saved += 1
        let copy = backup + "/kept-\(getpid())-\(saved)"
        return link(path, copy) == 0 ? copy : nil
    }

    func done(_ call: CrashPoints.Call, _ path: String, _ other: String?, fd: Int32) {
        guard modelling else { return }
        lock.lock(); defer { lock.unlock() }
        switch call {
        case .mkdir:
            pending.append((.made(path, directory: true), folders(of: [path])))
        case .rename:
            guard let to = other else { return }
            let previous = savedFor.removeValue(forKey: to)
            let wasDirectory = folderTargets.remove(to) != nil
            pending.append((.renamed(from: path, to: to, previous: previous, previousWasDirectory: wasDirectory), folders(of: [path, to])))
            moved(path, to)
        case .exchange:
            guard let other else { return }
            pending.append((.exchanged(path, other), folders(of: [path, other])))
            moved(path, "\u{0}"); moved(other, path); moved("\u{0}", other)
        case .unlink:
            pending.append((.unlinked(path, saved: savedFor.removeValue(forKey: path)), folders(of: [path])))
        case .rmdir:
            pending.append((.removedDirectory(path), folders(of: [path])))
        case .fsync:
            guard let (id, size) = identityAndSize(fd: fd) else { return }
            var info = stat()
            if fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR {
                // What changed in this folder is durable now.
                pending = pending.compactMap { item in
                    var item = item
                    item.folders.remove(id)
                    return item.folders.isEmpty ? nil : item
                }
            } else {
                dirty[id] = nil
                _ = size
            }
        case .ftruncate:
            guard let (id, size) = identityAndSize(fd: fd), let entry = dirty[id] else { return }
            dirty[id] = (min(entry.durable, size), entry.path)
        case .create:
            break
        }
    }

    private func moved(_ from: String, _ to: String) {
        for (id, entry) in dirty where entry.path == from { dirty[id] = (entry.durable, to) }
    }

    private func folders(of paths: [String]) -> Set<FileIdentity> {
        Set(paths.compactMap { System.identity(FileSystem.directory(of: $0)) })
    }

    private func identity(fd: Int32) -> FileIdentity? { identityAndSize(fd: fd)?.0 }

    private func identityAndSize(fd: Int32) -> (FileIdentity, Int64)? {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        return (FileIdentity(device: UInt64(truncatingIfNeeded: info.st_dev), inode: UInt64(truncatingIfNeeded: info.st_ino)), Int64(info.st_size))
    }

    /// Leaves the disk as a power cut now may: unsynced data cut, unsynced folder changes undone.
    private func cut() {
        if power != "entries" {
            for (id, entry) in dirty {
                guard System.identity(entry.path) == id else { continue }
                var info = stat()
                guard lstat(entry.path, &info) == 0 else { continue }
                var keep = entry.durable
                // The file written last may keep part of what followed, cut at a block boundary.
                if id == lastWritten, Int64(info.st_size) > entry.durable {
                    keep += (Int64(info.st_size) - entry.durable) / 2 / 4096 * 4096
                }
                _ = truncate(entry.path, off_t(keep))
            }
        }
        if power != "data" {
            for (change, _) in pending.reversed() {
                switch change {
                case .made(let path, let directory):
                    if directory { removeTree(path) } else { _ = unlink(path) }
                case .renamed(let from, let to, let previous, let previousWasDirectory):
                    _ = rename(to, from)
                    if let previous { _ = link(previous, to) } else if previousWasDirectory { _ = mkdir(to, 0o755) }
                case .exchanged(let a, let b):
                    _ = try? System.exchangeUncounted(a, b)
                case .unlinked(let path, let saved):
                    if let saved { _ = link(saved, path) }
                case .removedDirectory(let path):
                    _ = mkdir(path, 0o755)
                }
            }
        }
        sync()
    }

    private func removeTree(_ path: String) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        if (info.st_mode & S_IFMT) == S_IFDIR {
            for name in System.directoryEntries(path) ?? [] { removeTree(path + "/" + name) }
            _ = rmdir(path)
        } else {
            _ = unlink(path)
        }
    }
}

/// `NSLock` without Foundation's import in this file.
private final class NSLockLike: @unchecked Sendable {
    // @unchecked: a pthread mutex, used only through lock/unlock.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t> = {
        let m = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        pthread_mutex_init(m, nil)
        return m
    }()
    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }
}
#endif
