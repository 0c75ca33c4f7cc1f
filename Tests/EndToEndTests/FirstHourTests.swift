import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// What a newcomer meets in the first hour: each message pinned to the wording that says what is
/// wrong and what to do.
@Suite("End to end: the first hour's messages")
struct FirstHourTests {
    @Test("The embedded default's banner, tokens, 403s, usage errors, a wrong --config, a rotated key, bytes counted, the favicon")
    func messages() throws {
        let work = TemporaryDirectory("depot-first-hour")
        defer { work.remove() }
        let depot = Processes.depotBinary
        let server = try ServeProcess(data: work.path + "/data", environment: [:])
        // depot is not on the test's PATH: the banner says where it is.
        #expect(server.banner.contains("export PATH=\"\(FileSystem.directory(of: depot)):$PATH\""), "\(server.banner)")
        #expect(server.banner.contains("export DEPOT_ADMIN_TOKEN=\(server.adminToken)"))
        let app = "com.example.dev"
        let base = ["--server", server.url, "--app", app]
        let file = try work.file("pack", size: 45_000)
        #expect(try Processes.run(depot, ["publish", file] + base + ["--pack", "a", "--release", "--token", server.token]).status == 0)

        // Rollback with a publisher token: the 403 names the command that makes an admin token.
        let refused = try Processes.run(depot, ["rollback"] + base + ["--to", "1", "--token", server.token])
        #expect(refused.status != 0 && refused.stderr.contains("403") && refused.stderr.contains("`depot tokens create --app \(app) --role admin`"), "\(refused.stderr)")
        let admin = try Processes.run(depot, ["rollback"] + base + ["--to", "1"], environment: ["DEPOT_ADMIN_TOKEN": server.adminToken])
        #expect(admin.status == 0, "the admin token comes from DEPOT_ADMIN_TOKEN: \(admin.stderr)")

        // A usage error is one line, with a pointer to the help.
        let usage = try Processes.run(depot, ["publish"])
        #expect(usage.status != 0 && usage.stderr == "Error: Missing expected argument '<file>' (see `depot help publish`)\n", "\(usage.stderr)")

        // A replica reads each app's settings (unsigned) from the bucket: not over http on a network (L12).
        let replica = try Processes.run(depot, ["serve", "--read-only", "--storage", "s3", "--s3-endpoint", "http://10.0.0.7:9000", "--s3-bucket", "b", "--data", work.path + "/replica"])
        #expect(replica.status != 0 && replica.stderr.contains("give an https:// --s3-endpoint"), "\(replica.stderr)")
        #expect(!FileSystem.exists(work.path + "/replica"), "refused before anything is made")

        // A manifest passed as --config says what it is.
        let manifest = work.path + "/manifest.json"
        try FileSystem.writeAtomically(try #require(RawHTTP.send(port: UInt16(server.port)!, "GET /v1/apps/\(app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first).body, to: manifest)
        let wrong = try Processes.run(depot, ["sync"] + base + ["--config", manifest, "--dest", work.path + "/dest"])
        #expect(wrong.stderr == "Error: \(manifest) is not a client configuration: expected the JSON that `depot keys export` prints (app, manifestPublicKeys, packKeys); found a signed manifest envelope (payloadType, payload, signatures)\n", "\(wrong.stderr)")

        // A pack under a key the build lacks (its key retired, a fresh one current), synced with
        // the configuration exported before: the key is missing (not a hash mismatch), and the
        // bytes transferred are counted.
        let config = work.path + "/client.json"
        let exported = try Processes.run(depot, ["keys", "export", "--data", work.path + "/data", "--app", app]).stdout
        try FileSystem.writeAtomically(Array(exported.utf8), to: config)
        let held = try #require(try ClientConfiguration.decode(Array(exported.utf8)).packKeys.keys.first)
        #expect(try Processes.run(depot, ["keys", "retire", "--data", work.path + "/data", "--app", app, held, "--yes"]).status == 0)
        #expect(try Processes.run(depot, ["publish", file] + base + ["--pack", "b", "--release", "--token", server.token]).status == 0)
        let synced = try Processes.run(depot, ["sync"] + base + ["--config", config, "--dest", work.path + "/dest", "--quiet"])
        #expect(synced.status != 0)
        #expect(synced.stderr.contains("pack b cannot be decrypted: it is encrypted under pack key") && synced.stderr.contains("(it holds \(held))")
                    && synced.stderr.contains("ship a build with the current configuration (`depot keys export`)"), "\(synced.stderr)")
        #expect(!synced.stderr.contains("SHA-256"))
        let summary = try #require(synced.stdout.split(separator: "\n").last)
        let counted = try #require(summary.split(separator: ",").last?.split(separator: " ").first.flatMap { Int($0) })
        // Pack a came whole; pack b's download stopped as soon as its header named the missing
        // key (the installer reads the download as it arrives), and what did come is counted.
        #expect(counted > 45_000 && counted < 2 * 45_000 + 4096, "bytes transferred, a refused download's included: \(summary)")

        // Browsers ask for /favicon.ico on every visit.
        let icon = try #require(RawHTTP.send(port: UInt16(server.port)!, "GET /favicon.ico HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
        #expect(icon.status == 200 && icon.header("Content-Type") == "image/x-icon" && icon.body.prefix(4) == [0, 0, 1, 0])

        // Several files to inspect: one heading each.
        let blobs = FileSystem.contents(of: work.path + "/data/blobs").flatMap { p in FileSystem.contents(of: work.path + "/data/blobs/" + p).map { work.path + "/data/blobs/\(p)/\($0)" } }
        let inspected = try Processes.run(depot, ["inspect"] + blobs)
        #expect(inspected.status == 0 && inspected.stdout.components(separatedBy: "== ").count == blobs.count + 1 && blobs.count >= 2)
    }
}
