import DepotCore
import DepotTestSupport
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Many resumable (tus) uploads in flight at once against the real `depot serve` process:
/// every one open in the middle of its body at the same moment, a tenth dropped there and
/// resumed, all completed, then released together. `DEPOT_CONCURRENT_UPLOADS` sets how many
/// (1,000 by default).
@Suite("Reliability: concurrent resumable uploads", .serialized, .enabled(if: HeavyTests.enabled, "run alone by Deploy/setup.sh test, with DEPOT_HEAVY_TESTS=1"))
struct ConcurrentUploadTests {
    static let count = Int(ProcessInfo.processInfo.environment["DEPOT_CONCURRENT_UPLOADS"] ?? "") ?? 1000

    /// Reads one response (head, and a body framed by Content-Length) from `fd`.
    static func response(_ fd: Int32) -> RawHTTP.Response? {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16384)
        while true {
            if let response = RawHTTP.parse(received).first,
               received.count >= (received.firstRange(of: [13, 10, 13, 10])?.upperBound ?? .max) + (Int(response.header("Content-Length") ?? "0") ?? 0) {
                return response
            }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return nil }
            received += buffer[0..<n]
        }
    }

    static func body(_ index: Int) -> [UInt8] { (0..<(96 << 10) + index % 7).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ index) } }

    @Test("Uploads all in the middle of their bodies at once, a tenth dropped and resumed: every one completes with its bytes, one release lists them all, open files come back")
    func thousand() async throws {
        // Both ends hold a socket per upload, and the origin a file besides.
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        limit.rlim_cur = limit.rlim_max
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        #expect(Int(limit.rlim_cur) > 2 * Self.count + 100, "the test process may open \(limit.rlim_cur) files")

        let work = TemporaryDirectory("depot-uploads")
        defer { work.remove() }
        // The idle timeout well above what opening every connection takes: with the default 30 s,
        // a busy machine (CI runs the heavy suites side by side) took longer to open the last than
        // the origin kept the first, which it closed idle, and they were never all in flight at once.
        let server = try ServeProcess(data: work.path + "/data", environment: [
            "DEPOT_CONNECTION_LIMIT": String(2 * Self.count + 100), "DEPOT_LOG_LEVEL": "warning", "DEPOT_THREADS": "4", "DEPOT_TIMEOUT": "900",
        ])
        defer { server.process.terminate(); server.process.waitUntilExit() }
        let port = UInt16(server.port)!
        let pid = server.process.processIdentifier
        let app = "com.example.dev"
        let auth = "Authorization: Bearer \(server.token)\r\nTus-Resumable: 1.0.0\r\n"
        let baseline = ProcessProbe.settledOpenFiles(pid)

        // Created one by one.
        var uploads: [String] = []
        for index in 0..<Self.count {
            let metadata = "pack \(Data("u\(index)".utf8).base64EncodedString()),sha256 \(Data(Hex.encode(SHA256Hasher.hash(Self.body(index))).utf8).base64EncodedString())"
            let created = try #require(try RawHTTP.send(port: port, "POST /v1/apps/\(app)/uploads HTTP/1.1\r\nHost: x\r\n\(auth)"
                + "Upload-Length: \(Self.body(index).count)\r\nUpload-Metadata: \(metadata)\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").first)
            #expect(created.status == 201)
            uploads.append(try #require(created.header("Location")))
        }

        // Every PATCH sends its head and half its body; all are then open in the origin at once.
        let started = ContinuousClock.now
        var sockets: [Int32] = []
        for (index, path) in uploads.enumerated() {
            let fd = try RawHTTP.connect(port: port)
            let body = Self.body(index)
            RawHTTP.sendAll(fd, Array(("PATCH \(path) HTTP/1.1\r\nHost: x\r\n\(auth)Upload-Offset: 0\r\nContent-Type: application/offset+octet-stream\r\n"
                + "Content-Length: \(body.count)\r\n\r\n").utf8) + body[..<(body.count / 2)])
            sockets.append(fd)
        }
        let opened = ContinuousClock.now
        // (Waited for as an event: a busy machine takes its time to accept a thousand connections.)
        var open = 0
        Eventually.wait(every: .milliseconds(100)) {
            open = ProcessProbe.openFiles(pid)
            return open >= baseline + 2 * Self.count
        }
        guard open >= baseline + 2 * Self.count else {
            // Not worth a thousand more failures: what the origin said instead.
            server.process.terminate()
            server.process.waitUntilExit()
            Issue.record("a socket and a container file per upload in flight: \(open) open files, \(baseline) before; opening them took \(opened - started); the origin said: \(server.errorOutput().suffix(4000))")
            return
        }
        let peakKiB = ProcessProbe.residentKiB(pid)

        // A tenth drop their connection there; the rest send the other half.
        for (index, fd) in sockets.enumerated() where index % 10 == 0 { close(fd) }
        for (index, fd) in sockets.enumerated() where index % 10 != 0 {
            let body = Self.body(index)
            RawHTTP.sendAll(fd, Array(body[(body.count / 2)...]))
        }
        for (index, fd) in sockets.enumerated() where index % 10 != 0 {
            let response = Self.response(fd)
            close(fd)
            #expect(response?.status == 204 && response?.header("Upload-Offset") == String(Self.body(index).count), "upload \(index): \(response?.status ?? 0)")
        }
        // The dropped ones resume from the offset the origin kept.
        for (index, path) in uploads.enumerated() where index % 10 == 0 {
            let body = Self.body(index)
            var offset = -1
            try Eventually.wait(every: .milliseconds(50)) {
                let head = try #require(try RawHTTP.send(port: port, "HEAD \(path) HTTP/1.1\r\nHost: x\r\n\(auth)Connection: close\r\n\r\n").first)
                // 409 while the dropped request is still being wound up.
                if head.status == 200, let value = head.header("Upload-Offset").flatMap({ Int($0) }) { offset = value }
                return offset >= 0
            }
            #expect(offset >= 0 && offset <= body.count / 2, "upload \(index) kept \(offset) bytes")
            // (HEAD answers the commit a moment before the dropped request lets the upload go:
            // until then a PATCH is refused as busy, 409 upload_busy, and sent again.)
            var rest: RawHTTP.Response?
            try Eventually.wait(every: .milliseconds(50)) {
                rest = try RawHTTP.send(port: port, "PATCH \(path) HTTP/1.1\r\nHost: x\r\n\(auth)Upload-Offset: \(offset)\r\n"
                    + "Content-Type: application/offset+octet-stream\r\nContent-Length: \(body.count - offset)\r\nConnection: close\r\n\r\n",
                    body: Array(body[offset...]), timeout: 30).first
                return !(rest?.status == 409 && rest?.bodyText.contains("busy") == true)
            }
            #expect(rest?.status == 204, "upload \(index) resumed: \(rest?.status ?? 0) \(rest?.bodyText ?? "")")
        }
        let took = ContinuousClock.now - started

        let release = try #require(try RawHTTP.send(port: port, "POST /v1/apps/\(app)/releases HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(server.token)\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", timeout: RawHTTP.changeWait).first)
        #expect(release.status == 201, "\(release.bodyText)")
        // Counted before the manifest is read: its answer (a large envelope's, from a file) keeps
        // a descriptor per server thread while it is live, by design.
        let after = ProcessProbe.openFiles(pid, backTo: baseline, within: 10)
        let manifest = try #require(try RawHTTP.send(port: port, "GET /v1/apps/\(app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout: 30).first)
        let packs = try Manifest.decode(Array(try #require(Data(base64Encoded: Envelope.decode(manifest.body).payload)))).packs
        #expect(packs.count == Self.count)
        let byID = Dictionary(uniqueKeysWithValues: packs.map { ($0.id, $0) })
        for index in 0..<Self.count {
            #expect(byID["u\(index)"]?.plaintextSHA256 == Hex.encode(SHA256Hasher.hash(Self.body(index))), "pack u\(index)")
        }
        #expect(after <= baseline + 2, "open files back: \(after), \(baseline) before")
        print("ConcurrentUploadTests: \(Self.count) uploads in flight at once, origin peak RSS \(peakKiB / 1024) MiB, all completed in \(took)")
    }
}
