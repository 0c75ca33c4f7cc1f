import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// The extension's scheduling step within an extension's memory: `depot extension schedule` in a
/// process of its own (as the extension runs it), with signed manifests of 1, 100, 1,000 and
/// 10,000 packs; its peak resident memory (`/usr/bin/time`'s maximum RSS) above the 1-pack run
/// must stay within twice the manifest's size (beyond the 1-pack step's own run-to-run spread
/// and the allocator's granularity),
/// and grow no faster than the manifest.
@Suite("The scheduling step's memory")
struct ScheduleMemoryTests {
    /// A signed manifest of `count` packs with the field lengths of real ones, and the client configuration that trusts it.
    /// With `rooted`, the configuration pins a root of trust that protects the channel, and the
    /// envelope carries the root and the release statement (issue 52): what a protected channel's
    /// extension checks.
    static func write(count: Int, in folder: String, rooted: Bool = false) throws -> (manifest: String, config: String, size: Int) {
        let key = Ed25519PrivateKey()
        let now = Date()
        let packs = (0..<count).map { i -> PackEntry in
            let digest = Hex.encode(SHA256Hasher.hash(Array("pack \(i)".utf8)))
            let plain = Hex.encode(SHA256Hasher.hash(Array("plain \(i)".utf8)))
            return PackEntry(
                id: String(format: "level-%05d", i), revision: 3, url: "https://cdn.example.com/v1/apps/com.example.game/blobs/" + digest,
                size: 1_000_000 + Int64(i), sha256: digest, installSize: 999_000, plaintextSHA256: plain, policy: .prefetch, tags: ["levels"],
                keyID: "k1", contentType: "application/octet-stream"
            )
        }
        let manifest = Manifest(app: "com.example.game", version: 7, publishedAt: now, expiresAt: now.addingTimeInterval(86400), packs: packs, channel: "production")
        var signed = try Envelope.sign(manifest, with: [key])
        var root: Envelope?
        if rooted {
            let (rootKey, releaseKey) = (Ed25519PrivateKey(), Ed25519PrivateKey())
            root = try RootDocument(
                app: "com.example.game", version: 1, expiresAt: now.addingTimeInterval(86_400 * 365), rootKeys: [rootKey.publicKey], rootThreshold: 1,
                onlineKeys: [key.publicKey], releaseKeys: [releaseKey.publicKey], releaseThreshold: 1, protectedChannels: ["production"]
            ).signed(with: [rootKey])
            signed.roots = [root!]
            signed.releases = [try ReleaseStatement(app: "com.example.game", channel: "production", release: 7, signedAt: now, packs: packs).signed(with: [releaseKey])]
        }
        let envelope = signed.encoded()
        let paths = (folder + "/manifest-\(count)\(rooted ? "-rooted" : "").json", folder + "/client-\(count)\(rooted ? "-rooted" : "").json")
        try FileSystem.writeAtomically(envelope, to: paths.0)
        let configuration = ClientConfiguration(app: "com.example.game", manifestPublicKeys: [key.publicKey], keyRing: try KeyRing(["k1": [UInt8](repeating: 1, count: 32)]), root: root)
        try FileSystem.writeAtomically(configuration.encoded(), to: paths.1)
        return (paths.0, paths.1, envelope.count)
    }

    /// Peak RSS in KiB of one scheduling step, and the downloads it printed.
    static func schedule(_ files: (manifest: String, config: String, size: Int), dest: String) throws -> (kib: Int, lines: Int) {
        let run = try Processes.run("/usr/bin/time", ["-f", "maxrss=%M", Processes.depotBinary, "extension", "schedule", "--manifest", files.manifest,
                                                      "--event", "periodic", "--config", files.config, "--dest", dest, "--languages", "en"])
        #expect(run.status == 0, "\(run.stderr)")
        let line = run.stderr.split(separator: "\n").last { $0.hasPrefix("maxrss=") } ?? "maxrss=0"
        return (Int(line.dropFirst("maxrss=".count)) ?? 0, run.stdout.split(separator: "\n").count)
    }

    @Test("Manifests of 100, 1,000 and 10,000 packs: peak RSS above a 1-pack manifest's within twice the manifest's size; the same with a root of trust and a release statement on a protected channel", arguments: [false, true])
    func scheduleMemory(rooted: Bool) throws {
        let work = TemporaryDirectory("depot-schedule-memory")
        defer { work.remove() }
        // Best of five per size: the least this step needed (another process's load only adds).
        func measure(_ count: Int) throws -> (best: Int, worst: Int, size: Int) {
            let files = try Self.write(count: count, in: work.path, rooted: rooted)
            var runs: [Int] = []
            for round in 0..<5 {
                let (kib, lines) = try Self.schedule(files, dest: work.path + "/dest-\(count)-\(round)\(rooted ? "-rooted" : "")")
                #expect(lines == count, "every pack is scheduled")
                runs.append(kib)
            }
            return (runs.min()!, runs.max()!, files.size)
        }
        let base = try measure(1)
        // The runtime's own run-to-run spread (the same 1-pack step varies by a few hundred KiB:
        // allocator arenas, pages touched by the loader) is no manifest's doing, nor is the
        // allocator's granularity (glibc grows its heap 128 KiB past each request): 256 KiB more.
        let spread = base.worst - base.best + 256
        var rows: [String] = []
        for count in [100, 1_000, 10_000] {
            let (kib, _, size) = try measure(count)
            let above = kib - base.best
            rows.append("\(count) packs: manifest \(size / 1024) KiB, peak \(kib) KiB, \(above) KiB above 1 pack (\(String(format: "%.2f", Double(above) * 1024 / Double(size)))x the manifest)")
            #expect((above - spread) * 1024 <= 2 * size, "\(count) packs: \(above) KiB above the 1-pack step (spread \(spread) KiB) for a manifest of \(size / 1024) KiB")
        }
        print("schedule memory\(rooted ? ", rooted" : "") (1 pack: \(base.best)–\(base.worst) KiB):\n" + rows.joined(separator: "\n"))
    }
}
