import DepotCore
import DepotHTTP
import Foundation
import Synchronization

/// How much the blob answer cache may hold.
public struct BlobCacheLimits: Sendable, Hashable {
    /// Bytes of memory for answers: the bodies of blobs of at most ``largestInMemory`` bytes, about
    /// 1 KiB per answer besides, and 5 KiB per server thread for a kept descriptor's answer
    /// (libmicrohttpd's response and its read buffer). 0 keeps no answer.
    public var memoryBytes: Int
    /// Open descriptors of larger blobs kept for their answers. 0 keeps none.
    public var files: Int
    /// The largest blob kept in memory; larger ones are kept as a descriptor (sent by
    /// `sendfile`, which measured faster than a copy from memory at 64 KiB).
    public var largestInMemory: Int
    /// The server's threads: a kept descriptor gets a response (and about 5 KiB) per thread.
    /// The origin sets it from its HTTP configuration's `threads`.
    public var serverThreads: Int

    public init(memoryBytes: Int = 8 << 20, files: Int = 256, largestInMemory: Int = 16 << 10, serverThreads: Int = 4) {
        (self.memoryBytes, self.files, self.largestInMemory, self.serverThreads) = (memoryBytes, files, largestInMemory, serverThreads)
    }

    /// Keeps no answer: every blob request opens its file.
    public static let none = BlobCacheLimits(memoryBytes: 0, files: 0)
}

/// The `200` answers of hot blobs, made once: a blob is immutable and named by its hash, so its
/// answer (headers and body) is the same for every request except the connection. Small blobs
/// are kept in memory (sent with the header in one vectored write), larger ones as an open
/// descriptor (sent by `sendfile`), each as one ``PreparedResponse`` libmicrohttpd queues on any
/// number of connections. Only the answer is kept: the route's checks (the app, its download
/// credentials, a release of that app naming the blob) run on every request before it is used.
///
/// Each use costs one `fstatat` of the blob's file, compared with the file the answer was made
/// from (device, inode, size, modification and change times): a file replaced on disk (restored from a backup, repaired by hand)
/// is answered from the new file at once, a removed one is 404 at once. Bounded by
/// ``BlobCacheLimits`` (a second-chance clock picks what leaves). A blob the store removes or
/// stores again leaves at once (``forget(_:)``, called by the store after the change): its
/// descriptor is closed once no connection still sends it, so its disk space comes back.
final class BlobResponses: Sendable {
    /// One answer; `referenced` is the clock's second chance.
    final class Entry: Sendable {
        let response: PreparedResponse
        let stamp: FileStamp
        let inMemory: Bool
        /// The body, for an answer kept in memory (ranges and conditional requests are served from it).
        let bytes: SharedBytes?
        let referenced = Atomic<Bool>(true)
        init(response: PreparedResponse, stamp: FileStamp, bytes: SharedBytes?) {
            (self.response, self.stamp, self.inMemory, self.bytes) = (response, stamp, bytes != nil, bytes)
        }
        /// What it counts against the memory limit, given the server's threads.
        func cost(threads: Int) -> Int {
            inMemory ? Int(response.bodyLength) + BlobResponses.overhead : BlobResponses.fileCost(threads: threads)
        }
    }

    /// What a lookup found.
    enum Lookup {
        /// The prepared answer.
        case answer(PreparedResponse)
        /// Not kept (the limits): the blob, opened, for the usual path.
        case opened(StoredBlob)
        /// No such blob in the store.
        case missing
    }

    struct Key: Hashable, Sendable {
        let sha256: String
        /// `Cache-Control: private` (an app with download credentials).
        let gated: Bool
    }

    private struct State {
        var entries: [Key: Entry] = [:]
        /// The clock's order: every kept key, once.
        var ring: [Key] = []
        var hand = 0
        var memory = 0
        var files = 0
        /// Bumped by every ``forget(_:)``: an answer made from a file opened before a removal is not kept.
        var generation: UInt64 = 0
    }

    /// Bytes counted for an answer besides its body (the response, its headers, the entry).
    static let overhead = 1024

    /// Bytes counted for a kept descriptor's answer: a libmicrohttpd response per thread, each
    /// with its 4 KiB read buffer.
    static func fileCost(threads: Int) -> Int { overhead + (5 << 10) * min(max(threads, 1), PreparedResponse.threadSlots) }
    let limits: BlobCacheLimits
    private let state = Mutex(State())
    /// The blobs folder, open for `fstatat` and `openat` by relative name; -1 when disabled.
    private let folder: Int32

    /// Answers of the blobs under `blobsFolder` (`ab/abcdef…`); nil or ``BlobCacheLimits/none``: none kept.
    init(limits: BlobCacheLimits, blobsFolder: String?) {
        let usable = limits.memoryBytes >= Self.overhead
        self.limits = usable ? limits : .none
        folder = usable ? blobsFolder.map { open($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC) } ?? -1 : -1
    }

    deinit { if folder >= 0 { close(folder) } }

    var isEnabled: Bool { folder >= 0 }

    /// The answer to a plain `GET` or `HEAD` of blob `key.sha256` (64 lower-case hex digits,
    /// checked by the route), made on first use; `headers` makes its fields from its size and time.
    func answer(_ key: Key, headers: (Int64, Date) -> HTTPHeaders) throws -> Lookup {
        guard let stamp = stamp(key.sha256) else {
            // Gone from the disk (by hand): its answers go too, if any were kept.
            drop(key.sha256, bump: false)
            return .missing
        }
        let (hit, generation) = state.withLock { ($0.entries[key], $0.generation) }
        if let hit, hit.stamp == stamp {
            hit.referenced.store(true, ordering: .relaxed)
            return .answer(hit.response)
        }
        guard let (file, opened) = openBlob(key.sha256) else { return .missing }
        let modified = Date(timeIntervalSince1970: Double(opened.seconds))
        guard let entry = make(file, opened, headers: headers(opened.size, modified)) else {
            guard file.rawValue >= 0 else { throw DepotError(.failure, "storage_error", "could not prepare the answer of blob \(key.sha256)") }
            return .opened(StoredBlob(file: file, size: opened.size, modified: modified))
        }
        let (kept, replaced) = state.withLock { state -> (Entry?, Entry?) in
            // Removed (or stored again) while it was opened: the descriptor may name a deleted file.
            guard state.generation == generation else { return (nil, nil) }
            if let raced = state.entries[key], raced.stamp == opened { return (raced, nil) }
            let replaced = state.entries.updateValue(entry, forKey: key)
            if let replaced { remove(replaced, &state) } else { state.ring.append(key) }
            state.memory += entry.cost(threads: limits.serverThreads)
            if !entry.inMemory { state.files += 1 }
            evict(&state)
            return (entry, replaced)
        }
        _ = replaced  // A stale answer, released outside the lock.
        // Not kept: this request still gets the answer (it holds the only reference, freed after queueing).
        return .answer((kept ?? entry).response)
    }

    /// The body of a blob kept in memory, if it is and its file is still the one it was read
    /// from (one `fstatat`), with its size and time: a `Range` or conditional request is answered
    /// from it, without opening the file.
    func keptBytes(_ key: Key) -> (bytes: SharedBytes, size: Int64, modified: Date)? {
        guard let entry = state.withLock({ $0.entries[key] }), let bytes = entry.bytes, stamp(key.sha256) == entry.stamp else { return nil }
        entry.referenced.store(true, ordering: .relaxed)
        return (bytes, entry.stamp.size, Date(timeIntervalSince1970: Double(entry.stamp.seconds)))
    }

    /// Drops the answers of blob `sha256` (removed or stored again). Connections sending it finish.
    func forget(_ sha256: String) { drop(sha256, bump: true) }

    /// Drops the answers of blob `sha256`; `bump`: an answer being made from a file opened before
    /// now is not kept (the store changed the blob).
    private func drop(_ sha256: String, bump: Bool) {
        let dropped = state.withLock { state -> [Entry] in
            if bump { state.generation &+= 1 }
            let dropped = [true, false].compactMap { gated -> Entry? in
                guard let entry = state.entries.removeValue(forKey: Key(sha256: sha256, gated: gated)) else { return nil }
                remove(entry, &state)
                return entry
            }
            // The clock holds each kept key once: a key dropped here leaves it (a key stored
            // again and again must not pile up in it).
            if !dropped.isEmpty {
                state.ring.removeAll { $0.sha256 == sha256 }
                state.hand = 0
            }
            return dropped
        }
        _ = dropped  // Released here, outside the lock.
    }

    /// Drops the kept answers whose file is no longer the one on disk (removed or replaced by
    /// hand, not through the store): a request would find out, but a blob nobody asks for again
    /// would keep its descriptor — and its disk space — until evicted. The origin's writer
    /// thread calls it every few seconds; it costs one `fstatat` per kept descriptor. Returns
    /// how many blobs it dropped.
    @discardableResult
    func sweepRemoved() -> Int {
        let kept = state.withLock { state in state.entries.filter { !$0.value.inMemory }.map { ($0.key.sha256, $0.value.stamp) } }
        var gone = Set<String>()
        for (sha256, stamp) in kept where self.stamp(sha256) != stamp { gone.insert(sha256) }
        for sha256 in gone { drop(sha256, bump: false) }
        return gone.count
    }

    /// Answers kept, bytes counted and descriptors open, for tests and the figures.
    var figures: (answers: Int, memory: Int, files: Int) { state.withLock { ($0.entries.count, $0.memory, $0.files) } }

    /// For tests: the keys on the clock, and the bytes and descriptors of the kept answers summed
    /// afresh (the running counts must equal them).
    var recount: (clock: Int, memory: Int, files: Int) {
        state.withLock { state in
            (state.ring.count, state.entries.values.reduce(0) { $0 + $1.cost(threads: limits.serverThreads) }, state.entries.values.filter { !$0.inMemory }.count)
        }
    }

    /// `ab/abcdef…` as a C string, built on the stack.
    private func withRelativePath<R>(_ sha256: String, _ body: (UnsafePointer<CChar>) -> R) -> R {
        var sha256 = sha256
        return sha256.withUTF8 { hex in
            withUnsafeTemporaryAllocation(of: CChar.self, capacity: 68) { path in
                path[0] = CChar(bitPattern: hex[0])
                path[1] = CChar(bitPattern: hex[1])
                path[2] = CChar(UInt8(ascii: "/"))
                for index in 0..<64 { path[3 + index] = CChar(bitPattern: hex[index]) }
                path[67] = 0
                return body(path.baseAddress!)
            }
        }
    }

    private func stamp(_ sha256: String) -> FileStamp? {
        guard sha256.utf8.count == 64 else { return nil }
        var info = stat()
        guard withRelativePath(sha256, { fstatat(folder, $0, &info, 0) }) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        return FileStamp(info)
    }

    /// The blob's file, open, and the stamp of what was opened.
    private func openBlob(_ sha256: String) -> (FileDescriptor, FileStamp)? {
        let fd = withRelativePath(sha256) { openat(folder, $0, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        let file = FileDescriptor(adopting: fd, path: "blobs/" + sha256)
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        return (file, FileStamp(info))
    }

    /// The prepared answer of an opened blob: its bytes in memory when small and the limit allows,
    /// else its descriptor (passed to the answer). Nil when neither fits the limits or the bytes
    /// could not be read.
    private func make(_ file: FileDescriptor, _ stamp: FileStamp, headers: HTTPHeaders) -> Entry? {
        let size = Int(stamp.size)
        if size <= limits.largestInMemory && size + Self.overhead <= limits.memoryBytes {
            var bytes = [UInt8](repeating: 0, count: size)
            let read = bytes.withUnsafeMutableBytes { buffer in (try? file.read(into: buffer, at: 0)) ?? -1 }
            let shared = SharedBytes(bytes)
            guard read == size, let response = PreparedResponse(headers: headers, body: .shared(shared)) else { return nil }
            return Entry(response: response, stamp: stamp, bytes: shared)
        }
        guard limits.files > 0, Self.fileCost(threads: limits.serverThreads) <= limits.memoryBytes,
              let response = PreparedResponse(headers: headers, body: .file(descriptor: file.release(), length: stamp.size), threads: limits.serverThreads)
        else { return nil }
        return Entry(response: response, stamp: stamp, bytes: nil)
    }

    private func remove(_ entry: Entry, _ state: inout State) {
        state.memory -= entry.cost(threads: limits.serverThreads)
        if !entry.inMemory { state.files -= 1 }
    }

    /// Removes entries, clock order, until both limits hold.
    private func evict(_ state: inout State) {
        while (state.memory > limits.memoryBytes || state.files > limits.files) && !state.ring.isEmpty {
            if state.hand >= state.ring.count { state.hand = 0 }
            let key = state.ring[state.hand]
            guard let entry = state.entries[key] else {
                // Not expected (a key leaves the clock with its entry); dropped all the same.
                state.ring.swapAt(state.hand, state.ring.count - 1)
                state.ring.removeLast()
                continue
            }
            // Over the descriptor limit, only a descriptor's answer leaving helps.
            let helps = state.memory > limits.memoryBytes || !entry.inMemory
            if helps && !entry.referenced.exchange(false, ordering: .relaxed) {
                state.entries[key] = nil
                remove(entry, &state)
                state.ring.swapAt(state.hand, state.ring.count - 1)
                state.ring.removeLast()
            } else {
                state.hand += 1
            }
        }
    }
}
