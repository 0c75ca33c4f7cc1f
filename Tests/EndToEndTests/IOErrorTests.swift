import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// A disk that starts failing under the real `depot serve` process: writes and syncs of one
/// part of the data folder fail with EIO (an LD_PRELOAD shim, Fixtures/failio.c, armed by a
/// file), while the rest keeps working.
@Suite("Reliability: I/O errors from the disk", .serialized)
struct IOErrorTests {
    static let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/failio.c").path

    /// Builds the shim with the C compiler next to the Swift toolchain (or cc).
    static func shim(in folder: String) throws -> String {
        let swift = try Processes.run("/usr/bin/env", ["which", "swift"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let beside = URL(fileURLWithPath: swift).resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("clang").path
        let compiler = FileManager.default.isExecutableFile(atPath: beside) ? beside : "/usr/bin/cc"
        let library = folder + "/libfailio.so"
        let built = try Processes.run(compiler, ["-shared", "-fPIC", "-O1", "-o", library, source, "-ldl"])
        #expect(built.status == 0, "\(compiler): \(built.stderr)")
        return library
    }

    @Test("Uploads, resumable uploads and releases meet EIO: each gets a JSON 500 and leaves nothing behind; what was live stays live; all works again once the disk does")
    func failingDisk() async throws {
        let work = TemporaryDirectory("depot-eio")
        defer { work.remove() }
        let library = try Self.shim(in: work.path)
        let arm = work.path + "/armed"
        let data = work.path + "/data"
        let app = "com.example.dev"
        for match in ["/uploads/", "/apps/"] {
            try? FileManager.default.removeItem(atPath: data)
            let server = try ServeProcess(data: data, environment: ["LD_PRELOAD": library, "FAILIO_MATCH": match, "FAILIO_ARM": arm, "DEPOT_LOG_LEVEL": "warning"])
            defer { server.process.terminate(); server.process.waitUntilExit() }
            let port = UInt16(server.port)!
            func send(_ head: String, _ body: [UInt8] = []) throws -> RawHTTP.Response {
                try #require(try RawHTTP.send(port: port, head + "Host: x\r\nAuthorization: Bearer \(server.token)\r\nConnection: close\r\n"
                    + (body.isEmpty ? "Content-Length: 0\r\n" : "Content-Length: \(body.count)\r\n") + "\r\n", body: body, timeout: 30).first)
            }
            func put(_ pack: String, _ size: Int) throws -> RawHTTP.Response {
                try send("PUT /v1/apps/\(app)/packs/\(pack)?release=true HTTP/1.1\r\n", (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 3) })
            }
            #expect(try put("before", 2 << 20).status == 201)
            let live = try send("GET /v1/apps/\(app)/manifest HTTP/1.1\r\n").body
            let blobs = FileSystem.contents(of: data + "/blobs").flatMap { FileSystem.contents(of: data + "/blobs/" + $0) }.sorted()

            try FileSystem.writeAtomically([], to: arm)
            let refused = try put("during", 3 << 20)
            #expect(refused.status == 500 && refused.bodyText.hasPrefix("{\"error\":"), "\(match): \(refused.status) \(refused.bodyText)")
            let created = try send("POST /v1/apps/\(app)/uploads HTTP/1.1\r\nTus-Resumable: 1.0.0\r\nUpload-Length: 1000\r\nUpload-Metadata: pack dHVz\r\n")
            if match == "/uploads/" {
                #expect(created.status == 500, "creating an upload writes its state: \(created.status)")
            } else {
                let patch = try send("PATCH \(try #require(created.header("Location"))) HTTP/1.1\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\n"
                    + "Content-Type: application/offset+octet-stream\r\n", [UInt8](repeating: 9, count: 1000))
                #expect(patch.status == 500, "the completed upload's pack cannot be staged: \(patch.status) \(patch.bodyText)")
            }
            #expect(try send("POST /v1/apps/\(app)/releases HTTP/1.1\r\n").status != 201, "no release while the disk fails")
            // What devices get is unchanged, reads go on, and nothing half-written is left.
            #expect(try send("GET /v1/apps/\(app)/manifest HTTP/1.1\r\n").body == live)
            #expect(try send("GET /healthz HTTP/1.1\r\n").status == 200)
            let after = FileSystem.contents(of: data + "/blobs").flatMap { FileSystem.contents(of: data + "/blobs/" + $0) }.sorted()
            // A pack stored before its staging failed stays as a whole, unreferenced blob until the sweep.
            #expect(Set(blobs).isSubset(of: Set(after)), "\(match): blobs \(blobs) → \(after)")
            for blob in after {
                #expect(try SHA256Hasher.hexDigest(ofFile: data + "/blobs/\(blob.prefix(2))/\(blob)") == blob, "\(match): blob \(blob) is partial")
            }
            for folder in [data, data + "/apps/\(app)", data + "/apps/\(app)/releases", data + "/apps/\(app)/staging", data + "/uploads"] {
                #expect(!FileSystem.contents(of: folder).contains { $0.hasPrefix(".tmp-") }, "temporary file left in \(folder)")
            }
            #expect(server.process.isRunning)

            FileSystem.remove(arm)
            #expect(try put("after", 1 << 20).status == 201, "\(match): the disk works again")
            let manifest = try Manifest.decode(Array(try #require(Data(base64Encoded: Envelope.decode(send("GET /v1/apps/\(app)/manifest HTTP/1.1\r\n").body).payload))))
            #expect(Set(manifest.packs.map(\.id)).isSuperset(of: ["before", "after"]) && !manifest.packs.contains { $0.id == "during" })
        }
    }
}
