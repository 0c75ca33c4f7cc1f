import DepotCore
import DepotTestSupport
import Foundation
import Testing

@Suite("End to end: resumable uploads with a standard tus client")
struct ResumableUploadEndToEndTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/tus_upload.py").path

    /// Runs tuspy; returns the upload URL and offset it printed.
    static func tuspy(_ server: ServeProcess, token: String, file: String, _ extra: [String]) throws -> (url: String, offset: Int) {
        let result = try Processes.run("/usr/bin/env", [
            "python3", script, server.url + "/v1/apps/com.example.dev/uploads", file, "--token", token, "--pack", "world",
            "--chunk-size", "1500000", "--meta", "policy=essential",
        ] + extra)
        #expect(result.status == 0, "tuspy failed: \(result.stderr)")
        let lines = result.stdout.split(separator: "\n")
        return (lines.first.map(String.init) ?? "", lines.count > 1 ? Int(lines[1]) ?? -1 : -1)
    }

    static func head(_ server: ServeProcess, _ path: String, token: String) throws -> Int? {
        let response = try RawHTTP.send(port: UInt16(server.port)!, "HEAD \(path) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nTus-Resumable: 1.0.0\r\nConnection: close\r\n\r\n").first
        return response?.header("Upload-Offset").flatMap { Int($0) }
    }

    /// Sends a PATCH with no body at `offset`; returns its status.
    static func emptyPatch(_ server: ServeProcess, _ path: String, token: String, offset: Int) throws -> Int? {
        try RawHTTP.send(port: UInt16(server.port)!, "PATCH \(path) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: \(offset)\r\n"
            + "Content-Type: application/offset+octet-stream\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").first?.status
    }

    /// Opens a PATCH for the rest of the file, sends `count` bytes of it and returns the socket, still open.
    static func partialPatch(_ server: ServeProcess, _ path: String, token: String, file: [UInt8], offset: Int, count: Int) throws -> Int32 {
        let fd = try RawHTTP.connect(port: UInt16(server.port)!)
        let head = "PATCH \(path) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: \(offset)\r\n"
            + "Content-Type: application/offset+octet-stream\r\nContent-Length: \(file.count - offset)\r\n\r\n"
        RawHTTP.sendAll(fd, Array(head.utf8) + file[offset..<(offset + count)])
        return fd
    }

    @Test("tuspy stops, the connection drops mid-chunk, the server is SIGKILLed mid-chunk; tuspy resumes and the pack decrypts to the original")
    func interruptedThreeWays() async throws {
        let work = TemporaryDirectory("depot-tus")
        defer { work.remove() }
        let data = work.path + "/data"
        var server = try ServeProcess(data: data, environment: [:])
        let token = server.token
        let file = try work.file("world.bin", size: 7_000_000 + 4321, seed: 42)
        let original = try FileSystem.readFile(file)

        // 1. The client stops between chunks (two of 1.5 MB: segment boundaries fall inside them).
        let (url, first) = try Self.tuspy(server, token: token, file: file, ["--chunks", "2"])
        #expect(first == 3_000_000)
        let path = try #require(URL(string: url)?.path)
        #expect(path.hasPrefix("/v1/apps/com.example.dev/uploads/"))

        // 2. A connection drops in the middle of a chunk: what arrived is kept. (Bytes still in
        // flight when the connection ends may be lost; tus clients ask for the offset anyway.)
        let dropped = try Self.partialPatch(server, path, token: token, file: original, offset: 3_000_000, count: 2_000_001)
        try await Task.sleep(for: .milliseconds(300))
        close(dropped)
        var offset = 0
        try Eventually.wait(every: .milliseconds(50)) {
            offset = try Self.head(server, path, token: token) ?? 0
            return offset > 3_000_000
        }
        #expect(offset > 3_000_000 && offset <= 5_000_001, "kept what arrived: \(offset)")

        // 3. The server dies in the middle of a chunk: after the restart the upload is where it was.
        // (The dropped request releases the upload just after its commit: an empty PATCH answered
        // 204 shows it is free, so the next PATCH is taken, not refused as busy.)
        Eventually.wait(every: .milliseconds(50)) { (try? Self.emptyPatch(server, path, token: token, offset: offset)) == 204 }
        let socket = try Self.partialPatch(server, path, token: token, file: original, offset: offset, count: 1_000_000)
        try await Task.sleep(for: .milliseconds(300))
        kill(server.process.processIdentifier, SIGKILL)
        server.process.waitUntilExit()
        close(socket)
        server = try ServeProcess(data: data, environment: [:], bootstrap: false)
        // (Asked until answered: a busy machine may miss one exchange's timeout.)
        var after: Int?
        Eventually.wait(every: .milliseconds(50)) {
            after = try? Self.head(server, path, token: token)
            return after != nil
        }
        #expect(after == offset, "after the restart \(after.map(String.init) ?? "none"), before it \(offset)")

        // tuspy picks the upload up by its URL and finishes it.
        let (_, last) = try Self.tuspy(server, token: token, file: file, ["--url", server.url + path])
        #expect(last == original.count)

        // Staged; release it and read it back as a device would.
        let release = try RawHTTP.send(port: UInt16(server.port)!, "POST /v1/apps/com.example.dev/releases HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nConnection: close\r\n\r\n").first
        #expect(release?.status == 201, "\(release?.bodyText ?? "")")
        let exported = try Processes.run(Processes.depotBinary, ["keys", "export", "--data", data, "--app", "com.example.dev"])
        let configuration = try ClientConfiguration.decode(Array(exported.stdout.utf8))
        let manifestResponse = try RawHTTP.send(port: UInt16(server.port)!, "GET /v1/apps/com.example.dev/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        let manifest = try Envelope.decode(manifestResponse?.body ?? []).verifiedManifest(trusting: configuration.trustedKeys())
        let entry = try #require(manifest[pack: "world"])
        #expect(entry.policy == .essential && entry.installSize == Int64(original.count))
        let blob = try FileSystem.readFile(data + "/blobs/\(entry.sha256.prefix(2))/\(entry.sha256)")
        #expect(Int64(blob.count) == entry.size)
        #expect(try PackDecryptor.decrypt(blob, keyRing: configuration.keyRing()) == original)
    }
}
