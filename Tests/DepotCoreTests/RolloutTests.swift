@testable import DepotCore
import Foundation
import Testing

@Suite("Rollouts in the manifest: each device's choice, the entries it follows, the allowances of both choices, device reports")
struct RolloutTests {
    static func entry(_ id: String, revision: Int, size: Int64, digit: Character, host: String = "cdn.example.com", policy: PackEntry.Policy = .prefetch) -> PackEntry {
        PackEntry(
            id: id, revision: revision, url: "https://\(host)/v1/apps/com.example.game/blobs/" + String(repeating: digit, count: 64), size: size,
            sha256: String(repeating: digit, count: 64), installSize: size, plaintextSHA256: String(repeating: digit, count: 64), policy: policy, tags: [],
            keyID: "k1", contentType: "application/octet-stream"
        )
    }

    static func manifest(rollout: Rollout?) -> Manifest {
        Manifest(
            app: "com.example.game", version: 7, publishedAt: Date(timeIntervalSince1970: 1_800_000_000), expiresAt: Date(timeIntervalSince1970: 1_900_000_000),
            packs: [entry("core", revision: 1, size: 100, digit: "a", policy: .essential), entry("level", revision: 3, size: 1_000, digit: "b"), entry("old", revision: 1, size: 10, digit: "c")],
            channel: "production", rollout: rollout
        )
    }

    static let candidate = Rollout(
        release: 5, fraction: 0.1, salt: String(repeating: "5a", count: 16),
        packs: [entry("level", revision: 4, size: 5_000, digit: "d", host: "other.example.com"), entry("extra", revision: 1, size: 20, digit: "e")], removed: ["old"]
    )

    @Test("The share of 100,000 install ids that take a 10 % candidate lies within the binomial bounds; raising the fraction keeps every one of them; 0 takes none, 1 all")
    func sample() {
        var rng = SystemRandomNumberGenerator()
        let ids = (0..<100_000).map { _ in Hex.encode((0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) }) }
        var rollout = Self.candidate
        let tenth = Set(ids.filter(rollout.takesCandidate))
        // Mean 10,000, standard deviation 94.9: six of them either side.
        #expect(abs(tenth.count - 10_000) < 570, "\(tenth.count)")
        rollout.fraction = 0.5
        let half = Set(ids.filter(rollout.takesCandidate))
        #expect(tenth.isSubset(of: half) && abs(half.count - 50_000) < 950, "\(half.count)")
        rollout.fraction = 0
        #expect(!ids.contains(where: rollout.takesCandidate))
        rollout.fraction = 1
        #expect(ids.allSatisfy(rollout.takesCandidate))
        // Another salt draws another sample: about 10 % of the first one's devices again, not all.
        var other = Self.candidate
        other.salt = String(repeating: "07", count: 16)
        let overlap = tenth.filter(other.takesCandidate).count
        #expect(overlap < 2_000, "\(overlap)")
    }

    @Test("The bucket is the first 8 bytes of SHA-256(salt ‖ install id), big-endian (a known answer)")
    func knownAnswer() {
        let rollout = Self.candidate
        let id = String(repeating: "01", count: 16)
        let digest = SHA256Hasher.hash(Hex.decode(rollout.salt)! + Hex.decode(id)!)
        let expected = digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        #expect(rollout.bucket(installID: id) == expected)
        #expect(rollout.takesCandidate(installID: id) == (Double(expected) < 0.1 * 18_446_744_073_709_551_616.0))
    }

    @Test("A device that takes the candidate follows its entries (changed, added, removed packs); one that does not follows the current ones; neither sees a rollout")
    func resolution() throws {
        let manifest = Self.manifest(rollout: Self.candidate)
        let taken = manifest.choosing(candidate: true)
        #expect(taken.packs.map(\.id) == ["core", "extra", "level"] && taken[pack: "level"]?.revision == 4 && taken.rollout == nil)
        let kept = manifest.choosing(candidate: false)
        #expect(kept.packs == manifest.packs && kept.rollout == nil)
        var all = Self.candidate
        all.fraction = 1
        #expect(Self.manifest(rollout: all).resolved(installID: String(repeating: "ff", count: 16)).packs == taken.packs)
        #expect(Self.manifest(rollout: nil).resolved(installID: "00").packs == manifest.packs)
        // Signed and decoded, the rollout survives; its entries are checked like the packs.
        let decoded = try Manifest.decode(manifest.encoded())
        #expect(decoded.rollout == manifest.rollout)
        #expect(manifest.allEntries.count == 5)
    }

    @Test("A rollout that cannot be used makes the whole manifest refused: fraction, salt, a candidate's URL or digest, a pack both changed and removed")
    func refused() {
        func problem(_ change: (inout Rollout) -> Void) -> String? {
            var rollout = Self.candidate
            change(&rollout)
            return Self.manifest(rollout: rollout).problem
        }
        #expect(problem { _ in } == nil)
        #expect(problem { $0.fraction = 1.5 } != nil)
        #expect(problem { $0.fraction = .nan } != nil)
        #expect(problem { $0.salt = "xyz" } != nil)
        #expect(problem { $0.packs[0].url = "file:///etc/passwd" } != nil)
        #expect(problem { $0.packs[0].sha256 = "../../x" } != nil)
        #expect(problem { $0.packs[0].id = "../x" } != nil)
        #expect(problem { $0.removed = ["level"] } != nil)
        #expect(problem { $0.packs.append($0.packs[0]) } != nil)
    }

    @Test("The Info.plist keys cover either choice: each allowance the larger of the two, every host of both")
    func allowances() {
        let keys = BackgroundAssetsKeys(manifest: Self.manifest(rollout: Self.candidate), manifestSize: 900, manifestURL: "https://cdn.example.com/v1/apps/com.example.game/manifest")
        // Current prefetch: level 1,000 + old 10; candidate: level 5,000 + extra 20.
        #expect(keys.downloadAllowance == 5_020 && keys.maxInstallSize == 5_020)
        #expect(keys.essentialDownloadAllowance == 1_000 && keys.essentialMaxInstallSize == 100)
        #expect(keys.domainAllowList == ["cdn.example.com", "other.example.com"])
        let plain = BackgroundAssetsKeys(manifest: Self.manifest(rollout: nil), manifestSize: 900, manifestURL: "https://cdn.example.com/m")
        #expect(plain.downloadAllowance == 1_010)
    }

    @Test("A device report: bounded, of its schema, naming only known error kinds")
    func reports() throws {
        let report = DeviceReport(channel: "production", release: 7, packs: [
            .init(id: "level", revision: 4, outcome: .failed, error: "integrity"), .init(id: "core", revision: 1, outcome: .installed, bytes: 100),
        ])
        #expect(try DeviceReport.decode(report.encoded()) == report)
        #expect(throws: ManifestError.self) { try DeviceReport.decode(Array("{\"channel\":1}".utf8)) }
        #expect(throws: ManifestError.self) { try DeviceReport.decode([UInt8](repeating: 32, count: DeviceReport.maximumBytes + 1)) }
        var bad = report
        bad.packs[0].error = "rm -rf"
        #expect(bad.problem != nil)
        bad = report
        bad.packs = (0...DeviceReport.maximumPacks).map { .init(id: "p\($0)", revision: 1, outcome: .installed) }
        #expect(bad.problem != nil)
        bad = report
        bad.channel = "../x"
        #expect(bad.problem != nil)
        bad = report
        bad.packs = []
        #expect(bad.problem != nil)
        // Nothing in it names a device.
        let text = String(decoding: report.encoded(), as: UTF8.self)
        #expect(!text.contains("install") || text.contains("\"installed\""))
    }
}
