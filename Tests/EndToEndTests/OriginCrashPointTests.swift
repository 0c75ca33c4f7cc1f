import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// The origin's durable steps, the process doing them killed at every crash point (each file
/// created, mkdir, rename, unlink, fsync, ftruncate), and again with a power cut's losses: after
/// a restart, every acknowledged write is there (a 2xx publish's release, a `204` PATCH's
/// offset, a promotion, a created token, a revocation), every channel's manifest verifies and
/// every blob it names is served with its size and SHA-256, a device's sync installs exactly the
/// live release, no temporary file survives the start, and a sweep leaves no unreferenced blob.
@Suite("Crash points of the origin: killed at each, checked after a restart", .blocking)
struct OriginCrashPointTests {
    /// Each sequence: what the base state holds, then the step whose process is killed.
    enum Sequence: String, CaseIterable, Sendable {
        case putRelease, firstPublish, tus, tusRefused, release, promote, rollback, rollout, rolloutSteps, rotateKey, tokens, collect, patchRelease, reports,
             trustedPublishing, signedPromote, attest, attestedReports

        /// The sequences to run: `DEPOT_CRASH_SEQUENCES=a,b` names some (while working on them), all by default.
        static var selected: [Sequence] {
            let named = ProcessInfo.processInfo.environment["DEPOT_CRASH_SEQUENCES"]?.split(separator: ",").compactMap { Sequence(rawValue: String($0)) } ?? []
            return named.isEmpty ? allCases : named
        }
    }

    @Test("Killed at every crash point of each durable step, nothing acknowledged is lost and every channel serves a whole release", .enabled(if: CrashSeam.killsEnabled), arguments: Sequence.selected)
    func killed(sequence: Sequence) async throws {
        try await OriginCrashLab(sequence).run(modes: [.kill])
    }

    @Test("A power cut at every crash point (unsynced data and folder changes lost): the same", .enabled(if: HeavyTests.enabled), arguments: Sequence.selected)
    func powerCut(sequence: Sequence) async throws {
        try await OriginCrashLab(sequence).run(modes: CrashSeam.powerModes)
    }
}

/// One sequence's data folders and checks.
final class OriginCrashLab {
    let sequence: OriginCrashPointTests.Sequence
    let work = TemporaryDirectory("depot-origin-crash")
    let app = "com.example.dev"
    var data: String { work.path + "/data" }
    var base: String { work.path + "/base" }
    var token = ""
    var admin = ""
    /// Tokens the base state holds, for the token sequence.
    var spareToken = ""
    var spareID = ""
    /// Manifest keys the base state's configuration holds.
    var baseSigningKeys = 0
    /// Trusted publishing's issuer (that sequence only), and the CI job's token it signed.
    var issuer: OIDCIssuer?
    var jobToken = ""
    /// The root of trust and release key of the signed-promotion sequence (kept offline: here).
    var trust: TrustFixture?
    /// The beta release that sequence signs and promotes.
    var betaRelease = 0
    /// The attest sequence's device, and the crash points its origin's run has (the command's follow).
    var attestDevice: TestAppAttest?
    var attestServerPoints = 0
    /// The attested-reports sequence's key (attested in the base state), and how many assertions it made.
    var reportKey = ""
    var assertions = 0

    /// One port for every start: the manifests name blobs by the public URL, which must stay.
    let port: Int

    init(_ sequence: OriginCrashPointTests.Sequence) {
        self.sequence = sequence
        port = Self.freePort()
    }

    static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 ? getsockname(fd, $0, &length) : -1 }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    struct Response { var status: Int; var body: [UInt8]; var headers: [(String, String)] }

    func call(_ port: String, _ method: String, _ path: String, token: String? = nil, body: [UInt8] = [], headers: [String] = []) -> Response? {
        guard let port = UInt16(port), port != 0 else { return nil }
        var head = "\(method) \(path) HTTP/1.1\r\nHost: x\r\n" + (token.map { "Authorization: Bearer \($0)\r\n" } ?? "")
        for header in headers { head += header + "\r\n" }
        head += "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        guard let answer = try? RawHTTP.send(port: port, head, body: body, timeout: 30).first else { return nil }
        return Response(status: answer.status, body: answer.body, headers: answer.headers)
    }

    static func ok(_ response: Response?) -> Bool { response.map { (200..<300).contains($0.status) } ?? false }

    struct Published: Decodable { var release: Int?; var pack: Entry?; struct Entry: Decodable { var id: String; var sha256: String } }

    func put(_ port: String, _ pack: String, size: Int, seed: UInt64, release: Bool = true, query: String = "", into acks: inout [Ack]) {
        let body = CrashDevice.bytes(size, seed: seed)
        let answer = call(port, "PUT", "/v1/apps/\(app)/packs/\(pack)?policy=prefetch" + (release ? "&release=true" : "") + query, token: token, body: body)
        guard Self.ok(answer), let published = try? JSONDecoder().decode(Published.self, from: Data(answer!.body)), let entry = published.pack else { return }
        if release, let number = published.release { acks.append(.released(release: number, pack: pack, sha256: entry.sha256)) }
        if !release { acks.append(.staged(pack: pack, sha256: entry.sha256)) }
    }

    func start(_ environment: [String: String] = [:], bootstrap: Bool = false) throws -> ServeProcess {
        // No background sweep or re-signing during a sequence: its crash points stay in order.
        try ServeProcess(data: data, environment: ["DEPOT_REFRESH_INTERVAL": "100000", "DEPOT_THREADS": "2", "DEPOT_LISTEN": "127.0.0.1:\(port)"]
            .merging(sequence == .patchRelease ? ["DEPOT_PATCH_DEPTH": "1"] : [:]) { $1 }
            .merging([.attest, .attestedReports].contains(sequence) ? ["DEPOT_APP_ATTEST_TEST_ANCHOR": attestAnchor] : [:]) { $1 }.merging(environment) { $1 }, bootstrap: bootstrap)
    }

    /// Ends the origin: SIGKILL, or (`gracefully`) SIGTERM, whose exit is where a power cut one
    /// past the last crash point comes.
    func stop(_ server: ServeProcess, gracefully: Bool = false) {
        kill(server.process.processIdentifier, gracefully ? SIGTERM : SIGKILL)
        server.process.waitUntilExit()
    }

    /// The base state: a bootstrapped data folder with what the sequence starts from.
    func prepare() throws {
        // The origin of the attest sequences starts with the device's test anchor: made first.
        if [.attest, .attestedReports].contains(sequence) { try makeAttestDevice() }
        let server = try start(bootstrap: true)
        (token, admin) = (server.token, server.adminToken)
        var ignored: [Ack] = []
        if sequence != .firstPublish {
            put(server.port, "movie", size: 120_000, seed: 1, into: &ignored)
            put(server.port, "level", size: 40_000, seed: 2, into: &ignored)
        }
        switch sequence {
        case .release:
            put(server.port, "movie", size: 90_000, seed: 3, release: false, into: &ignored)
        case .promote, .rollback, .collect:
            put(server.port, "movie", size: 90_000, seed: 3, into: &ignored)
            put(server.port, "level", size: 30_000, seed: 4, into: &ignored)
        case .rollout, .rolloutSteps:
            // Release 3, on beta: the candidate of a rollout on production.
            put(server.port, "level", size: 30_000, seed: 4, query: "&channel=beta", into: &ignored)
            if sequence == .rolloutSteps {
                let started = call(server.port, "POST", "/v1/apps/\(app)/rollouts/production/start?release=3&fraction=0.2", token: token)
                #expect(Self.ok(started), "\(started.map { String(decoding: $0.body, as: UTF8.self) } ?? "")")
            }
        case .trustedPublishing:
            let issuer = try OIDCIssuer()
            self.issuer = issuer
            jobToken = try issuer.mint(["aud": "crash", "repository": "studio/levels", "exp": Int(Date().timeIntervalSince1970) + 3_600])
        case .rotateKey:
            // Root version 1 for the step to add (made offline; no channel protected, so that the
            // lab's device keeps syncing what is live).
            let root = try TrustFixture(app: app).root(dataPath: data, protect: [])
            try FileSystem.writeAtomically(root.encoded(), to: work.path + "/root-1.json")
        case .signedPromote:
            // Release 3 on beta; then a root protecting production, and production's live release
            // (2) signed, so that a device pinning the root takes it.
            let trust = TrustFixture(app: app)
            self.trust = trust
            try trust.addRoot(dataPath: data)
            let live = try TrustFixture.manifest(FileSystem.readFile(data + "/apps/\(app)/releases/000002.json")).packs
            let signed = call(server.port, "POST", "/v1/apps/\(app)/channels/production/statements", token: token, body: try trust.statement(release: 2, packs: live).encoded())
            #expect(Self.ok(signed), "\(signed.map { String(decoding: $0.body, as: UTF8.self) } ?? "")")
            // Then the candidate on beta (after the re-signs the root and the statement caused).
            put(server.port, "level", size: 30_000, seed: 4, query: "&channel=beta", into: &ignored)
            betaRelease = Int(String(decoding: try FileSystem.readFile(data + "/apps/\(app)/channels/beta"), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        case .attest, .attestedReports:
            try prepareAttest()
        case .tokens:
            let created = try Processes.run(Processes.depotBinary, ["tokens", "create", "--data", data, "--app", app])
            spareToken = String(created.stdout.split(separator: "\n").last ?? "")
            spareID = String(created.stdout.split(separator: " ").dropFirst().first ?? "")
        default: break
        }
        stop(server)
        baseSigningKeys = try AppStoreKeys.trusted(data: data, app: app).count
        try CrashSeam.copy(data, to: base)
    }

    /// The step; returns what it acknowledged. With `trace`, it counts its crash points (and
    /// waits for background work to end before the process is killed); with `crash`, the process
    /// doing the step dies at that crash point, numbered across the step's processes (a command
    /// after the one killed does not run, as a script stops with its machine).
    func step(trace: String? = nil, crash: (point: Int, mode: CrashSeam.Mode, backup: String)? = nil) async throws -> [Ack] {
        let waiting = trace != nil
        var environment: [String: String] = trace.map { ["DEPOT_CRASH_TRACE": $0] } ?? [:]
        if let crash { environment = CrashSeam.environment(at: crash.point, mode: crash.mode, backup: crash.backup) }
        var acks: [Ack] = []
        var remaining = crash?.point
        func cli(_ arguments: [String]) throws -> Processes.Result? {
            if let left = remaining, left <= 0 { return nil }
            let own = work.path + "/process-trace"
            FileSystem.remove(own)
            var environment = ["DEPOT_CRASH_TRACE": own]
            if let crash, let left = remaining { environment.merge(CrashSeam.environment(at: left, mode: crash.mode, backup: crash.backup)) { $1 } }
            let result = try Processes.run(Processes.depotBinary, arguments, environment: environment)
            let lines = CrashSeam.trace(own)
            if let trace {
                let previous = (try? FileSystem.readFile(trace)) ?? []
                try FileSystem.writeAtomically(previous + Array(lines.map { $0 + "\n" }.joined().utf8), to: trace)
            }
            if let left = remaining {
                remaining = left - lines.count
                if lines.count >= left { return nil }
                // Cut at its exit, one past its last crash point: it had finished, and said so.
                if lines.count + 1 == left {
                    var finished = result
                    finished.status = 0
                    return finished
                }
            }
            return result
        }
        switch sequence {
        case .attest:
            return try await stepAttest(trace: trace, crash: crash)
        case .attestedReports:
            return try await stepAttestedReports(trace: trace, crash: crash)
        case .rotateKey:
            if let rotated = try cli(["keys", "rotate", "--data", data, "--app", app]), rotated.status == 0,
               let id = rotated.stdout.components(separatedBy: "staged key ").dropFirst().first?.split(separator: " ").first {
                acks.append(.keyExported(String(id)))
            }
            if let signing = try cli(["keys", "rotate-signing", "--data", data]), signing.status == 0 {
                acks.append(.signingKeys(baseSigningKeys + 1))
            }
            // The staged key made current (the current one retired), then a root of trust added.
            if let listed = try cli(["keys", "list", "--data", data, "--app", app]), listed.status == 0,
               let current = listed.stdout.split(separator: "\n").first(where: { $0.split(separator: "\t").dropFirst().first == "current" })?.split(separator: "\t").first,
               let retired = try cli(["keys", "retire", "--data", data, "--app", app, String(current)]), retired.status == 0,
               let id = retired.stdout.components(separatedBy: "encrypted with key ").dropFirst().first?.split(separator: " ").first {
                acks.append(.packKeyCurrent(String(id)))
            }
            if let added = try cli(["root", "add", "--data", data, "--app", app, work.path + "/root-1.json"]), added.status == 0 {
                acks.append(.rootAdded(1))
            }
            return acks
        case .tokens:
            if let created = try cli(["tokens", "create", "--data", data, "--app", app]), created.status == 0, let new = created.stdout.split(separator: "\n").last {
                acks.append(.tokenWorks(String(new)))
            }
            if let revoked = try cli(["tokens", "revoke", "--data", data, spareID]), revoked.status == 0 { acks.append(.tokenRefused(spareToken)) }
            return acks
        case .collect:
            _ = try cli(["gc", "--data", data, "--retention-days", "0", "--grace-minutes", "0"])
            return acks
        default: break
        }
        if sequence == .trustedPublishing, let issuer {
            // The rule (`depot apps trust`), then the exchange at the origin, which records the token.
            guard let trusted = try cli([
                "apps", "trust", app, "--data", data, "--issuer", issuer.url, "--allow-http", "--audience", "crash", "--claim", "repository=studio/levels",
            ]), trusted.status == 0, let rule = trusted.stdout.split(separator: "\t").first?.split(separator: " ").last else { return acks }
            acks.append(.ruleListed(String(rule)))
        }
        // The origin's points are numbered after the commands' (trusted publishing's rule).
        if let crash, let left = remaining {
            guard left > 0 else { return acks }
            environment = CrashSeam.environment(at: left, mode: crash.mode, backup: crash.backup)
        }
        let server = try start(environment)
        defer { stop(server, gracefully: crash != nil) }
        let port = server.port
        switch sequence {
        case .trustedPublishing:
            // Asked again while the issuer's keys are being fetched (a thread of the origin's own).
            for _ in 0..<600 {
                guard let answer = call(port, "POST", "/v1/apps/\(app)/oidc-token", token: jobToken) else { break }
                if answer.status == 201, let issued = try? JSONDecoder().decode([String: JSONValue].self, from: Data(answer.body)),
                   case .string(let minted)? = issued["token"] {
                    acks.append(.tokenWorks(minted))
                    break
                }
                guard answer.status == 503 else { break }
                usleep(50_000)
            }
        case .putRelease, .firstPublish:
            put(port, "movie", size: 100_000, seed: 5, into: &acks)
        case .tus, .tusRefused:
            let length = 300_000
            let body = CrashDevice.bytes(length, seed: 6)
            let digest = Hex.encode(SHA256Hasher.hash(body))
            // `tusRefused`: the last PATCH names another SHA-256; nothing of the upload may go live, whatever the crash.
            let sent = sequence == .tus ? digest : String(repeating: "0", count: 64)
            if sequence == .tusRefused { acks.append(.notLive(pack: "movie", plaintextSHA256: digest)) }
            // Released when complete; the whole upload's SHA-256 sent with its last PATCH.
            let created = call(port, "POST", "/v1/apps/\(app)/uploads", token: token, headers: [
                "Tus-Resumable: 1.0.0", "Upload-Length: \(length)",
                "Upload-Metadata: pack \(Data("movie".utf8).base64EncodedString()),release \(Data("true".utf8).base64EncodedString())",
            ])
            guard Self.ok(created), let location = created?.headers.first(where: { $0.0.lowercased() == "location" })?.1 else { break }
            // (`tusRefused`: the refused last PATCH removes the upload, so its earlier offsets may go with it.)
            if sequence == .tus { acks.append(.offset(location: location, offset: 0, length: length, pack: "movie", plaintextSHA256: digest)) }
            var offset = 0
            for size in [100_000, 120_000, 80_000] {
                let patched = call(port, "PATCH", location, token: token, body: Array(body[offset..<(offset + size)]), headers: [
                    "Tus-Resumable: 1.0.0", "Upload-Offset: \(offset)", "Content-Type: application/offset+octet-stream",
                ] + (offset + size == length ? ["Depot-Content-SHA256: \(sent)"] : []))
                guard patched?.status == 204 else { break }
                offset += size
                if sequence == .tus { acks.append(.offset(location: location, offset: offset, length: length, pack: "movie", plaintextSHA256: digest)) }
            }
            if offset == length { acks.append(.live(pack: "movie", plaintextSHA256: digest)) }
            #expect(sequence == .tus || offset < length, "an upload with the wrong SHA-256 must be refused")
        case .release:
            if let answer = call(port, "POST", "/v1/apps/\(app)/releases", token: token), Self.ok(answer),
               let published = try? JSONDecoder().decode(Published.self, from: Data(answer.body)), let number = published.release {
                acks.append(.channel("production", releases: [number]))
            }
        case .signedPromote:
            // A release statement uploaded, then the promotion it allows.
            let packs = try TrustFixture.manifest(FileSystem.readFile(data + "/apps/\(app)/releases/" + String(format: "%06d.json", betaRelease))).packs
            let uploaded = call(port, "POST", "/v1/apps/\(app)/channels/production/statements", token: token, body: try trust!.statement(release: betaRelease, packs: packs).encoded())
            if crash == nil { #expect(Self.ok(uploaded), "\(uploaded.map { "\($0.status) " + String(decoding: $0.body, as: UTF8.self) } ?? "no answer")") }
            guard Self.ok(uploaded) else { break }
            let promoted = call(port, "POST", "/v1/apps/\(app)/channels/production?release=\(betaRelease)", token: token)
            if crash == nil { #expect(Self.ok(promoted), "\(promoted.map { "\($0.status) " + String(decoding: $0.body, as: UTF8.self) } ?? "no answer")") }
            if Self.ok(promoted) {
                acks.append(.channel("production", releases: [betaRelease]))
                acks.append(.signed(channel: "production", release: betaRelease))
            }
        case .promote:
            if Self.ok(call(port, "POST", "/v1/apps/\(app)/channels/beta?release=2", token: token)) { acks.append(.channel("beta", releases: [2, 3])) }
            if Self.ok(call(port, "POST", "/v1/apps/\(app)/channels/beta?release=3", token: token)) { acks.append(.channel("beta", releases: [3])) }
        case .rollback:
            if let answer = call(port, "POST", "/v1/apps/\(app)/rollback?to=2", token: admin), Self.ok(answer),
               let published = try? JSONDecoder().decode(Published.self, from: Data(answer.body)), let number = published.release {
                acks.append(.channel("production", releases: [number]))
            }
        case .rollout:
            if Self.ok(call(port, "POST", "/v1/apps/\(app)/rollouts/production/start?release=3&fraction=0.2", token: token)) {
                acks.append(.rollout(states: ["running"]))
            }
        case .rolloutSteps:
            let steps = [("advance?fraction=0.5", "running"), ("halt", "halted"), ("complete", "complete")]
            for (index, (path, _)) in steps.enumerated() {
                if Self.ok(call(port, "POST", "/v1/apps/\(app)/rollouts/production/\(path)", token: token)) {
                    acks.append(.rollout(states: steps[index...].map(\.1)))
                }
            }
        case .patchRelease:
            put(port, "movie", size: 120_000, seed: 1, into: &acks)
            var changed = CrashDevice.bytes(120_000, seed: 1)
            changed.replaceSubrange(50_000..<50_500, with: CrashDevice.bytes(900, seed: 10))
            let answer = call(port, "PUT", "/v1/apps/\(app)/packs/movie?policy=prefetch&release=true", token: token, body: changed)
            if Self.ok(answer), let published = try? JSONDecoder().decode(Published.self, from: Data(answer!.body)), let number = published.release, let entry = published.pack {
                acks.append(.released(release: number, pack: "movie", sha256: entry.sha256))
            }
            // The patch maker's release follows in the background.
            if waiting { try waitForPatch(port) }
        case .reports:
            let report = DeviceReport(channel: "production", release: 2, packs: [.init(id: "level", revision: 1, outcome: .installed, bytes: 1_000)])
            let sent = call(port, "POST", "/v1/apps/\(app)/reports", body: report.encoded(), headers: ["Content-Type: application/json"])
            if waiting { #expect(sent?.status == 202, "\(sent.map { String(decoding: $0.body, as: UTF8.self) } ?? "")") }
            // The writer writes the day's counts within a second.
            if waiting { try waitForReports() }
        default: break
        }
        return acks
    }

    func waitForPatch(_ port: String) throws {
        let keys = try AppStoreKeys.trusted(data: data, app: app)
        for _ in 0..<600 {
            if let body = call(port, "GET", "/v1/apps/\(app)/manifest")?.body, String(decoding: body, as: UTF8.self).count > 0,
               let manifest = try? Envelope.decode(body).verifiedManifest(trusting: keys), manifest[pack: "movie"]?.patches?.isEmpty == false { return }
            usleep(50_000)
        }
        Issue.record("the patch release never came")
    }

    func waitForReports() throws {
        for _ in 0..<600 {
            // The day's log (appended every second) or its snapshot.
            if !FileSystem.contents(of: data + "/apps/\(app)/reports").filter({ $0.hasSuffix(".json") || $0.hasSuffix(".log") }).isEmpty { return }
            usleep(50_000)
        }
        Issue.record("the report writer never wrote")
    }

    func run(modes: [CrashSeam.Mode]) async throws {
        defer { work.remove() }
        defer { issuer?.stop() }
        try prepare()
        if sequence == .attestedReports { try await attestReportKey() }
        try CrashSeam.copy(base, to: data)
        let trace = work.path + "/trace"
        let traced = try await step(trace: trace)
        let count = CrashSeam.trace(trace).count
        #expect(count > 0 && !traced.isEmpty || [.collect, .reports].contains(sequence), "\(sequence): the step must acknowledge something")
        var reached = 0
        try await CrashSeam.enumerate(count, modes: modes, trace: trace, work: work.path, label: sequence.rawValue) { crash in
            try CrashSeam.copy(base, to: data)
            let acks = try await step(crash: (crash.point, crash.mode, crash.backup))
            guard try check(acks, crash.what) else { return false }
            reached += 1
            return true
        }
        print("OriginCrashPointTests \(sequence) \(modes.map(\.rawValue)): \(count) crash points, \(reached) crashes recovered")
    }
}
