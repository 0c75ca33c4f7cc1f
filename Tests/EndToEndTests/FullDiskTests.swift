import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

@Suite("End to end: the origin's disk fills up", .serialized)
struct FullDiskTests {
    @Test("A 40 MiB upload to a 24 MiB data folder: 507 arrives (PUT and tus), nothing is kept, reads go on, space comes back, depot publish does not retry")
    func fullDataFolder() async throws {
        let work = TemporaryDirectory("depot-full-disk")
        defer { work.remove() }
        let volume = try SmallVolume(in: work, size: "24m")
        defer { volume.unmount() }
        let data = volume.path
        let app = "com.example.full"
        let token = try prepareDataFolder(data, app: app)
        let log = CapturedLog()
        var server: DepotServer? = try startServer(dataPath: data, logger: log.logger())
        defer { server?.stop() }
        let port = server!.port
        let big = [UInt8](repeating: 7, count: 40 << 20)
        func used() -> Int { FileSystem.contents(of: data + "/uploads").count }

        // One-shot PUT: the refusal arrives, as 507, and no partial file stays.
        let put = "PUT /v1/apps/\(app)/packs/big?release=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nContent-Length: \(big.count)\r\nConnection: close\r\n\r\n"
        let refused = try #require(try RawHTTP.send(port: port, put, body: big, timeout: 60).first)
        #expect(refused.status == 507 && refused.bodyText.contains("insufficient_storage"), "\(refused.status) \(refused.bodyText)")
        #expect(used() == 0, "nothing of the refused upload stays in uploads/")
        #expect(try RawHTTP.send(port: port, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first?.status == 200)

        // tus: the PATCH is refused with 507 and its bytes go at once; the upload stays resumable.
        let create = "POST /v1/apps/\(app)/uploads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nTus-Resumable: 1.0.0\r\n"
            + "Upload-Length: \(big.count)\r\nUpload-Metadata: pack dHVz\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        let location = try #require(try RawHTTP.send(port: port, create).first?.header("Location"))
        let patch = "PATCH \(location) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\n"
            + "Content-Type: application/offset+octet-stream\r\nContent-Length: \(big.count)\r\nConnection: close\r\n\r\n"
        let patched = try #require(try RawHTTP.send(port: port, patch, body: big, timeout: 60).first)
        #expect(patched.status == 507 && patched.header("Tus-Resumable") == "1.0.0", "\(patched.status) \(patched.bodyText)")
        let head = "HEAD \(location) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nTus-Resumable: 1.0.0\r\nConnection: close\r\n\r\n"
        let offset = try #require(try RawHTTP.send(port: port, head).first?.header("Upload-Offset")).flatMap { Int($0) }
        let id = String(location.split(separator: "/").last!)
        let container = FileSystem.fileSize(data + "/uploads/\(id).tus/container") ?? -1
        #expect(container < 1 << 20, "the refused PATCH's bytes are gone: \(container) bytes left (offset \(offset ?? -1))")
        let terminate = "DELETE \(location) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nTus-Resumable: 1.0.0\r\nConnection: close\r\n\r\n"
        #expect(try RawHTTP.send(port: port, terminate).first?.status == 204)

        // Space is back: a 4 MiB pack is published.
        let small = "PUT /v1/apps/\(app)/packs/small?release=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nContent-Length: \(4 << 20)\r\nConnection: close\r\n\r\n"
        #expect(try RawHTTP.send(port: port, small, body: [UInt8](repeating: 1, count: 4 << 20), timeout: 60).first?.status == 201)

        // depot publish reports the refusal at once instead of retrying: the origin's access log
        // shows one more refused PATCH (its line is written once the answer is sent).
        let file = try work.file("big.bin", size: 40 << 20)
        let refusedPatches = { log.all.filter { $0.hasPrefix("access") && $0.contains("method=PATCH") && $0.contains("status=507") }.count }
        let before = refusedPatches()
        let published = try Processes.run(Processes.depotBinary, [
            "publish", file, "--server", "http://127.0.0.1:\(port)", "--app", app, "--pack", "big", "--token", token, "--quiet",
        ], environment: ["XDG_CACHE_HOME": work.path + "/cache"])
        #expect(published.status != 0 && published.stderr.contains("507") && published.stderr.contains("insufficient_storage"), "\(published.stderr)")
        Eventually.wait { refusedPatches() > before }
        #expect(refusedPatches() == before + 1, "no retries: \(log.all.filter { $0.contains("method=PATCH") })")
        server?.stop()
        server = nil
    }
}
