@testable import DepotClient
@testable import DepotTransport
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// The installer's view of a download in progress: reads wait for their bytes, fail once the
/// file is cut back under them or the download is given up.
@Suite("DownloadFollower")
struct DownloadFollowerTests {
    /// Reads `count` bytes at `offset` on a thread of its own (the read blocks, which Swift's
    /// cooperative pool must not); the result arrives when the read returns.
    static func readLater(_ follower: DownloadFollower, at offset: Int64, count: Int) -> Task<Result<[UInt8], any Error>, Never> {
        let (stream, continuation) = AsyncStream.makeStream(of: Result<[UInt8], any Error>.self)
        Thread.detachNewThread {
            continuation.yield(Result {
                var buffer = [UInt8](repeating: 0, count: count)
                let n = try buffer.withUnsafeMutableBytes { try follower.read(into: $0, at: offset) }
                return Array(buffer[0..<n])
            })
            continuation.finish()
        }
        return Task { await stream.first { _ in true }! }
    }

    @Test("A read waits until the downloader has written its range, then returns those bytes")
    func waitsForBytes() async throws {
        let work = TemporaryDirectory("depot-follower")
        defer { work.remove() }
        let path = work.path + "/partial"
        let follower = try DownloadFollower(path: path, total: 1000)
        _ = follower.beginPass()
        let read = Self.readLater(follower, at: 100, count: 200)
        let writer = try FileDescriptor(path: path, flags: O_WRONLY)
        try writer.write((0..<250).map { UInt8($0) })
        follower.advance(to: 250)
        try await Task.sleep(for: .milliseconds(100))
        try writer.write((250..<1000).map { UInt8(truncatingIfNeeded: $0) })
        follower.advance(to: 1000)
        #expect(try await read.value.get() == (100..<300).map { UInt8(truncatingIfNeeded: $0) })
        // Past the end: nothing, at once.
        #expect(try await Self.readLater(follower, at: 1000, count: 10).value.get().isEmpty)
        // A read near the end waits only for what the file will have.
        #expect(try await Self.readLater(follower, at: 990, count: 64).value.get().count == 10)
    }

    @Test("A file cut back under a pass fails that pass's reads with rewound; the next pass reads the new bytes")
    func rewound() async throws {
        let work = TemporaryDirectory("depot-follower")
        defer { work.remove() }
        let path = work.path + "/partial"
        let follower = try DownloadFollower(path: path, total: 100)
        let writer = try FileDescriptor(path: path, flags: O_WRONLY)
        try writer.write([UInt8](repeating: 1, count: 50))
        follower.advance(to: 50)
        let first = follower.beginPass()
        #expect(try await Self.readLater(follower, at: 0, count: 50).value.get() == [UInt8](repeating: 1, count: 50))
        let waiting = Self.readLater(follower, at: 50, count: 50)
        try await Task.sleep(for: .milliseconds(50))
        // The next attempt starts over (a 200 to a range request): the waiting read must not
        // go on with bytes of another attempt.
        try writer.truncate(to: 0)
        try writer.seek(to: 0)
        follower.settle(at: 0)
        try writer.write([UInt8](repeating: 2, count: 100))
        follower.advance(to: 100)
        let rewoundRead = await waiting.value
        #expect(throws: DownloadFollower.Interruption.rewound) { try rewoundRead.get() }
        #expect(follower.rewound(since: first))
        let second = follower.beginPass()
        #expect(try await Self.readLater(follower, at: 0, count: 100).value.get() == [UInt8](repeating: 2, count: 100))
        #expect(!follower.rewound(since: second))
        #expect(!follower.starved)
    }

    @Test("Once the download is given up, a waiting read fails with abandoned and the follower says it starved")
    func abandoned() async throws {
        let work = TemporaryDirectory("depot-follower")
        defer { work.remove() }
        let follower = try DownloadFollower(path: work.path + "/partial", total: 100)
        _ = follower.beginPass()
        let waiting = Self.readLater(follower, at: 0, count: 10)
        try await Task.sleep(for: .milliseconds(50))
        follower.abandon()
        let abandonedRead = await waiting.value
        #expect(throws: DownloadFollower.Interruption.abandoned) { try abandonedRead.get() }
        #expect(follower.starved)
    }
}
