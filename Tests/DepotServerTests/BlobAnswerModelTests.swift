import DepotCore
@testable import DepotHTTP
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// The answer cache as a state machine: a seeded walk of requests (public and private), blobs
/// stored and removed through the store (which tells the cache), files replaced and removed by
/// hand (which nobody tells it), checked from outside after every step: an answer is always
/// the file on disk now (its size and time), a missing file is missing, the limits hold, and the
/// counts come back to zero with every descriptor closed. `DEPOT_ANSWER_SEED=S` replays a walk.
@Suite("Blob answers as a state machine: a seeded walk, checked after every step")
struct BlobAnswerModelTests {
    static var seeds: [UInt64] {
        guard let given = ProcessInfo.processInfo.environment["DEPOT_ANSWER_SEED"] else { return [UInt64(Date().timeIntervalSince1970), 1, 2] }
        // A seed that does not parse is a walk of seed 0 that fails (below), never no walk at all.
        return given.split(separator: ",").map { UInt64($0) ?? 0 }
    }

    /// The bytes an answer sends (memory, or its descriptor read whole).
    static func body(_ prepared: PreparedResponse) -> [UInt8]? {
        switch prepared.fresh() {
        case .shared(let bytes, let offset, let length):
            return Array(UnsafeRawBufferPointer(rebasing: bytes.storage[offset..<(offset + length)]))
        case .file(let region):
            let file = FileDescriptor(adopting: region.take(), path: "answer")
            var out = [UInt8](repeating: 0, count: Int(region.length))
            let read = out.withUnsafeMutableBytes { (try? file.read(into: $0, at: region.offset)) ?? -1 }
            return read == out.count ? out : nil
        default:
            return nil
        }
    }

    /// Descriptors of this process open on a file under `folder` (deleted ones included).
    static func openDescriptors(under folder: String) -> [String] {
        FileSystem.contents(of: "/proc/self/fd").compactMap { fd in
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + fd) else { return nil }
            return target.hasPrefix(folder + "/") ? target : nil
        }
    }

    @Test("Every answer is the file on disk now; the limits hold; nothing stays counted or open", arguments: seeds)
    func walk(seed: UInt64) throws {
        print("BlobAnswerModelTests: DEPOT_ANSWER_SEED=\(seed)")
        try #require(seed != 0 || ProcessInfo.processInfo.environment["DEPOT_ANSWER_SEED"] == nil, "DEPOT_ANSWER_SEED must be numbers")
        let root = TemporaryDirectory("depot-answers")
        defer { root.remove() }
        let blobs = root.path + "/blobs"
        let store = FileBlobStore(folder: DataFolder(root.path))
        try DataFolder(root.path).prepare()
        var random = seed &* 6364136223846793005 &+ 1442695040888963407
        func next(_ bound: Int) -> Int {
            random = random &* 6364136223846793005 &+ 1442695040888963407
            return Int((random >> 33) % UInt64(bound))
        }
        // Eight names; sizes across both kinds (memory up to 16 KiB, descriptors above).
        let names = (0..<8).map { Hex.encode(SHA256Hasher.hash(Array("blob \($0)".utf8))) }
        let limits = BlobCacheLimits(memoryBytes: 48 << 10, files: 2, serverThreads: 2)
        do {
            let answers = BlobResponses(limits: limits, blobsFolder: blobs)
            let changes = FileBlobStore(folder: DataFolder(root.path), changed: { answers.forget($0) })
            func path(_ name: String) -> String { blobs + "/" + name.prefix(2) + "/" + name }
            // What each file on disk holds now, as the walk wrote it (nil: no file).
            var model: [String: [UInt8]] = [:]
            var kept = 0
            func write(_ name: String, through store: Bool) throws {
                let size = [100, 5_000, 16 << 10, 40_000, 200_000][next(5)]
                let bytes = (0..<size).map { _ in UInt8(next(256)) }
                model[name] = bytes
                let temporary = root.path + "/uploads/t\(next(1_000_000))"
                try FileSystem.writeAtomically(bytes, to: temporary)
                if store {
                    try changes.put(temporaryFile: temporary, sha256: name)
                } else {
                    try FileSystem.createDirectory(FileSystem.directory(of: path(name)))
                    try FileSystem.durableRename(temporary, to: path(name))
                }
            }
            for step in 0..<400 {
                let name = names[next(names.count)]
                let operation = next(10)
                switch operation {
                case 0, 1: try write(name, through: true)
                case 2: try write(name, through: false)
                case 3:
                    changes.remove(name)
                    model[name] = nil
                case 4:
                    _ = unlink(path(name))
                    model[name] = nil
                default:
                    let gated = next(2) == 1
                    let found = try answers.answer(BlobResponses.Key(sha256: name, gated: gated), headers: { (size: Int64, modified: Date) -> HTTPHeaders in
                        var headers = HTTPHeaders()
                        headers.add("X-Stamp", "\(size) \(modified.timeIntervalSince1970) \(gated)")
                        return headers
                    })
                    var info = stat()
                    let exists = stat(path(name), &info) == 0
                    switch found {
                    case .missing:
                        #expect(!exists && model[name] == nil, "step \(step): a file on disk answered as missing")
                    case .opened(let blob):
                        #expect(exists && blob.size == Int64(info.st_size), "step \(step)")
                    case .answer(let prepared):
                        kept += 1
                        #expect(exists, "step \(step): an answer for a file that is gone")
                        let now = "\(info.st_size) \(Double(info.st_mtim.tv_sec)) \(gated)"
                        #expect(prepared.headers["X-Stamp"] == now, "step \(step): not the file on disk now")
                        #expect(Self.body(prepared) == model[name], "step \(step): the answer's bytes are not the file's")
                    }
                }
                // From outside: the limits hold, and the running counts are the kept answers' own.
                let figures = answers.figures
                let recount = answers.recount
                #expect(figures.memory <= limits.memoryBytes && figures.files <= limits.files, "step \(step): \(figures)")
                #expect(recount.memory == figures.memory && recount.files == figures.files && recount.clock == figures.answers, "step \(step): \(figures) \(recount)")
            }
            #expect(kept > 20, "answers were kept and used (\(kept))")
            // Everything removed through the store: nothing stays counted.
            for name in names { changes.remove(name) }
            let figures = answers.figures
            #expect(figures.answers == 0 && figures.memory == 0 && figures.files == 0, "\(figures)")
        }
        _ = store
        #expect(Self.openDescriptors(under: blobs).isEmpty, "still open: \(Self.openDescriptors(under: blobs))")
    }
}
