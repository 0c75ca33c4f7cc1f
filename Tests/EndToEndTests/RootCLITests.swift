import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// `depot root keygen|sign|add|show` as an operator runs them: the root keys in files on one side,
/// the origin's data folder on the other, with the origin running.
@Suite("depot root: a root of trust per app")
struct RootCLITests {
    /// Runs `depot` in `work`, returning the result.
    static func depot(_ arguments: [String], in work: TemporaryDirectory) throws -> Processes.Result {
        try Processes.run(Processes.depotBinary, arguments, cwd: work.path)
    }

    /// `depot root keygen --out NAME`: the public key it prints.
    static func keygen(_ name: String, in work: TemporaryDirectory) throws -> String {
        let made = try depot(["root", "keygen", "--out", name], in: work)
        #expect(made.status == 0, "\(made.stderr)")
        return String(made.stdout.split(separator: "\n").last ?? "")
    }

    static func roots(_ origin: TestOrigin) throws -> [Envelope] {
        let response = try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        return try Envelope.decode(response?.body ?? []).roots ?? []
    }

    @Test("The first root self-signed, then three rotations of the root keys; the live manifest carries every version within seconds, and a device pinning version 1 walks to version 4; a root not signed by the previous root keys, or listing an online key the origin does not hold, is refused and nothing written")
    func chain() async throws {
        try await withServer(configure: { $0.refreshInterval = 3600 }) { origin in
            let work = TemporaryDirectory("depot-root-cli")
            defer { work.remove() }
            let (app, data) = (origin.app, origin.data.path)
            try put(origin, "level", bytes(500, seed: 1))
            try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: work.path + "/config.json")
            let rootKeys = try ["a", "b", "c", "d", "e"].map { try Self.keygen("root-\($0).json", in: work) }
            let release = try Self.keygen("release.json", in: work)

            let first = try Self.depot(["root", "sign", "--app", app, "--key", "root-a.json", "--online-keys-from", "config.json", "--release-key", release, "--out", "root-1.json"], in: work)
            #expect(first.status == 0 && first.stdout.contains("root version 1 of \(app)") && first.stdout.contains("protected: production"), "\(first.stdout)\(first.stderr)")
            let added = try Self.depot(["root", "add", "--data", data, "--app", app, "root-1.json"], in: work)
            #expect(added.status == 0 && added.stdout.contains("added root version 1 of \(app)"), "\(added.stdout)\(added.stderr)")
            // Production serves a release from before the root: devices pinning it need it signed.
            #expect(added.stdout.contains("production: protected, serves release 1, NOT signed"), "\(added.stdout)")
            #expect(try Self.depot(["root", "add", "--data", data, "--app", app, "root-1.json"], in: work).stdout.contains("already added; nothing changed"))
            // The running origin signs the live manifest again with the chain, without a publish.
            #expect(try Eventually.wait { try Self.roots(origin).count == 1 })

            // Three rotations: each signed by the previous root key and the next.
            for (version, (old, new)) in [(2, ("a", "b")), (3, ("b", "c")), (4, ("c", "d"))] {
                let signed = try Self.depot([
                    "root", "sign", "--app", app, "--previous", "root-\(version - 1).json", "--key", "root-\(old).json", "--key", "root-\(new).json",
                    "--root-public-key", rootKeys[version - 1], "--out", "root-\(version).json",
                ], in: work)
                #expect(signed.status == 0, "\(signed.stdout)\(signed.stderr)")
                let add = try Self.depot(["root", "add", "--data", data, "--app", app, "root-\(version).json"], in: work)
                #expect(add.status == 0 && add.stdout.contains("added root version \(version)"), "\(add.stdout)\(add.stderr)")
            }
            #expect(try Eventually.wait { try Self.roots(origin).count == 4 })
            let chain = try Self.roots(origin)
            #expect(try chain.map { try RootDocument.decode($0.payloadBytes ?? []).version } == [1, 2, 3, 4])
            let pinned = try Envelope.decode(FileSystem.readFile(work.path + "/root-1.json"))
            let reached = try ManifestTrust.newestRoot(pinned: pinned, chain: chain, record: nil, app: app, now: Date())
            #expect(reached.document.version == 4 && reached.document.rootKeys == [rootKeys[3]])
            #expect(try origin.clientConfiguration().pinnedRoot() == Envelope.decode(FileSystem.readFile(work.path + "/root-4.json")), "keys export pins the newest root")

            // Not signed by version 4's root keys (root-e alone): `root sign` will not write it...
            let alone = ["root", "sign", "--app", app, "--previous", "root-4.json", "--key", "root-e.json", "--root-public-key", rootKeys[4], "--out", "root-5.json"]
            let unsigned = try Self.depot(alone, in: work)
            // (--previous must be a version one of the --key files signed: a copy from the origin
            // could list a key an attacker added, which the next version would inherit.)
            #expect(unsigned.status != 0 && unsigned.stderr.contains("--previous root-4.json is not signed by any of the --key files given"), "\(unsigned.stderr)")
            #expect(!FileSystem.exists(work.path + "/root-5.json"))
            // ...and written anyway (--partial), `root add` refuses it.
            #expect(try Self.depot(alone + ["--partial"], in: work).status == 0)
            let refused = try Self.depot(["root", "add", "--data", data, "--app", app, "root-5.json"], in: work)
            #expect(refused.status != 0 && refused.stderr.contains("signed by 0 of version 4's root keys") && refused.stderr.contains("Nothing was added"), "\(refused.stderr)")
            // An online key the origin does not hold: it could never sign with it.
            let stranger = OfflineKeyFile.publicText(Ed25519PrivateKey().publicKey)
            let foreign = try Self.depot(["root", "sign", "--app", app, "--previous", "root-4.json", "--key", "root-d.json", "--online-key", stranger, "--out", "foreign.json"], in: work)
            #expect(foreign.status == 0, "\(foreign.stderr)")
            let unknown = try Self.depot(["root", "add", "--data", data, "--app", app, "foreign.json"], in: work)
            #expect(unknown.status != 0 && unknown.stderr.contains("does not hold in force") && unknown.stderr.contains("--online-keys-from"), "\(unknown.stderr)")
            // Out of order: version 6 after 4.
            let gap = try Self.depot(["root", "sign", "--app", app, "--previous", "root-4.json", "--key", "root-d.json", "--out", "root-5b.json"], in: work)
            #expect(gap.status == 0)
            let six = try Self.depot(["root", "sign", "--app", app, "--previous", "root-5b.json", "--key", "root-d.json", "--out", "root-6.json"], in: work)
            #expect(six.status == 0)
            let skipped = try Self.depot(["root", "add", "--data", data, "--app", app, "root-6.json"], in: work)
            #expect(skipped.status != 0 && skipped.stderr.contains("the next is 5"), "\(skipped.stderr)")
            #expect(FileSystem.contents(of: data + "/apps/\(app)/roots").filter { $0.hasSuffix(".json") } == ["000001.json", "000002.json", "000003.json", "000004.json"])

            let show = try Self.depot(["root", "show", "--data", data, "--app", app], in: work)
            #expect(show.status == 0 && show.stdout.contains("version 4 (newest)") && show.stdout.contains("root keys (1 of 1): ed25519:"), "\(show.stdout)")
            #expect(show.stdout.contains("(in force here)") && show.stdout.contains("protected channels: production"), "\(show.stdout)")
        }
    }
}
