import DepotClient
import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Manifest signing keys outlive the builds that pin them: a rotation keeps the old key
/// co-signing until the operator retires it, never on a date nobody chose.
@Suite("Signing keys: rotation without a deadline, retirement by the operator")
struct SigningRetirementTests {
    @Test("`depot keys rotate-signing` keeps the old key co-signing past 90 days: a build exported before it still syncs a manifest re-signed 91 days on; `retire-signing` ends it (refused while an app's root lists no other key in force), and the build is refused")
    func rotationWithoutDeadline() async throws {
        try await withServer(configure: { $0.refreshInterval = 3600 }) { origin in
            let work = TemporaryDirectory("depot-signing-retire")
            defer { work.remove() }
            let data = origin.data.path
            func depot(_ arguments: [String]) throws -> Processes.Result { try Processes.run(Processes.depotBinary, arguments + ["--data", data]) }
            try put(origin, "level", bytes(600, seed: 5))
            let oldBuild = try origin.clientConfiguration()
            let oldID = try ManifestSigningKey.keyID(for: #require(oldBuild.trustedKeys().first))
            // A root listing only today's key (no channel protected: this is about online keys).
            let trust = TrustFixture(app: origin.app)
            try trust.addRoot(dataPath: data, protect: [])

            let rotated = try depot(["keys", "rotate-signing"])
            #expect(rotated.status == 0 && rotated.stdout.contains("co-signs until you retire it"), "\(rotated.stdout)\(rotated.stderr)")
            let later = Date().addingTimeInterval(91 * 86_400)
            let apps = AppStore(folder: DataFolder(data))
            #expect(try apps.signingKeys(now: later).map { ManifestSigningKey.keyID(for: $0.publicKey) }.contains(oldID), "the old key is still in force 91 days on")
            // 91 days on, the origin re-signs the live manifest (it would expire): with the old key too.
            #expect(try origin.server.origin.releases.refresh(origin.app, channel: "production", now: later))
            let served = try Envelope.decode(try #require(try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first).body)
            #expect(served.signatures.count == 2)
            #expect(try Manifest.decode(served.payloadBytes ?? []).publishedAt >= later.addingTimeInterval(-1))
            let report = try await DepotSync(server: origin.baseURL, configuration: oldBuild, destination: work.path + "/old").run()
            #expect(report.installed == ["level"])

            let listed = try depot(["keys", "list-signing"])
            #expect(listed.stdout.split(separator: "\n").count == 2 && listed.stdout.contains(oldID + "\t") && !listed.stdout.contains("retired"), "\(listed.stdout)")
            // The old build reports the manifest key it pins; retire-signing counts it from the report files.
            let body = "{\"channel\":\"production\",\"release\":1,\"packs\":[{\"id\":\"level\",\"revision\":1,\"outcome\":\"installed\",\"bytes\":10}],\"manifestKeys\":[\"\(oldID)\"]}"
            let post = "POST /v1/apps/\(origin.app)/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n" + body
            #expect(try RawHTTP.send(port: origin.port, post).first?.status == 202)
            var asked = try depot(["keys", "retire-signing", oldID])
            #expect(try Eventually.wait {
                asked = try depot(["keys", "retire-signing", oldID])
                return asked.stdout.contains("\(origin.app): 1 of 1 reports in the last 7 days that name manifest keys come from builds that pin none of the keys left in force")
            }, "\(asked.stdout)")
            #expect(asked.status != 0 && asked.stdout.contains("stop accepting manifests") && asked.stdout.contains("depot fleet") && asked.stderr.contains("--yes"), "\(asked.stdout)\(asked.stderr)")
            let needed = try depot(["keys", "retire-signing", oldID, "--yes"])
            #expect(needed.status != 0 && needed.stderr.contains("root (version 1) lists no other online key in force"), "\(needed.stderr)")
            // The next root lists both keys in force; then the old one may go.
            _ = try RootAdmin(dataPath: data).add(try trust.root(version: 2, dataPath: data, protect: []).encoded(), app: origin.app)
            let retired = try depot(["keys", "retire-signing", oldID, "--yes"])
            #expect(retired.status == 0 && retired.stdout.contains("retired \(oldID)"), "\(retired.stdout)\(retired.stderr)")
            #expect(try depot(["keys", "list-signing"]).stdout.contains("retired "))
            // The running origin signs without it within seconds; the old build is refused.
            #expect(try Eventually.wait {
                let answer = try RawHTTP.send(port: origin.port, "GET /v1/apps/\(origin.app)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
                return try Envelope.decode(answer?.body ?? []).signatures.map(\.keyid) == [try origin.clientConfiguration().trustedKeys().map(ManifestSigningKey.keyID).last!]
            })
            await #expect(throws: ClientError.self) {
                try await DepotSync(server: origin.baseURL, configuration: oldBuild, destination: work.path + "/old").run()
            }
            let last = try origin.clientConfiguration().trustedKeys().map(ManifestSigningKey.keyID)
            #expect(last.count == 1)
            let alone = try depot(["keys", "retire-signing", last[0], "--yes"])
            #expect(alone.status != 0 && alone.stderr.contains("only signing key in force"), "\(alone.stderr)")
        }
    }

    @Test("`--grace-days N` stays an explicit choice: the old key retires after N days")
    func explicitGrace() async throws {
        let data = TemporaryDirectory("depot-signing-grace")
        defer { data.remove() }
        try prepareDataFolder(data.path, app: "com.example.game")
        let apps = AppStore(folder: DataFolder(data.path))
        let old = ManifestSigningKey.keyID(for: try apps.signingKey().publicKey)
        let result = try Processes.run(Processes.depotBinary, ["keys", "rotate-signing", "--grace-days", "30", "--data", data.path])
        #expect(result.status == 0 && result.stdout.contains("co-signs for 30 days"), "\(result.stdout)\(result.stderr)")
        #expect(try apps.signingKeys(now: Date().addingTimeInterval(29 * 86_400)).map { ManifestSigningKey.keyID(for: $0.publicKey) }.contains(old))
        #expect(try !apps.signingKeys(now: Date().addingTimeInterval(31 * 86_400)).map { ManifestSigningKey.keyID(for: $0.publicKey) }.contains(old))
    }
}
