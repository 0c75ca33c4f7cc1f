import DepotClient
import DepotCore
import DepotHTTP
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// A real nginx using Deploy/nginx/snippets/assetdepot-locations.conf, verbatim, in front of an origin:
/// plain http, or TLS with a certificate the test made.
final class NginxEdge {
    let address: String
    let port: UInt16
    let folder: TemporaryDirectory
    private let process = Process()

    /// A certificate and its key, PEM files.
    struct Certificate {
        var certificate: String
        var key: String
    }

    static var locationsFile: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Deploy/nginx/snippets/assetdepot-locations.conf").path
    }

    /// The shipped site's `keepalive_timeout` line of `upstream assetdepot_origin` (its idle
    /// connections closed before the origin's --timeout closes them), used verbatim by this edge.
    static var upstreamKeepaliveTimeout: String {
        let site = URL(fileURLWithPath: locationsFile).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("sites-available/assetdepot").path
        let text = (try? String(contentsOfFile: site, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.first { $0.hasPrefix("keepalive_timeout ") } ?? ""
    }

    /// A port free on every address given (edges behind one name listen on one port).
    static func freePort(on addresses: [String] = ["127.0.0.1"]) throws -> UInt16 {
        for _ in 0..<50 {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr(addresses[0])
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
            _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
            close(fd)
            let port = UInt16(bigEndian: address.sin_port)
            if addresses.dropFirst().allSatisfy({ canBind($0, port) }) { return port }
        }
        throw POSIXError(.EADDRINUSE)
    }

    static func canBind(_ host: String, _ port: UInt16) -> Bool { withSocket(host, port) { bind($0, $1, $2) } == 0 }
    static func canConnect(_ host: String, _ port: UInt16) -> Bool { withSocket(host, port) { Glibc.connect($0, $1, $2) } == 0 }

    /// Runs `call` on a new TCP socket and the address `host`:`port`, then closes the socket.
    private static func withSocket(_ host: String, _ port: UInt16, _ call: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr(host)
        return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    }

    /// Starts nginx on `address`:`port` in front of the origin at 127.0.0.1:`originPort`; with
    /// `tls`, over https (HTTP/2 and HTTP/1.1); `proxyBind` is the address it fetches from (so
    /// the origin's access log tells edges apart). Its access log records each request's `Range`.
    /// `http` and `server` are extra directives for those blocks (a misconfigured edge), the
    /// server's before the shipped locations, so that exact-match locations override them.
    init(address: String = "127.0.0.1", port: UInt16, originPort: UInt16, tls: Certificate? = nil, proxyBind: String? = nil, workerConnections: Int = 256,
         http: String = "", server: String = "") throws {
        self.address = address
        self.port = port
        folder = TemporaryDirectory("depot-nginx")
        let listen = tls == nil ? "listen \(address):\(port);" : """
            listen \(address):\(port) ssl http2;
                ssl_certificate \(tls!.certificate);
                ssl_certificate_key \(tls!.key);
            """
        let config = """
            daemon off;
            worker_processes 1;
            user root;
            pid \(folder.path)/nginx.pid;
            error_log \(folder.path)/error.log;
            events { worker_connections \(workerConnections); }
            http {
              log_format edge '$request $status range=$http_range cache=$upstream_cache_status';
              access_log \(folder.path)/access.log edge;
              client_body_temp_path \(folder.path)/body;
              proxy_temp_path \(folder.path)/proxy;
              fastcgi_temp_path \(folder.path)/fastcgi;
              uwsgi_temp_path \(folder.path)/uwsgi;
              scgi_temp_path \(folder.path)/scgi;
              upstream assetdepot_origin { server 127.0.0.1:\(originPort); keepalive 8; \(Self.upstreamKeepaliveTimeout) }
              proxy_cache_path \(folder.path)/cache keys_zone=assetdepot:8m use_temp_path=off;
              limit_conn_zone $binary_remote_addr zone=assetdepot_per_ip:1m;
              \(proxyBind.map { "proxy_bind \($0);" } ?? "")
              \(http)
              server {
                \(listen)
                \(server)
                include \(Self.locationsFile);
              }
            }
            """
        try FileSystem.writeAtomically(Array(config.utf8), to: folder.path + "/nginx.conf")
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/nginx")
        process.arguments = ["-c", folder.path + "/nginx.conf", "-p", folder.path]
        try process.run()
        Eventually.wait { Self.canConnect(address, port) || !process.isRunning }
    }

    /// The edge's access log, a line per request.
    var accessLog: [String] { ((try? FileSystem.readFile(folder.path + "/access.log")) ?? []).split(separator: 10).map { String(decoding: $0, as: UTF8.self) } }

    deinit {
        // nginx inherits the test thread's blocked signal mask; its master process sets its own,
        // but fall back to SIGKILL so that a stuck edge can never hang the suite.
        process.terminate()
        for _ in 0..<200 where process.isRunning { usleep(10_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        folder.remove()
    }
}

@Suite("End to end: behind a real nginx edge")
struct NginxEdgeTests {
    @Test("Deploy/nginx in Debian's stock layout: the site enabled from sites-available beside the stock default site, the snippet in snippets/, and `nginx -t` passes with Debian's own nginx.conf")
    func stockLayout() throws {
        #expect(FileManager.default.isExecutableFile(atPath: "/usr/sbin/nginx"), "nginx is not installed: run Deploy/setup.sh deps")
        let stock = "/etc/nginx/nginx.conf"
        let stockText = try String(contentsOfFile: stock, encoding: .utf8)
        // What the layout relies on: Debian's nginx.conf includes conf.d/*.conf and
        // sites-enabled/* inside its http block.
        #expect(stockText.contains("include /etc/nginx/sites-enabled/*;") && stockText.contains("include /etc/nginx/conf.d/*.conf;"),
                "\(stock) is not Debian's stock nginx.conf")
        let work = TemporaryDirectory("depot-nginx-stock")
        defer { work.remove() }
        let etc = work.path + "/nginx"
        // A copy of /etc/nginx as the nginx-common package ships it, with its own folder's name
        // put in for /etc/nginx; nothing else in nginx.conf changes.
        for folder in ["conf.d", "sites-available", "sites-enabled", "snippets", "modules-enabled"] { try FileSystem.createDirectory(etc + "/" + folder) }
        try FileSystem.writeAtomically(Array(stockText.replacingOccurrences(of: "/etc/nginx/", with: etc + "/").utf8), to: etc + "/nginx.conf")
        try FileManager.default.copyItem(atPath: "/etc/nginx/mime.types", toPath: etc + "/mime.types")
        for module in FileSystem.contents(of: "/etc/nginx/modules-enabled") {
            try FileManager.default.copyItem(atPath: "/etc/nginx/modules-enabled/" + module, toPath: etc + "/modules-enabled/" + module)
        }
        if FileSystem.exists("/etc/nginx/sites-available/default") {
            try FileManager.default.copyItem(atPath: "/etc/nginx/sites-available/default", toPath: etc + "/sites-available/default")
            try FileManager.default.createSymbolicLink(atPath: etc + "/sites-enabled/default", withDestinationPath: "../sites-available/default")
        }
        // The shipped files: the snippet verbatim; the site with the certificate the operator
        // would name (made here) and its cache folder under the test's (nginx -t makes it).
        let deploy = ReadmeTests.root + "/Deploy/nginx"
        try FileManager.default.copyItem(atPath: deploy + "/snippets/assetdepot-locations.conf", toPath: etc + "/snippets/assetdepot-locations.conf")
        let site = try String(contentsOfFile: deploy + "/sites-available/assetdepot", encoding: .utf8)
        let cache = try #require(site.split(separator: "\n").first { $0.hasPrefix("proxy_cache_path ") }?.split(separator: " ").dropFirst().first.map(String.init))
        // nginx makes the cache folder but not its parent.
        #expect(FileSystem.exists(FileSystem.directory(of: cache)), "\(cache): its parent folder does not exist on this Debian")
        let pki = try TestPKI(folder: work.path, host: "assets.example.com")
        for shipped in ["/etc/ssl/assetdepot/fullchain.pem", "/etc/ssl/assetdepot/privkey.pem", cache + " "] { #expect(site.contains(shipped), "\(shipped)") }
        let installed = site.replacingOccurrences(of: "/etc/ssl/assetdepot/fullchain.pem", with: pki.certificate)
            .replacingOccurrences(of: "/etc/ssl/assetdepot/privkey.pem", with: pki.key)
            .replacingOccurrences(of: cache + " ", with: work.path + "/cache ")
        try FileSystem.writeAtomically(Array(installed.utf8), to: etc + "/sites-available/assetdepot")
        try FileManager.default.createSymbolicLink(atPath: etc + "/sites-enabled/assetdepot", withDestinationPath: "../sites-available/assetdepot")
        // The site includes snippets/… relative to nginx.conf's folder, as in /etc/nginx.
        #expect(site.contains("include snippets/assetdepot-locations.conf;"))
        // Idle upstream connections end at the edge before the origin's --timeout (30 s) ends them.
        let idle = NginxEdge.upstreamKeepaliveTimeout.split(separator: " ").dropFirst().first.flatMap { Int($0.dropLast(2)) }
        #expect(idle.map { $0 < 30 } == true, "the upstream's keepalive_timeout must be below the origin's 30 s: \(NginxEdge.upstreamKeepaliveTimeout)")

        let checked = try Processes.run("/usr/sbin/nginx", ["-t", "-c", etc + "/nginx.conf"])
        #expect(checked.status == 0 && checked.stderr.contains("test is successful"), "\(checked.stderr)")
        #expect(!checked.stderr.contains("[warn]") && !checked.stderr.contains("[emerg]"), "\(checked.stderr)")
    }

    @Test("Deploy/nginx config: publish and sync through the edge; blobs cached; ranges; operations endpoints hidden")
    func edge() async throws {
        #expect(FileManager.default.isExecutableFile(atPath: "/usr/sbin/nginx"), "nginx is not installed: run Deploy/setup.sh deps")
        let edgePort = try NginxEdge.freePort()
        try await withServer(configure: { $0.publicURL = "http://127.0.0.1:\(edgePort)" }) { origin in
            let edge = try NginxEdge(port: edgePort, originPort: origin.port)
            let work = TemporaryDirectory("depot-edge")
            defer { work.remove() }
            let file = try work.file("pack", size: (2 << 20) + 17)

            // Publishing streams through the edge.
            let url = URL(string: "http://127.0.0.1:\(edge.port)/v1/apps/\(origin.app)/packs/level?release=true")!
            let published = try await HTTPTransport().upload(file: file, to: url, headers: ["Authorization": "Bearer \(origin.token)"])
            #expect(published.status == 201)

            // The client syncs through the edge: the manifest's URLs are on the edge.
            let sync = DepotSync(server: URL(string: "http://127.0.0.1:\(edge.port)")!, configuration: try origin.clientConfiguration(),
                                 destination: work.path + "/dest")
            let report = try await sync.run()
            #expect(report.installed == ["level"])
            #expect(try FileSystem.readFile(work.path + "/dest/packs/level") == FileSystem.readFile(file))

            func get(_ path: String, _ headers: [String] = []) throws -> RawHTTP.Response {
                let head = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + headers.map { $0 + "\r\n" }.joined() + "\r\n"
                return try #require(try RawHTTP.send(port: edge.port, head).first)
            }
            let envelope = try get("/v1/apps/\(origin.app)/manifest").body
            let manifest = try Envelope.decode(envelope).verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())
            let entry = try #require(manifest[pack: "level"])
            let blobPath = "/v1/apps/\(origin.app)/blobs/\(entry.sha256)"
            let first = try get(blobPath)
            let second = try get(blobPath)
            #expect(first.status == 200 && second.status == 200)
            #expect(second.header("X-Cache-Status") == "HIT")
            #expect(Int64(second.body.count) == entry.size)
            #expect(Hex.encode(SHA256Hasher.hash(second.body)) == entry.sha256)
            #expect(second.header("Cache-Control") == "public, max-age=31536000, immutable")

            let range = try get(blobPath, ["Range: bytes=100-199"])
            #expect(range.status == 206)
            #expect(range.header("Content-Range") == "bytes 100-199/\(entry.size)")
            #expect(range.body == Array(second.body[100...199]))

            let again = try get("/v1/apps/\(origin.app)/manifest")
            #expect(again.status == 200 && again.header("ETag") != nil && again.body == envelope)
            #expect(try get("/metrics").status == 404)
            #expect(try get("/healthz").status == 404)

            // A resumable (tus) upload through the edge, released on the beta channel only. The
            // client hashes the file while sending it; its digest reaches the origin whether or
            // not the edge passes the trailer on (if not, the rest goes again with a header).
            var options = ResumableUploader.Options(pack: "extra")
            options.release = true
            options.channel = "beta"
            let extra = try work.file("extra", size: 3_000_001, seed: 5)
            let uploaded = try await ResumableUploader(server: URL(string: "http://127.0.0.1:\(edge.port)")!, app: origin.app, token: origin.token)
                .upload(file: extra, options: options, resume: nil)
            #expect(String(decoding: uploaded, as: UTF8.self).contains("\"complete\" : true"))
            let beta = try Envelope.decode(get("/v1/apps/\(origin.app)/channels/beta/manifest").body)
                .verifiedManifest(trusting: origin.clientConfiguration().trustedKeys())
            #expect(beta.packs.map(\.id) == ["extra", "level"])
            #expect(beta[pack: "extra"]?.plaintextSHA256 == (try SHA256Hasher.hexDigest(ofFile: extra)))
            #expect(try get("/v1/apps/\(origin.app)/manifest").body == envelope, "production is unchanged")
            let productionPlist = try get("/v1/apps/\(origin.app)/info-plist").bodyText
            let betaPlist = try get("/v1/apps/\(origin.app)/info-plist?channel=beta").bodyText
            #expect(betaPlist.contains("/channels/beta/manifest") && !productionPlist.contains("/channels/beta/"), "the edge keys its cache by query too")
        }
    }

    @Test("Deploy/nginx config with --trusted-proxy: the origin sees each client's own address, never the edge's nor one the client made up")
    func forwardedFor() async throws {
        #expect(FileManager.default.isExecutableFile(atPath: "/usr/sbin/nginx"), "nginx is not installed: run Deploy/setup.sh deps")
        let edgePort = try NginxEdge.freePort()
        let log = CapturedLog()
        // The edge fetches from 127.0.0.5, the only address the origin trusts to forward.
        try await withServer(configure: {
            $0.logger = log.logger()
            $0.http.trustedProxies = TrustedProxies([IPNetwork("127.0.0.5")!])
        }) { origin in
            let edge = try NginxEdge(port: edgePort, originPort: origin.port, proxyBind: "127.0.0.5")
            for (path, forged) in [("/v1/apps/\(origin.app)/manifest", nil), ("/v1/apps/\(origin.app)/oidc-token", "203.0.113.66"), ("/", "203.0.113.67, 10.0.0.1")] {
                let head = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + (forged.map { "X-Forwarded-For: \($0)\r\n" } ?? "") + "\r\n"
                _ = try RawHTTP.send(port: edge.port, head)
            }
            var lines: [String] = []
            Eventually.wait { lines = log.all.filter { $0.hasPrefix("access ") }; return lines.count >= 3 }
            #expect(lines.count == 3 && lines.allSatisfy { $0.contains(" client=127.0.0.1 ") }, "\(lines)")
        }
    }
}
