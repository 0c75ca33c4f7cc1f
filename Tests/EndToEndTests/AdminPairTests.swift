import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Synchronization
import Testing

/// Every ordered pair of admin commands (`apps`, `tokens`, `keys`, `apps trust`, `channels`, `attest`) run
/// at once against a live origin while a publisher keeps publishing: enumerated, not sampled.
/// The first command of a pair is stopped at its first rename (the write of the file it changes,
/// after it read it: `DEPOT_CRASH_AT=rename:1` with `DEPOT_CRASH_STOP=1`), the second runs until
/// it ends or waits for a lock the first holds, then the first goes on. Afterwards what each
/// command printed as done must hold (the key, the password, the setting, the token, the rule,
/// the channel), and at the end every pack the origin answered 201 for downloads and decrypts
/// with the app's configuration exported then.
@Suite("Admin commands two at a time: nothing either acknowledged is lost", .blocking)
struct AdminPairTests {
    /// One admin command: its arguments for run `n`, and what must hold after it printed `output`
    /// (nil: it does; `peers`: the outputs of every run of the same command in the pair, of which
    /// the last one written legitimately wins).
    struct Command {
        var name: String
        /// Whether it changes data-folder files itself (else it asks the origin over HTTP).
        var local: Bool
        var arguments: (Int) throws -> [String]
        var check: (_ output: String, _ peers: [String]) throws -> String?
    }

    @Test("Every ordered pair of admin commands, the first paused after its read: both changes kept, every published pack still decrypts")
    func everyPair() async throws {
        let work = TemporaryDirectory("depot-admin-pairs")
        defer { work.remove() }
        let data = work.path + "/data"
        let server = try ServeProcess(data: data, environment: [:])
        defer { server.process.terminate(); server.process.waitUntilExit() }
        let app = "com.example.dev"
        let folder = DataFolder(data)
        let apps = AppStore(folder: folder)
        let tokens = TokenStore(folder: folder)
        let trust = TrustStore(folder: folder)
        let attested = AttestedKeys(folder: folder, cached: 1)
        let depot = Processes.depotBinary
        let port = UInt16(server.port)!

        // A publisher publishing new packs the whole time; each 201 recorded with its bytes.
        let publisher = Publisher(port: port, app: app, token: server.token)
        try publisher.publishOne()
        let thread = Thread { publisher.run() }
        thread.start()
        defer { publisher.stop() }

        func lastLine(_ text: String) -> String { String(text.split(separator: "\n").last ?? "") }
        func words(_ text: String) -> [String] {
            text.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\t" || $0 == ";" }).map(String.init)
        }
        func word(_ text: String, prefix: String) -> String? { words(text).first { $0.hasPrefix(prefix) } }
        func hash(_ text: String) -> String { Hex.encode(SHA256Hasher.hash(Array(text.utf8))) }
        let languages = ["en", "fr", "de", "pt-BR", "ja", "es"]
        let d = ["--data", data]
        let remote = ["--server", server.url, "--app", app]

        let commands: [Command] = [
            Command(name: "apps create", local: true, arguments: { ["apps", "create", "com.example.pair\($0)"] + d }, check: { output, _ in
                let id = try #require(word(output, prefix: "com.example.pair"))
                return apps.settings(id) != nil && (try? apps.packKeys(id)) != nil ? nil : "app \(id) or its key is missing"
            }),
            Command(name: "apps credentials", local: true, arguments: { _ in ["apps", "credentials", app, "--enable"] + d }, check: { _, peers in
                let stored = apps.settings(app)?.downloadCredentials?.passwordSHA256
                let printed = peers.map { hash(String(lastLine($0).split(separator: ":").last ?? "")) }
                return printed.contains(stored ?? "") ? nil : "the stored password is none of those printed"
            }),
            Command(name: "apps allowances", local: true, arguments: { ["apps", "allowances", app, "--essential-download", "\(1_000_000_000 + $0)"] + d }, check: { _, peers in
                let stored = apps.settings(app)?.allowances?.essentialDownloadAllowance.map(String.init) ?? "none"
                return peers.contains { $0.contains("essential download \(stored)") } ? nil : "the stored allowance \(stored) is none of those printed"
            }),
            Command(name: "apps language", local: true, arguments: { ["apps", "language", app, "--primary", languages[$0 % languages.count]] + d }, check: { _, peers in
                let stored = apps.settings(app)?.primaryLanguage ?? "not set"
                return peers.contains { $0.contains("primary language \(stored)") } ? nil : "the stored language \(stored) is none of those printed"
            }),
            Command(name: "tokens create", local: true, arguments: { _ in ["tokens", "create", "--app", app] + d }, check: { output, _ in
                let record = try tokens.list().first { $0.sha256.lowercased() == hash(lastLine(output)) }
                return record != nil && record?.revokedAt == nil ? nil : "the token printed is not stored"
            }),
            Command(name: "tokens revoke", local: true, arguments: { _ in ["tokens", "revoke", try tokens.create(app: app, role: .publisher).record.id] + d }, check: { output, _ in
                let id = try #require(word(output, prefix: "tok-"))
                return try tokens.list().first { $0.id == id }?.revokedAt != nil ? nil : "token \(id) is not revoked"
            }),
            Command(name: "keys rotate", local: true, arguments: { _ in ["keys", "rotate", "--app", app] + d }, check: { output, _ in
                let key = try #require(words(output).first { $0.hasPrefix("k") && $0.count == 9 }, "\(output)")
                return try apps.packKeys(app).ring[key] != nil ? nil : "pack key \(key) is gone"
            }),
            Command(name: "keys rotate-signing", local: true, arguments: { _ in ["keys", "rotate-signing", "--grace-days", "1"] + d }, check: { output, _ in
                let key = try #require(words(output).dropFirst(4).first, "\(output)")
                return try apps.signingKeys().contains { ManifestSigningKey.keyID(for: $0.publicKey) == key } ? nil : "signing key \(key) is gone"
            }),
            Command(name: "apps trust", local: true, arguments: {
                ["apps", "trust", app, "--issuer", "https://issuer\($0).example", "--audience", "assetdepot", "--claim", "repository=studio/levels", "--channel", "production"] + d
            }, check: { output, _ in
                let id = try #require(word(output, prefix: "rule-"))
                return trust.rules(app).contains { $0.id == id } ? nil : "rule \(id) is gone"
            }),
            Command(name: "apps trust --remove", local: true, arguments: { n in
                let rule = try trust.add(app, issuer: "https://old\(n).example", audience: "assetdepot", claims: ["repository": "studio/old"], channels: ["production"], allowHTTP: false)
                return ["apps", "trust", app, "--remove", rule.id] + d
            }, check: { output, _ in
                let id = try #require(word(output, prefix: "rule-"))
                return trust.rules(app).contains { $0.id == id } ? "rule \(id) is back" : nil
            }),
            Command(name: "attest configure", local: true, arguments: { ["attest", "configure", "--app", app, "--app-id", "ABCDE12345.com.example.pair\($0)"] + d }, check: { _, peers in
                let stored = apps.settings(app)?.attestation?.appID ?? "none"
                return peers.contains { $0.contains("App Attest for \(stored),") } ? nil : "the stored App ID \(stored) is none of those printed"
            }),
            Command(name: "attest revoke", local: true, arguments: { n in
                // A key the origin accepted (stored as it stores one), to revoke.
                let publicKey = [4] + SecureRandom.bytes(64)
                let key = AttestedKey(keyID: SHA256Hasher.hash(publicKey), publicKey: publicKey, environment: .production, receipt: [UInt8(n & 0xff)])
                try attested.store(app: app, key: key, at: Date())
                return ["attest", "revoke", "--app", app, Data(key.keyID).base64EncodedString()] + d
            }, check: { output, _ in
                let name = try #require(words(output).dropFirst(3).first, "\(output)")
                let keyID = Array(try #require(Data(base64Encoded: name), "\(output)"))
                return try attested.key(app: app, keyID: keyID)?.revokedAt != nil ? nil : "key \(name) is not revoked"
            }),
            Command(name: "channels promote", local: false, arguments: { ["channels", "promote", "--channel", "pair-\($0)", "--release", "1"] + remote }, check: { output, _ in
                let channel = try #require(word(output, prefix: "pair-"), "\(output)")
                guard let text = try? FileSystem.readText(data + "/apps/" + app + "/channels/" + channel),
                      let serving = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) else { return "channel \(channel) is gone" }
                // Release 1, or a re-sign of its content published for the channel since (the
                // origin signs every channel anew within a second of `keys rotate-signing`).
                func packs(_ release: Int) -> [String]? {
                    let path = data + "/apps/" + app + "/releases/" + String(format: "%06d.json", release)
                    guard let bytes = try? FileSystem.readFile(path), let envelope = try? Envelope.decode(bytes),
                          let payload = Data(base64Encoded: envelope.payload), let manifest = try? Manifest.decode(Array(payload)) else { return nil }
                    return manifest.packs.map { "\($0.id) \($0.sha256)" }
                }
                return serving == 1 || (serving > 1 && packs(serving) != nil && packs(serving) == packs(1)) ? nil : "channel \(channel) is at release \(serving), not at release 1 or a re-sign of it"
            }),
            Command(name: "channels remove", local: false, arguments: { n in
                let promoted = try Processes.run(depot, ["channels", "promote", "--channel", "gone-\(n)", "--release", "1"] + remote, environment: ["DEPOT_TOKEN": server.adminToken])
                #expect(promoted.status == 0, "\(promoted.stderr)")
                return ["channels", "remove", "--channel", "gone-\(n)"] + remote
            }, check: { output, _ in
                let channel = try #require(word(output, prefix: "gone-"), "\(output)")
                return FileSystem.exists(data + "/apps/" + app + "/channels/" + channel) ? "channel \(channel) is back" : nil
            }),
        ]

        var run = 0
        var pairs = 0
        for first in commands {
            for second in commands {
                run += 2
                let a = try first.arguments(run), b = try second.arguments(run + 1)
                let pair = "\(first.name) (\(a.joined(separator: " "))) paused, then \(second.name)"
                let environment = ["DEPOT_TOKEN": server.adminToken]
                publisher.allowOne()
                let paused = try Started(depot, a, environment: environment.merging(["DEPOT_CRASH_AT": "rename:1", "DEPOT_CRASH_STOP": "1"]) { $1 })
                // The first runs until it stops at its write (or ends: a command over HTTP writes nothing here).
                paused.waitUntilStoppedOrEnded()
                let other = try Started(depot, b, environment: environment)
                other.waitUntilEndedOrWaitingForLock()
                paused.continue()
                let (firstOut, secondOut) = (paused.finish(), other.finish())
                #expect(firstOut.status == 0 && secondOut.status == 0, "\(pair): \(firstOut.text) | \(secondOut.text)")
                guard firstOut.status == 0 && secondOut.status == 0 else { continue }
                let same = first.name == second.name
                if let problem = try first.check(firstOut.text, same ? [firstOut.text, secondOut.text] : [firstOut.text]) {
                    Issue.record("\(pair): the first's change was lost: \(problem)")
                }
                if let problem = try second.check(secondOut.text, same ? [firstOut.text, secondOut.text] : [secondOut.text]) {
                    Issue.record("\(pair): the second's change was lost: \(problem)")
                }
                pairs += 1
            }
        }
        publisher.stop()
        publisher.waitStopped()
        #expect(publisher.failure == nil, "\(publisher.failure ?? "")")
        #expect(pairs == commands.count * commands.count)

        // Every pack acknowledged decrypts with the configuration exported now.
        let exported = try Processes.run(depot, ["keys", "export", "--app", app] + d)
        #expect(exported.status == 0, "\(exported.stderr)")
        try FileSystem.writeAtomically(Array(exported.stdout.utf8), to: work.path + "/client.json")
        // The last credentials enabled guard the manifest: turn them off for the device.
        _ = try apps.setDownloadCredentials(app, enabled: false)
        let sync = try Processes.run(depot, ["sync", "--config", work.path + "/client.json", "--dest", work.path + "/device", "--quiet"] + remote)
        #expect(sync.status == 0, "\(sync.stdout)\(sync.stderr)")
        let acknowledged = publisher.acknowledged
        #expect(acknowledged.count >= 10, "the publisher must have published during the pairs: \(acknowledged.count)")
        for (pack, bytes) in acknowledged {
            #expect((try? FileSystem.readFile(work.path + "/device/packs/" + pack)) == bytes, "pack \(pack), answered 201, does not decrypt to its bytes")
        }
        print("AdminPairTests: \(pairs) ordered pairs of \(commands.count) commands, \(acknowledged.count) packs published meanwhile")
    }

    /// Publishes a new 1 KiB pack each time it is allowed one, until stopped.
    final class Publisher: @unchecked Sendable {
        // @unchecked: the mutable fields are behind `state`.
        let port: UInt16, app: String, token: String
        private let state = Mutex<(stop: Bool, stopped: Bool, done: [(String, [UInt8])], failure: String?)>((false, false, [], nil))
        private let finished = DispatchSemaphore(value: 0)
        private let allowance = DispatchSemaphore(value: 0)

        init(port: UInt16, app: String, token: String) { (self.port, self.app, self.token) = (port, app, token) }

        var acknowledged: [(String, [UInt8])] { state.withLock { $0.done } }
        var failure: String? { state.withLock { $0.failure } }

        func publishOne() throws {
            let n = state.withLock { $0.done.count }
            let pack = "pack-\(n)"
            let body = CrashDevice.bytes(1024, seed: UInt64(n + 1))
            let head = "PUT /v1/apps/\(app)/packs/\(pack)?release=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
            let answer = try RawHTTP.send(port: port, head, body: body, timeout: RawHTTP.changeWait).first
            guard answer?.status == 201 else { throw CLIFailure(message: "publish \(pack): \(answer?.status ?? 0) \(answer?.bodyText ?? "")") }
            state.withLock { $0.done.append((pack, body)) }
        }

        /// Lets the publisher publish one more pack (one per pair, so that the release stays small).
        func allowOne() { allowance.signal() }

        func run() {
            while true {
                allowance.wait()
                guard !state.withLock({ $0.stop }) else { break }
                do {
                    try publishOne()
                } catch {
                    state.withLock { $0.failure = "\(error)" }
                    break
                }
            }
            state.withLock { $0.stopped = true }
            finished.signal()
        }

        func stop() {
            state.withLock { $0.stop = true }
            allowance.signal()
        }
        func waitStopped() {
            guard !state.withLock({ $0.stopped }) else { return }
            finished.wait()
            finished.signal()
        }
    }

    struct CLIFailure: Error, CustomStringConvertible { var message: String; var description: String { message } }

    /// A `depot` process started with its output captured.
    final class Started {
        let process = Process()
        private let output = Pipe()

        init(_ path: String, _ arguments: [String], environment: [String: String]) throws {
            process.executableURL = URL(fileURLWithPath: path)
            process.arguments = arguments
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
            process.standardOutput = output
            process.standardError = output
            try process.run()
        }

        /// The process's state letter in /proc (R, S, D, T…), nil once it is gone or a zombie.
        private var state: Character? {
            guard let text = Self.procFile("/proc/\(process.processIdentifier)/stat"),
                  let close = text.lastIndex(of: ")") else { return nil }
            let letter = text[text.index(close, offsetBy: 2)]
            return letter == "Z" || letter == "X" ? nil : letter
        }

        /// A /proc file read to its end (they have no size for a sized read to go by).
        static func procFile(_ path: String) -> String? {
            let fd = open(path, O_RDONLY)
            guard fd >= 0 else { return nil }
            defer { close(fd) }
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                guard count > 0 else { break }
                bytes += buffer[0..<count]
            }
            return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self)
        }

        /// Polls /proc for the stop the seam makes (SIGSTOP) or the end.
        func waitUntilStoppedOrEnded() {
            while let letter = state, letter != "T" { usleep(500) }
        }

        /// Polls /proc until the process has ended or sits in `flock` (a lock the paused one holds).
        func waitUntilEndedOrWaitingForLock() {
            #if arch(x86_64)
            let flockCall = "73"
            #else
            let flockCall = "32"
            #endif
            while state != nil {
                let call = Self.procFile("/proc/\(process.processIdentifier)/syscall")?.split(separator: " ").first
                if call.map(String.init) == flockCall { return }
                usleep(500)
            }
        }

        func `continue`() { kill(process.processIdentifier, SIGCONT) }

        func finish() -> (status: Int32, text: String) {
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: data, as: UTF8.self))
        }
    }
}
