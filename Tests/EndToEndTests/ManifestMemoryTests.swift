import DepotCore
import DepotHTTP
@testable import DepotServer
import DepotTestSupport
import Foundation
import Logging
import Testing

/// Memory bounded by a cap the operator sets (issue 63): live envelopes are kept in memory up to
/// `--manifest-memory` in all, whatever the number of channels; past it a channel's live release
/// is sent from its file (the release, or its signed copy), with the same bytes, ETag, `304`s and
/// ranges. A file replaced underneath (a re-signed copy written by another process) is read
/// again, never sent under the old ETag.
@Suite("Live manifests past the memory budget", .serialized)
struct ManifestMemoryTests {
    @Test("With a 64 KiB budget and 12 channels: at most 64 KiB kept, the rest sent from their files byte-identical with their ETags, 304 and 206 answered; a file replaced underneath is read again")
    func pastTheBudgetFromFiles() throws {
        let work = TemporaryDirectory("depot-manifest-memory")
        defer { work.remove() }
        let data = work.path + "/data"
        let shape = HistoryFixture.Shape(releases: 12, window: 3, windowPacks: 60, channels: 5, bigManifestPacks: 300)
        try HistoryFixture.build(data: data, shape: shape)
        var configuration = OriginConfiguration(
            dataPath: data, http: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 2), logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        )
        configuration.patchDepth = 0
        configuration.publicURL = HistoryFixture.publicURL
        configuration.manifestMemory = 64 << 10
        let server = try DepotServer(configuration: configuration)
        defer { server.stop() }
        // Its first maintenance pass (which may read and re-sign live releases) is over.
        #expect(Eventually.wait { server.maintenancePasses >= 1 })
        let folder = DataFolder(data)
        func get(_ path: String, _ headers: String = "") throws -> RawHTTP.Response {
            try #require(try RawHTTP.send(port: server.port, "GET \(path) HTTP/1.1\r\nHost: x\r\n\(headers)Connection: close\r\n\r\n").first)
        }
        func onDisk(_ app: String, _ channel: String) throws -> [UInt8] {
            let pointer = channel == "production" ? folder.currentPointer(app) : folder.channels(app) + "/" + channel
            let version = try #require(Int(String(decoding: FileSystem.readFile(pointer), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)))
            let copy = folder.signedCopies(app, channel: channel) + "/" + DataFolder.releaseName(version)
            return try FileSystem.readFile(FileSystem.exists(copy) ? copy : folder.release(app, version))
        }
        var targets: [(app: String, channel: String)] = [(HistoryFixture.bigApp, "production")]
        for app in HistoryFixture.historyApps {
            targets.append((app, "production"))
            for channel in 1...shape.channels { targets.append((app, "c\(channel)")) }
        }
        for (app, channel) in targets {
            let path = channel == "production" ? "/v1/apps/\(app)/manifest" : "/v1/apps/\(app)/channels/\(channel)/manifest"
            let answer = try get(path)
            let expected = try onDisk(app, channel)
            #expect(answer.status == 200 && answer.body == expected, "\(app) \(channel): \(answer.status), \(answer.body.count) of \(expected.count) bytes")
            let etag = "\"" + Hex.encode(SHA256Hasher.hash(expected)) + "\""
            #expect(answer.header("etag") == etag, "\(app) \(channel)")
            #expect(try get(path, "If-None-Match: \(etag)\r\n").status == 304)
            let ranged = try get(path, "Range: bytes=10-99\r\n")
            #expect(ranged.status == 206 && ranged.body == Array(expected[10...99]))
        }
        let (bytes, onFile) = server.origin.releases.live.withLock { ($0.bytes, $0.onFile) }
        #expect(bytes <= 64 << 10 && onFile > 0, "\(bytes) bytes in memory, \(onFile) on file")
        // The big app's live release (about 200 KB) is past the budget: its file replaced by a
        // rename with other bytes (another release's envelope), as another process re-signing it
        // would. It is read again: the answer's ETag is the new bytes'.
        #expect(server.origin.releases.live.withLock { $0[HistoryFixture.bigApp + "\u{0}production"]?.body == nil })
        let live = folder.release(HistoryFixture.bigApp, 1)
        let other = try FileSystem.readFile(folder.release(HistoryFixture.historyApps[0], 1))
        try FileSystem.writeAtomically(other, to: live)
        let again = try get("/v1/apps/\(HistoryFixture.bigApp)/manifest")
        #expect(again.status == 200 && again.body == other)
        #expect(again.header("etag") == "\"" + Hex.encode(SHA256Hasher.hash(other)) + "\"")
    }
}
