import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

private func entry(_ id: String, revision: Int = 1, sha: Character = "a", size: Int64 = 10, policy: PackEntry.Policy = .prefetch, tags: [String] = []) -> PackEntry {
    PackEntry(id: id, revision: revision, url: "http://x/\(id)", size: size, sha256: String(repeating: sha, count: 64), installSize: 1,
              plaintextSHA256: String(repeating: "f", count: 64), policy: policy, tags: tags, keyID: "k1", contentType: "application/octet-stream")
}

private func installed(_ revision: Int, sha: Character = "a") -> InstalledState.Pack {
    InstalledState.Pack(revision: revision, sha256: String(repeating: sha, count: 64), plaintextSHA256: "", installSize: 1, installedAt: Date())
}

@Suite("Planner")
struct PlannerTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func manifest(_ packs: [PackEntry]) -> Manifest { Manifest(app: "a", version: 2, publishedAt: now, expiresAt: now + 100, packs: packs) }

    struct Row {
        var rule: String
        var packs: [PackEntry]
        var installed: [String: InstalledState.Pack] = [:]
        var request: Planner.Request
        var downloads: [String]
        var essential: [String] = []
        var deferred: [String] = []
        var removals: [String] = []
        var unchanged: [String] = []
        var notRequested: [String] = []
    }

    static let rows: [Row] = [
        Row(rule: "a new pack is downloaded", packs: [entry("new")], request: .init(kind: .periodic), downloads: ["new"]),
        Row(rule: "an installed pack at the same revision and hash is kept", packs: [entry("same")], installed: ["same": installed(1)],
            request: .init(kind: .periodic), downloads: [], unchanged: ["same"]),
        Row(rule: "a changed revision downloads again", packs: [entry("p", revision: 2)], installed: ["p": installed(1)],
            request: .init(kind: .periodic), downloads: ["p"]),
        Row(rule: "a changed container hash downloads again", packs: [entry("p", sha: "b")], installed: ["p": installed(1)],
            request: .init(kind: .periodic), downloads: ["p"]),
        Row(rule: "packs gone from the manifest are removed", packs: [], installed: ["gone": installed(1)],
            request: .init(kind: .periodic), downloads: [], removals: ["gone"]),
        Row(rule: "essential packs are essential on install", packs: [entry("e", policy: .essential), entry("p")],
            request: .init(kind: .install), downloads: ["e", "p"], essential: ["e"]),
        Row(rule: "essential packs are essential on update", packs: [entry("e", policy: .essential)],
            request: .init(kind: .update), downloads: ["e"], essential: ["e"]),
        Row(rule: "essential packs are non-essential on a periodic check", packs: [entry("e", policy: .essential)],
            request: .init(kind: .periodic), downloads: ["e"], essential: []),
        Row(rule: "essential packs are non-essential in the foreground", packs: [entry("e", policy: .essential)],
            request: .init(kind: .foreground), downloads: ["e"], essential: []),
        Row(rule: "on-demand packs wait until asked for", packs: [entry("o", policy: .onDemand)],
            request: .init(kind: .foreground), downloads: [], notRequested: ["o"]),
        Row(rule: "an on-demand pack asked for by id", packs: [entry("o", policy: .onDemand), entry("q", policy: .onDemand)],
            request: .init(kind: .foreground, packs: ["o"]), downloads: ["o"], notRequested: ["q"]),
        Row(rule: "on-demand packs asked for by tag", packs: [entry("o", policy: .onDemand, tags: ["world-2"]), entry("q", policy: .onDemand)],
            request: .init(kind: .foreground, tags: ["world-2"]), downloads: ["o"], notRequested: ["q"]),
        Row(rule: "an installed on-demand pack is kept up to date", packs: [entry("o", revision: 2, policy: .onDemand)], installed: ["o": installed(1)],
            request: .init(kind: .periodic), downloads: ["o"]),
        Row(rule: "order: essential, prefetch, on-demand, then id",
            packs: [entry("z", policy: .onDemand), entry("b"), entry("a"), entry("y", policy: .essential)],
            request: .init(kind: .install, packs: ["z"]), downloads: ["y", "a", "b", "z"], essential: ["y"]),
        Row(rule: "past the allowance the rest is deferred, not failed", packs: [entry("a", size: 60), entry("b", size: 60), entry("c", size: 30)],
            request: .init(kind: .periodic, allowance: 100), downloads: ["a", "c"], deferred: ["b"]),
        Row(rule: "the essential allowance bounds essential downloads only",
            packs: [entry("e1", size: 50, policy: .essential), entry("e2", size: 50, policy: .essential), entry("p", size: 50)],
            request: .init(kind: .install, essentialAllowance: 60), downloads: ["e1", "p"], essential: ["e1"], deferred: ["e2"]),
        Row(rule: "the download allowance bounds non-essential downloads only: two budgets, as Apple documents the keys",
            packs: [entry("e", size: 80, policy: .essential), entry("p1", size: 50), entry("p2", size: 50)],
            request: .init(kind: .install, allowance: 60, essentialAllowance: 80), downloads: ["e", "p1"], essential: ["e"], deferred: ["p2"]),
    ]

    @Test("Every rule, one row each", arguments: rows.indices)
    func rule(_ index: Int) {
        let row = Self.rows[index]
        let plan = Planner.plan(manifest: manifest(row.packs), state: InstalledState(app: "a", packs: row.installed), request: row.request)
        #expect(plan.downloads.map(\.entry.id) == row.downloads, "\(row.rule)")
        #expect(plan.downloads.filter(\.essential).map(\.entry.id) == row.essential, "\(row.rule)")
        #expect(plan.deferred.map(\.entry.id) == row.deferred, "\(row.rule)")
        #expect(plan.removals == row.removals, "\(row.rule)")
        #expect(plan.unchanged == row.unchanged, "\(row.rule)")
        #expect(plan.notRequested == row.notRequested, "\(row.rule)")
    }

    @Test("An installed pack whose copy disappeared is downloaded again")
    func missingCopy() {
        let plan = Planner.plan(manifest: manifest([entry("x")]), state: InstalledState(app: "a", packs: ["x": installed(1)]),
                                request: .init(kind: .periodic)) { _ in false }
        #expect(plan.downloads.map(\.entry.id) == ["x"])
    }

    @Test("A failed essential download is rescheduled as non-essential")
    func removingEssential() {
        let download = PlannedDownload(entry: entry("e", policy: .essential), essential: true)
        #expect(download.removingEssential() == PlannedDownload(entry: download.entry, essential: false))
    }
}

@Suite("Manifest verification")
struct ManifestSourceTests {
    let key = try! Ed25519PrivateKey(rawRepresentation: [UInt8](repeating: 7, count: 32))
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func source(_ keys: [Ed25519PublicKey]? = nil) -> ManifestSource {
        ManifestSource(url: URL(string: "http://127.0.0.1:1/m")!, app: "app", trustedKeys: keys ?? [key.publicKey])
    }

    func envelope(app: String = "app", version: Int = 5, expires: TimeInterval = 100, signer: Ed25519PrivateKey? = nil) throws -> [UInt8] {
        let manifest = Manifest(app: app, version: version, publishedAt: now, expiresAt: now + expires, packs: [])
        return try Envelope.sign(manifest, with: [signer ?? key]).encoded()
    }

    @Test func accepts() throws {
        #expect(try source().verify(envelope(), floor: 5, now: now).version == 5)
    }

    @Test func refusals() throws {
        func kind(_ body: () throws -> Void) -> ClientError.Kind? {
            do { try body() } catch let error as ClientError { return error.kind } catch { return nil }
            return nil
        }
        #expect(kind { _ = try source().verify(envelope(version: 4), floor: 5, now: now) } == .rollback)
        #expect(kind { _ = try source().verify(envelope(expires: -1), floor: 0, now: now) } == .expired)
        #expect(kind { _ = try source().verify(envelope(app: "other"), floor: 0, now: now) } == .wrongApp)
        let stranger = try Ed25519PrivateKey(rawRepresentation: [UInt8](repeating: 8, count: 32))
        #expect(kind { _ = try source().verify(envelope(signer: stranger), floor: 0, now: now) } == .manifest)
        var bytes = try envelope()
        bytes[bytes.count / 2] ^= 1
        #expect(kind { _ = try source().verify(bytes, floor: 0, now: now) } == .manifest)
    }

    @Test("A manifest of a newer schemaVersion than this client reads is refused, saying so (docs/Integrating.md's compatibility policy)")
    func newerSchema() throws {
        var manifest = Manifest(app: "app", version: 6, publishedAt: now, expiresAt: now + 100, packs: [])
        manifest.schemaVersion = Manifest.currentSchemaVersion + 1
        let bytes = try Envelope.sign(manifest, with: [key]).encoded()
        #expect { _ = try source().verify(bytes, floor: 5, now: now) } throws: { error in
            (error as? ClientError)?.kind == .manifest && "\(error)".contains("schemaVersion \(Manifest.currentSchemaVersion + 1) is newer than this client reads")
        }
        manifest.schemaVersion = Manifest.currentSchemaVersion
        #expect(try source().verify(Envelope.sign(manifest, with: [key]).encoded(), floor: 5, now: now).version == 6)
    }
}

@Suite("Installer and state")
struct InstallerTests {
    @Test("A tampered download is refused and the installed revision is kept")
    func tampered() throws {
        let dir = TemporaryDirectory("depot-installer")
        defer { dir.remove() }
        let ring = try KeyRing(["k1": [UInt8](repeating: 1, count: 32)])
        let plaintext = [UInt8](repeating: 5, count: 5000)
        let container = try PackEncryptor.encrypt(plaintext, header: PackHeader(keyID: "k1", segmentSize: 1024), masterKey: ring["k1"]!)
        var entry = entry("p")
        entry.installSize = Int64(plaintext.count)
        entry.size = Int64(container.count)
        entry.sha256 = Hex.encode(SHA256Hasher.hash(container))
        entry.plaintextSHA256 = Hex.encode(SHA256Hasher.hash(plaintext))
        try FileSystem.writeAtomically(container, to: dir.path + "/download")
        try Installer(keyRing: ring).install(entry, from: dir.path + "/download", to: dir.path + "/installed")
        #expect(try FileSystem.readFile(dir.path + "/installed") == plaintext)

        var bad = container
        bad[100] ^= 1
        try FileSystem.writeAtomically(bad, to: dir.path + "/download")
        #expect(throws: ClientError.self) { try Installer(keyRing: ring).install(entry, from: dir.path + "/download", to: dir.path + "/installed") }
        try FileSystem.writeAtomically(Array(container.dropLast()), to: dir.path + "/download")
        #expect(throws: ClientError.self) { try Installer(keyRing: ring).install(entry, from: dir.path + "/download", to: dir.path + "/installed") }
        #expect(try FileSystem.readFile(dir.path + "/installed") == plaintext)
        #expect(FileSystem.contents(of: dir.path) == ["download", "installed"])
    }

    @Test("Zip entry paths are checked as bytes: a slash followed by a combining mark still separates components", arguments: [
        ("../\u{301}escaped.txt", false), ("ok/../../\u{301}x", false), ("a/\u{301}b.txt", true), ("\u{301}../x", true),
    ])
    func zipEntryBytes(name: String, safe: Bool) throws {
        // Found by Deploy/fuzz (zippath): split by Character, "../\u{301}escaped.txt" had no ".." component.
        let dir = TemporaryDirectory("depot-zip-bytes")
        defer { dir.remove() }
        let zip = dir.path + "/pack.zip"
        let script = "import sys, zipfile\nwith zipfile.ZipFile(sys.argv[1], 'w') as z: z.writestr(sys.argv[2], b'x')\n"
        #expect(try Processes.run("/usr/bin/env", ["python3", "-c", script, zip, name]).status == 0)
        if safe {
            #expect(try ZipPack.inspect(zip).files == 1)
        } else {
            #expect(throws: ZipPackError.self) { try ZipPack.inspect(zip) }
            #expect(throws: ZipPackError.self) { try ZipPack.extract(zip, into: dir.path + "/out") }
            #expect(FileSystem.contents(of: dir.path).sorted() == ["out", "pack.zip"] && FileSystem.contents(of: dir.path + "/out").isEmpty, "nothing unpacked anywhere")
        }
    }

    @Test("A zip pack installs as a folder; a new revision replaces it whole; an escaping entry leaves the old one")
    func zip() throws {
        let dir = TemporaryDirectory("depot-installer-zip")
        defer { dir.remove() }
        let script = """
        import sys, zipfile
        with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("levels/one.bin", b"1" * 3000)
            z.writestr("readme.txt", b"v1")
        with zipfile.ZipFile(sys.argv[2], "w") as z:
            z.writestr("readme.txt", b"v2")
        with zipfile.ZipFile(sys.argv[3], "w") as z:
            z.writestr("ok.txt", b"fine")
            z.writestr("../../escaped.txt", b"x")
        """
        let paths = ["v1", "v2", "evil"].map { dir.path + "/\($0).zip" }
        #expect(try Processes.run("/usr/bin/env", ["python3", "-c", script] + paths).status == 0)
        let ring = try KeyRing(["k1": [UInt8](repeating: 1, count: 32)])
        func install(_ zip: String, revision: Int) throws {
            let plaintext = try FileSystem.readFile(zip)
            let container = try PackEncryptor.encrypt(plaintext, header: PackHeader(keyID: "k1", segmentSize: 1024), masterKey: ring["k1"]!)
            var entry = entry("levels", revision: revision)
            entry.contentType = "application/zip"
            entry.installSize = (try? ZipPack.inspect(zip).installSize) ?? 0
            entry.size = Int64(container.count)
            entry.sha256 = Hex.encode(SHA256Hasher.hash(container))
            entry.plaintextSHA256 = Hex.encode(SHA256Hasher.hash(plaintext))
            try FileSystem.writeAtomically(container, to: dir.path + "/download")
            try Installer(keyRing: ring).install(entry, from: dir.path + "/download", to: dir.path + "/packs/levels")
        }
        try FileSystem.createDirectory(dir.path + "/packs")
        try install(paths[0], revision: 1)
        #expect(try FileSystem.readFile(dir.path + "/packs/levels/levels/one.bin") == [UInt8](repeating: 49, count: 3000))
        try install(paths[1], revision: 2)
        #expect(try FileSystem.readFile(dir.path + "/packs/levels/readme.txt") == Array("v2".utf8))
        #expect(!FileSystem.exists(dir.path + "/packs/levels/levels"), "the old revision's files are gone")
        #expect(throws: ClientError.self) { try install(paths[2], revision: 3) }
        #expect(try FileSystem.readFile(dir.path + "/packs/levels/readme.txt") == Array("v2".utf8))
        #expect(!FileSystem.exists(dir.path + "/escaped.txt") && !FileSystem.exists(dir.path + "/packs/ok.txt"))
        #expect(FileSystem.contents(of: dir.path + "/packs") == ["levels"], "no temporary folder left")
    }

    @Test("State changes only under the exclusive lock: a second holder times out; changes are saved")
    func exclusiveControl() async throws {
        let dir = TemporaryDirectory("depot-state")
        defer { dir.remove() }
        let store = try StateStore(destination: dir.path)
        try store.withExclusiveControl(app: "a") { state in
            state.raiseFloor(channel: "production", to: 3)
            state.raiseFloor(channel: "beta", to: 7)
            state.raiseFloor(channel: "beta", to: 5)
        }
        let held = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            _ = try? StateStore(destination: dir.path).withExclusiveControl(app: "a") { _ in
                held.signal()
                release.wait()
            }
        }
        held.wait()
        let started = Date()
        #expect(throws: ClientError.self) { try StateStore(destination: dir.path).withExclusiveControl(timeout: 0.3, app: "a") { _ in } }
        #expect(Date().timeIntervalSince(started) >= 0.3)
        // A reader does not wait for the holder (an app reading at launch while the extension
        // records an install): it sees the last saved state at once, the lock still held.
        let whileHeld = try StateStore(destination: dir.path).read(app: "a")
        #expect(whileHeld.floor(channel: "beta") == 7)
        #expect(throws: ClientError.self) { try StateStore(destination: dir.path).withExclusiveControl(timeout: 0, app: "a") { _ in } }
        release.signal()
        let state = try StateStore(destination: dir.path).read(app: "a", timeout: 5)
        #expect(state.floor(channel: "production") == 3 && state.floor(channel: "beta") == 7 && state.floor(channel: "nightly") == 0)
        #expect(throws: ClientError.self) { try store.read(app: "b") }
    }
}

@Suite("The device's budgets, fed the origin's own Info.plist keys")
struct InitialBudgetTests {
    /// A random release: 0–4 packs of each policy with container sizes up to 10 MB.
    static func release(_ generator: inout some RandomNumberGenerator) -> Manifest {
        var packs: [PackEntry] = []
        for policy in [PackEntry.Policy.essential, .prefetch, .onDemand] {
            for index in 0..<Int.random(in: 0...4, using: &generator) {
                packs.append(entry("\(policy.rawValue)-\(index)", size: Int64.random(in: 69...10_000_000, using: &generator), policy: policy))
            }
        }
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        return Manifest(app: "a", version: 1, publishedAt: now, expiresAt: now + 100, packs: packs.shuffled(using: &generator))
    }

    /// What `depot sync --event install --info-plist` plans for a device given `keys`.
    static func installPlan(_ manifest: Manifest, keys: BackgroundAssetsKeys, manifestSize: Int64) -> Plan {
        let rules = BackgroundAssetsRules(
            allowedDomains: keys.domainAllowList, downloadAllowance: keys.downloadAllowance, essentialDownloadAllowance: keys.essentialDownloadAllowance
        )
        var request = Planner.Request(kind: .install)
        (request.essentialAllowance, request.allowance) = rules.initialBudgets(manifestSize: manifestSize)
        return Planner.plan(manifest: manifest, state: InstalledState(app: "a"), request: request)
    }

    @Test("Any release: its keys let an install fetch every essential and prefetch pack and nothing on demand; one byte less and what does not fit waits")
    func property() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            let manifest = Self.release(&generator)
            let manifestSize = Int64.random(in: 300...40_000, using: &generator)
            let keys = BackgroundAssetsKeys(manifest: manifest, manifestSize: manifestSize, manifestURL: "https://cdn.example.com/m")
            let ids = { (policy: PackEntry.Policy) in Set(manifest.packs.filter { $0.policy == policy }.map(\.id)) }
            let plan = Self.installPlan(manifest, keys: keys, manifestSize: manifestSize)
            #expect(Set(plan.downloads.map(\.entry.id)) == ids(.essential).union(ids(.prefetch)), "\(manifest.packs)")
            #expect(Set(plan.downloads.filter(\.essential).map(\.entry.id)) == ids(.essential))
            #expect(plan.deferred.isEmpty && Set(plan.notRequested) == ids(.onDemand))

            var short = keys
            short.essentialDownloadAllowance -= 1
            let essentialShort = Self.installPlan(manifest, keys: short, manifestSize: manifestSize)
            #expect(essentialShort.deferred.isEmpty == ids(.essential).isEmpty)
            #expect(essentialShort.deferred.allSatisfy { $0.entry.policy == .essential })
            short = keys
            short.downloadAllowance -= 1
            let downloadShort = Self.installPlan(manifest, keys: short, manifestSize: manifestSize)
            #expect(downloadShort.deferred.isEmpty == ids(.prefetch).isEmpty)
            #expect(downloadShort.deferred.allSatisfy { $0.entry.policy == .prefetch })
        }
    }
}

@Suite("Leftovers of killed installs")
struct LeftoverTests {
    @Test("A staging tree goes when the process its writer named is gone, whatever the pack's own name holds; one whose owner seems alive (a reused pid) goes after a day unchanged")
    func removeLeftovers() throws {
        let dir = TemporaryDirectory("depot-leftovers")
        defer { dir.remove() }
        let ended = Process()
        ended.executableURL = URL(fileURLWithPath: "/bin/true")
        try ended.run()
        ended.waitUntilExit()
        let live = Process()
        live.executableURL = URL(fileURLWithPath: "/bin/sleep")
        live.arguments = ["600"]
        try live.run()
        defer {
            kill(live.processIdentifier, SIGKILL)
            live.waitUntilExit()
        }
        let (gone, alive) = (ended.processIdentifier, live.processIdentifier)
        // A pack named like an owner that is gone, staged by a process that lives: it stays (the
        // old reading took the first "-pNNN" part and removed it).
        let living = dir.path + "/.tmp-movie-p\(gone)-p\(alive)-0123456789ab"
        let dead = dir.path + "/.tmp-movie-p\(alive)-p\(gone)-aaaaaaaaaaaa"
        let deadScratch = dir.path + "/.tmp-movie-p\(gone)-bbbbbbbbbbbb.plain"
        let mine = FileSystem.temporaryPath(besides: dir.path + "/levels")
        let anonymous = dir.path + "/.tmp-levels-cc"
        for tree in [living, dead] {
            try FileSystem.createDirectory(tree)
            try FileSystem.writeAtomically([1], to: tree + "/entry")
        }
        try FileSystem.writeAtomically([2], to: mine)
        try FileSystem.writeAtomically([3], to: anonymous)
        try FileSystem.writeAtomically([3], to: deadScratch)
        try FileSystem.writeAtomically([4], to: dir.path + "/levels")
        #expect(Installer.removeLeftovers(in: dir.path) == 2)
        #expect(Set(FileSystem.contents(of: dir.path)) == Set([living, mine, anonymous, dir.path + "/levels"].map(FileSystem.lastComponent)))
        // Twelve hours later: nothing of a live owner goes; only the name without one (an older build's).
        #expect(Installer.removeLeftovers(in: dir.path, now: Date().addingTimeInterval(12 * 3600)) == 1)
        #expect(Set(FileSystem.contents(of: dir.path)) == Set([living, mine, dir.path + "/levels"].map(FileSystem.lastComponent)))
        #expect(try FileSystem.readFile(living + "/entry") == [1])
        // A day and more unchanged: the pid may be another process's now (pid 1, say, which
        // answers kill(pid, 0) as alive here and with EPERM in an app's sandbox): the trees go,
        // the installed copy stays.
        let reused = dir.path + "/.tmp-movie-p1-dddddddddddd"
        try FileSystem.createDirectory(reused)
        #expect(!System.processIsGone(1) && !System.processIsGone(alive))
        #expect(Installer.removeLeftovers(in: dir.path, now: Date().addingTimeInterval(12 * 3600)) == 0)
        #expect(Installer.removeLeftovers(in: dir.path, now: Date().addingTimeInterval(25 * 3600)) == 2)
        // This process's own tree stays however old (a step of it may be using it)...
        #expect(Set(FileSystem.contents(of: dir.path)) == Set([mine, dir.path + "/levels"].map(FileSystem.lastComponent)))
        // ...but one with this pid and another launch token is an earlier process's (or another
        // pid namespace's): it goes once unchanged for a day, like any other live-looking owner's.
        let earlier = dir.path + "/.tmp-movie-p\(System.processID)-" + (FileSystem.launchToken == "00000000" ? "11111111" : "00000000") + "0001"
        try FileSystem.createDirectory(earlier)
        #expect(Installer.removeLeftovers(in: dir.path) == 0)
        #expect(Installer.removeLeftovers(in: dir.path, now: Date().addingTimeInterval(25 * 3600)) == 1 && !FileSystem.exists(earlier) && FileSystem.exists(mine))
    }
}
