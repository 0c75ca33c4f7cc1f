import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

private func entry(_ id: String, revision: Int = 1, sha: Character = "a", policy: PackEntry.Policy = .prefetch) -> PackEntry {
    PackEntry(id: id, revision: revision, url: "http://x/\(id)", size: 10, sha256: String(repeating: sha, count: 64), installSize: 1,
              plaintextSHA256: String(repeating: "f", count: 64), policy: policy, tags: [], keyID: "k1", contentType: "application/octet-stream")
}

private func installed(_ revision: Int, sha: Character = "a") -> InstalledState.Pack {
    InstalledState.Pack(revision: revision, sha256: String(repeating: sha, count: 64), plaintextSHA256: "", installSize: 1, installedAt: Date())
}

@Suite("Sync plan")
struct SyncPlanTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    @Test("Table: what is downloaded, kept and removed")
    func table() {
        let manifest = Manifest(app: "a", version: 2, publishedAt: now, expiresAt: now + 100, packs: [
            entry("new"), entry("same"), entry("bumped", revision: 2), entry("rehashed", sha: "b"), entry("first", policy: .essential),
        ])
        let state = InstalledState(app: "a", manifestVersion: 1, packs: [
            "same": installed(1), "bumped": installed(1), "rehashed": installed(1), "gone": installed(1),
        ])
        let plan = SyncPlan.make(manifest: manifest, state: state)
        #expect(plan.downloads.map(\.id) == ["first", "bumped", "new", "rehashed"])
        #expect(plan.unchanged == ["same"])
        #expect(plan.removals == ["gone"])
    }

    @Test("An installed pack whose file disappeared is downloaded again")
    func missingFile() {
        let manifest = Manifest(app: "a", version: 1, publishedAt: now, expiresAt: now + 100, packs: [entry("x")])
        let plan = SyncPlan.make(manifest: manifest, state: InstalledState(app: "a", packs: ["x": installed(1)])) { _ in false }
        #expect(plan.downloads.map(\.id) == ["x"])
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

    @Test("The state store is exclusive: a second holder waits, then times out")
    func exclusiveLock() throws {
        let dir = TemporaryDirectory("depot-state")
        defer { dir.remove() }
        var first: StateStore? = try StateStore(destination: dir.path)
        try first!.save(InstalledState(app: "a", manifestVersion: 3))
        #expect(throws: ClientError.self) { try StateStore(destination: dir.path, timeout: 0.2) }
        first = nil
        let second = try StateStore(destination: dir.path, timeout: 0.2)
        #expect(try second.load(app: "a").manifestVersion == 3)
        #expect(throws: ClientError.self) { try second.load(app: "b") }
    }
}
