import DepotCore
import DepotTestSupport
import Foundation
import Synchronization
import Testing

/// `depot sync --managed` against a download manifest crafted by whoever answers its URL (it is
/// not signed): nothing outside the destination, nothing unbounded in memory, no credentials to
/// another host, a missing hash said (M5).
@Suite("The managed simulator against a hostile download manifest")
struct ManagedDeviceHostileTests {
    static func manifest(_ packs: [(id: String, url: String, size: Int, sha: String?)]) -> String {
        let entries = packs.map { pack in
            let info = pack.sha.map { #","userInfo":{"sha256":"\#($0)"}"# } ?? #","userInfo":{}"#
            return #"{"id":"\#(pack.id)","url":"\#(pack.url)","version":1,"downloadSize":\#(pack.size),"downloadPolicy":{"essential":{"installationEventTypes":["firstInstallation"]}},"host":{"thirdParty":{}}\#(info)}"#
        }
        return #"{"assetPacks":["# + entries.joined(separator: ",") + "]}"
    }

    static func serving(_ manifest: @escaping @Sendable () -> String, packBody: [UInt8]) throws -> HostileServer {
        try HostileServer { connection in
            if connection.request.head.hasPrefix("GET /manifest") {
                let body = manifest()
                connection.send("HTTP/1.1 200 OK\r\nContent-Length: \(body.utf8.count)\r\n\r\n" + body)
            } else {
                connection.send("HTTP/1.1 200 OK\r\nContent-Length: \(packBody.count)\r\n\r\n")
                connection.send(packBody)
            }
        }
    }

    static func sync(_ server: HostileServer, dest: String) throws -> Processes.Result {
        try Processes.run(Processes.depotBinary, [
            "sync", "--managed", "--event", "install", "--dest", dest, "--allow-http", "--quiet", "--server", server.url.absoluteString,
            "--app", "com.example.m", "--manifest-url", server.url.absoluteString + "/manifest", "--credentials", "device:secret-password",
        ])
    }

    @Test("A pack id with a path in it is refused before anything touches a file")
    func traversal() throws {
        let work = TemporaryDirectory("depot-managed-hostile")
        defer { work.remove() }
        let body = [UInt8](repeating: 5, count: 100)
        let server = try Self.serving({ Self.manifest([(id: "../../escaped", url: "http://127.0.0.1:1/x", size: 100, sha: nil)]) }, packBody: body)
        defer { server.stop() }
        let run = try Self.sync(server, dest: work.path + "/a/b/dest")
        #expect(run.status != 0 && run.stderr.contains("not valid"), "\(run.stdout)\(run.stderr)")
        #expect(!FileSystem.exists(work.path + "/a/escaped.aar") && !FileSystem.exists(work.path + "/escaped.aar"))
    }

    @Test("A body longer than downloadSize fails as it arrives, leaves no file; credentials go only to the manifest's host; a missing hash is reported")
    func sizesHostsAndHashes() throws {
        let work = TemporaryDirectory("depot-managed-hostile")
        defer { work.remove() }
        let body = [UInt8](repeating: 5, count: 4 << 20)
        let elsewhere = try HostileServer { connection in
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
            connection.send([UInt8](repeating: 6, count: 100))
        }
        defer { elsewhere.stop() }
        let foreign = "http://localhost:\(elsewhere.port)/other"
        // The big pack's URL is on the manifest's own server (its port known once it listens).
        let port = Mutex<UInt16>(0)
        let fixed = try Self.serving({
            Self.manifest([(id: "big", url: "http://127.0.0.1:\(port.withLock { $0 })/big", size: 1000, sha: nil), (id: "other", url: foreign, size: 100, sha: nil)])
        }, packBody: body)
        defer { fixed.stop() }
        port.withLock { $0 = fixed.port }
        let run = try Self.sync(fixed, dest: work.path + "/dest")
        #expect(run.stdout.contains("warning: other has no SHA-256"), "\(run.stdout)\(run.stderr)")
        #expect(!FileSystem.exists(work.path + "/dest/packs/big.aar") && !FileSystem.exists(work.path + "/dest/packs/big.aar.part"))
        #expect(FileSystem.exists(work.path + "/dest/packs/other.aar"))
        let sentElsewhere = elsewhere.requests.map(\.head).joined()
        #expect(!sentElsewhere.lowercased().contains("authorization"), "credentials went to another host: \(sentElsewhere)")
        #expect(fixed.requests.contains { $0.head.lowercased().contains("authorization: basic") }, "the manifest's own host gets them")
    }
}
