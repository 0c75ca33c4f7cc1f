import DepotCore
import DepotTestSupport
import Foundation
import Synchronization
import Testing

@Suite("End to end: crashes", .blocking)
struct CrashTests {
    /// What must hold on disk after any crash: every release verifies; the releases devices can
    /// get (production's and each channel's) reference only complete blobs, and any other
    /// release's blobs are complete or swept (`swept`: garbage collection with no retention),
    /// never partial; the draft references stored blobs; no temporary file or upload survives a
    /// restart. Blobs are immutable: one hash check each is enough (`verified` carries them across rounds).
    /// `restartedAt`: when the origin now running on `data` was started (before it, start-up
    /// removed every temporary file): a temporary file made since is one of its own writes in
    /// progress (its maintenance passes write caches such as `retained`), not a crash's leftover.
    static func checkInvariants(
        data: String, app: String, keys: [Ed25519PublicKey], verified: inout Set<String>, swept: Bool = false, restartedAt: Date? = nil
    ) throws -> Int {
        let releases = data + "/apps/\(app)/releases"
        func number(_ path: String) -> Int? {
            (try? FileSystem.readFile(path)).flatMap { Int(String(decoding: $0, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) }
        }
        var served: Set<Int> = []
        var servedBy: [Int: [String]] = [:]
        if let live = number(data + "/apps/\(app)/current") {
            #expect(FileSystem.exists(releases + "/" + String(format: "%06d.json", live)), "current names release \(live), which is missing")
            served.insert(live)
            servedBy[live, default: []].append("production")
        }
        for channel in FileSystem.contents(of: data + "/apps/\(app)/channels") where !channel.hasPrefix(".") {
            guard let head = number(data + "/apps/\(app)/channels/" + channel) else { continue }
            #expect(FileSystem.exists(releases + "/" + String(format: "%06d.json", head)), "channel \(channel) names release \(head), which is missing")
            served.insert(head)
            servedBy[head, default: []].append(channel)
        }
        var newest = 0
        for name in FileSystem.contents(of: releases) {
            #expect(name.hasSuffix(".json") && !name.hasPrefix("."), "stray file \(name)")
            let manifest = try Envelope.decode(FileSystem.readFile(releases + "/" + name)).verifiedManifest(trusting: keys)
            newest = max(newest, manifest.version)
            for pack in manifest.packs {
                let blob = data + "/blobs/\(pack.sha256.prefix(2))/\(pack.sha256)"
                // The restarted server's collector runs meanwhile and may sweep a release no
                // channel serves at any moment: its blob is looked at once (gone, or whole).
                let size = FileSystem.fileSize(blob)
                if swept && !served.contains(manifest.version) && size == nil { continue }
                #expect(size == pack.size, "release \(manifest.version) pack \(pack.id) revision \(pack.revision): blob missing or partial (served by \(servedBy[manifest.version] ?? ["no channel"]), head \(number(data + "/apps/\(app)/head") ?? -1), published \(manifest.publishedAt))")
                if !verified.contains(pack.sha256), size != nil, let bytes = try? Data(contentsOf: URL(fileURLWithPath: blob)) {
                    #expect(Hex.encode(SHA256Hasher.hash(bytes)) == pack.sha256)
                    verified.insert(pack.sha256)
                }
            }
        }
        // The draft: a file per staged pack.
        struct Change: Decodable { var upsert: PackEntry? }
        let staged = FileSystem.contents(of: data + "/apps/\(app)/staging").filter { $0.hasSuffix(".json") && !$0.hasPrefix(".") }
        let entries = try staged.compactMap { name in
            try JSONDecoder().decode(Change.self, from: Data(FileSystem.readFile(data + "/apps/\(app)/staging/" + name))).upsert.map { (name, $0) }
        }
        for (id, entry) in entries {
            #expect(FileSystem.fileSize(data + "/blobs/\(entry.sha256.prefix(2))/\(entry.sha256)") == entry.size,
                    "the draft's \(id) references a missing or partial blob")
        }
        // Only resumable uploads survive a restart, each cut back to what its state records.
        struct UploadState: Decodable { var offset: Int64; var length: Int64; var containerLength: Int64; var result: String? }
        for name in FileSystem.contents(of: data + "/uploads") {
            #expect(name.hasSuffix(".tus"), "stray upload file \(name)")
            let folder = data + "/uploads/" + name
            let state = try JSONDecoder().decode(UploadState.self, from: Data(FileSystem.readFile(folder + "/state.json")))
            #expect(state.offset <= state.length)
            if state.result == nil {
                #expect(Set(FileSystem.contents(of: folder)) == ["state.json", "container"])
                #expect(FileSystem.fileSize(folder + "/container") == state.containerLength, "\(name): container not cut back")
            } else {
                #expect(FileSystem.contents(of: folder) == ["state.json"])
            }
        }
        for folder in [data, data + "/apps/\(app)", data + "/apps/\(app)/staging", releases, data + "/keys"] + FileSystem.contents(of: data + "/blobs").map({ data + "/blobs/" + $0 }) {
            let leftovers = FileSystem.contents(of: folder).filter { name in
                guard name.hasPrefix(".tmp-") else { return false }
                guard let restartedAt else { return true }
                var info = stat()
                // Gone meanwhile (a write that finished): not left.
                guard stat(folder + "/" + name, &info) == 0 else { return false }
                return Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9 < restartedAt.timeIntervalSince1970
            }
            #expect(leftovers.isEmpty, "temporary file left in \(folder): \(leftovers)")
        }
        return newest
    }

    /// Rounds of the SIGKILL test: 20 in the default suite, `DEPOT_CRASH_ROUNDS` (100 in `Deploy/reliability.sh`).
    static let rounds = Int(ProcessInfo.processInfo.environment["DEPOT_CRASH_ROUNDS"] ?? "") ?? 20

    @Test("SIGKILL at random points of uploads, releases, promotions and garbage collection: every release verifies, what devices get is whole, nothing partial, no leftovers")
    func killRepeatedly() async throws {
        let work = TemporaryDirectory("depot-crash")
        defer { work.remove() }
        let data = work.path + "/data"
        let app = "com.example.dev"
        // Garbage collection every second with no retention: superseded blobs go while publishing goes on.
        let sweeping = ["DEPOT_REFRESH_INTERVAL": "1", "DEPOT_RETENTION_DAYS": "0", "DEPOT_GRACE_SECONDS": "2"]
        var server = try ServeProcess(data: data, environment: sweeping)
        let token = server.token
        let keys = try AppStoreKeys.trusted(data: data, app: app)
        var generator = SystemRandomNumberGenerator()
        var releasesSeen = 0
        var verified: Set<String> = []
        // Every upload the origin acknowledged as released: (release, pack, container SHA-256).
        let acknowledged = Mutex<[(release: Int, pack: String, sha256: String)]>([])
        struct Acknowledgement: Decodable { var release: Int?; var pack: Entry?; struct Entry: Decodable { var id: String; var sha256: String } }

        for round in 0..<Self.rounds {
            let port = UInt16(server.port)!
            let stop = Atomic<Bool>(false)
            let done = DispatchGroup()
            // A third client keeps making resumable uploads, in a few PATCHes each.
            done.enter()
            Thread.detachNewThread {
                defer { done.leave() }
                var n = 0
                while !stop.load(ordering: .relaxed) && n < 30 {
                    n += 1
                    let length = Int.random(in: 1...(3 << 20))
                    let create = "POST /v1/apps/\(app)/uploads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nTus-Resumable: 1.0.0\r\n"
                        + "Upload-Length: \(length)\r\nUpload-Metadata: pack dHVz,release dHJ1ZQ==\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    guard let created = try? RawHTTP.parse(RawHTTP.exchange(port: port, Array(create.utf8), timeout: 5)).first,
                          let location = created.header("Location") else { continue }
                    var offset = 0
                    while offset < length && !stop.load(ordering: .relaxed) {
                        let size = min(length - offset, Int.random(in: 1...(1 << 20)))
                        let patch = "PATCH \(location) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: \(offset)\r\n"
                            + "Content-Type: application/offset+octet-stream\r\nContent-Length: \(size)\r\nConnection: close\r\n\r\n"
                        guard let response = try? RawHTTP.parse(RawHTTP.exchange(port: port, Array(patch.utf8) + [UInt8](repeating: UInt8(n), count: size), timeout: 5)).first,
                              response.status == 204 else { break }
                        offset += size
                    }
                }
            }
            // A fourth keeps promoting recent releases to the beta channel.
            done.enter()
            Thread.detachNewThread {
                defer { done.leave() }
                var n = 0
                while !stop.load(ordering: .relaxed) && n < 40 {
                    n += 1
                    let list = "GET /v1/apps/\(app)/releases HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                    struct Listed: Decodable { var releases: [Item]; struct Item: Decodable { var version: Int } }
                    if let body = try? RawHTTP.parse(RawHTTP.exchange(port: port, Array(list.utf8), timeout: 5)).first?.body,
                       let listed = try? JSONDecoder().decode(Listed.self, from: Data(body)), let target = listed.releases.map(\.version).max() {
                        let promote = "POST /v1/apps/\(app)/channels/beta?release=\(max(1, target - n % 2)) HTTP/1.1\r\nHost: x\r\n"
                            + "Authorization: Bearer \(token)\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        _ = try? RawHTTP.exchange(port: port, Array(promote.utf8), timeout: 5)
                    }
                    usleep(20_000)
                }
            }
            // Two clients keep uploading (some staged, some released) and releasing.
            for client in 0..<2 {
                done.enter()
                Thread.detachNewThread {
                    defer { done.leave() }
                    var n = 0
                    while !stop.load(ordering: .relaxed) && n < 50 {
                        n += 1
                        let size = Int.random(in: 0...(3 << 20))
                        let query = n % 3 == 0 ? "" : "?release=true"
                        let head = "PUT /v1/apps/\(app)/packs/p\(client)-\(n % 4)\(query) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nContent-Length: \(size)\r\nConnection: close\r\n\r\n"
                        let answer = try? RawHTTP.parse(RawHTTP.exchange(port: port, Array(head.utf8) + [UInt8](repeating: UInt8(n & 0xff), count: size), timeout: 5)).first
                        if answer?.status == 201, let body = answer?.body, let ack = try? JSONDecoder().decode(Acknowledgement.self, from: Data(body)),
                           let release = ack.release, let pack = ack.pack {
                            acknowledged.withLock { $0.append((release, pack.id, pack.sha256)) }
                        }
                        if n % 5 == 0 {
                            let release = "POST /v1/apps/\(app)/releases HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nConnection: close\r\n\r\n"
                            _ = try? RawHTTP.exchange(port: port, Array(release.utf8), timeout: 5)
                        }
                    }
                }
            }
            try await Task.sleep(for: .milliseconds(Int.random(in: 50...600, using: &generator)))
            kill(server.process.processIdentifier, SIGKILL)
            server.process.waitUntilExit()
            stop.store(true, ordering: .relaxed)
            done.wait()
            #expect(server.process.terminationReason == .uncaughtSignal, "round \(round)")

            // Restart: start-up removes what the crash left; then the invariants must hold.
            let restartedAt = Date()
            server = try ServeProcess(data: data, environment: sweeping, bootstrap: false)
            releasesSeen = try Self.checkInvariants(data: data, app: app, keys: keys, verified: &verified, swept: true, restartedAt: restartedAt)
            // Nothing acknowledged is lost: each released upload is in the release it was told.
            for ack in acknowledged.withLock({ $0 }) {
                let file = data + "/apps/\(app)/releases/" + String(format: "%06d.json", ack.release)
                let manifest = try Envelope.decode(FileSystem.readFile(file)).verifiedManifest(trusting: keys)
                #expect(manifest[pack: ack.pack]?.sha256 == ack.sha256, "acknowledged upload \(ack.pack) missing from release \(ack.release)")
            }
        }
        #expect(releasesSeen > 0, "the rounds must have published something")
        let releasedByTus = try FileSystem.contents(of: data + "/apps/\(app)/releases").contains { name in
            try Envelope.decode(FileSystem.readFile(data + "/apps/\(app)/releases/" + name)).verifiedManifest(trusting: keys)[pack: "tus"] != nil
        }
        #expect(releasedByTus, "resumable uploads must have completed and been released in some rounds")
        #expect(FileSystem.exists(data + "/apps/\(app)/channels/beta"), "promotions must have happened")
        let sweptBlobs = try FileSystem.contents(of: data + "/apps/\(app)/releases").flatMap { name in
            try Envelope.decode(FileSystem.readFile(data + "/apps/\(app)/releases/" + name)).verifiedManifest(trusting: keys).packs
        }.filter { !FileSystem.exists(data + "/blobs/\($0.sha256.prefix(2))/\($0.sha256)") }
        #expect(!sweptBlobs.isEmpty, "garbage collection must have removed superseded blobs")
        #expect(!acknowledged.withLock({ $0 }).isEmpty, "uploads must have been acknowledged")
        print("CrashTests: \(Self.rounds) rounds, \(releasesSeen) releases, \(acknowledged.withLock { $0.count }) acknowledged uploads all found, \(Set(sweptBlobs.map(\.sha256)).count) superseded blobs swept")
        // The server still works after all that.
        let response = try RawHTTP.send(port: UInt16(server.port)!, "GET /v1/apps/\(app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        #expect(response?.status == 200)
    }
}

/// The trusted manifest keys of a data folder's app.
enum AppStoreKeys {
    static func trusted(data: String, app: String) throws -> [Ed25519PublicKey] {
        let exported = try Processes.run(Processes.depotBinary, ["keys", "export", "--data", data, "--app", app])
        return try ClientConfiguration.decode(Array(exported.stdout.utf8)).trustedKeys()
    }
}
