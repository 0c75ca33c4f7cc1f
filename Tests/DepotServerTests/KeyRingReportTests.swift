import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Device reports name the key ring a build holds (ids, never keys), and the fleet says how many
/// reports come from builds without the current and each staged pack key, and without the newest
/// manifest signing key: what an operator reads before retiring a key (issue 52).
@Suite("Device reports: key rings counted, and the fleet's keys section")
struct KeyRingReportTests {
    /// A report as an app sends it: raw JSON, so that what older and newer builds send is what is tested.
    static func report(_ origin: TestOrigin, revision: Int, release: Int = 1, extra: String = "") throws -> RawHTTP.Response {
        let body = "{\"channel\":\"production\",\"release\":\(release),\"packs\":[{\"id\":\"level\",\"revision\":\(revision),\"outcome\":\"installed\",\"bytes\":10}]\(extra)}"
        return try request(origin, "POST", "/v1/apps/\(origin.app)/reports", headers: ["Content-Type: application/json"], body: Array(body.utf8))
    }

    static func list(_ ids: [String]) -> String { "[" + ids.map { "\"\($0)\"" }.joined(separator: ",") + "]" }

    /// `GET …/fleet?days=7`'s keys section.
    static func keys(_ origin: TestOrigin) throws -> [String: Any] {
        let response = try request(origin, "GET", "/v1/apps/\(origin.app)/fleet?days=7", headers: ["Authorization: Bearer \(origin.token)"])
        #expect(response.status == 200, "\(response.bodyText)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])
        return try #require(object["keys"] as? [String: Any], "the fleet has a keys section: \(response.bodyText)")
    }

    /// One kind's figures: id → (state, with, without), and the reports that name no ring.
    static func figures(_ keys: [String: Any], _ kind: String) throws -> (byID: [String: (state: String, with: Int, without: Int)], unnamed: Int) {
        let section = try #require(keys[kind] as? [String: Any], "\(keys)")
        var byID: [String: (state: String, with: Int, without: Int)] = [:]
        for case let key as [String: Any] in section["keys"] as? [Any] ?? [] {
            byID[key["id"] as? String ?? ""] = (key["state"] as? String ?? "", key["with"] as? Int ?? -1, key["without"] as? Int ?? -1)
        }
        return (byID, section["unnamed"] as? Int ?? -1)
    }

    static func manifestKeyID(_ origin: TestOrigin) throws -> String {
        ManifestSigningKey.keyID(for: try AppStore(folder: DataFolder(origin.data.path)).signingKey().publicKey)
    }

    @Test("Reports naming packKeys and manifestKeys are counted by ring; the fleet says, for the current and the staged pack key and the newest manifest key, how many reports come from builds with and without it; older reports name no ring; a restart keeps the counts")
    func countedByRing() async throws {
        let data = TemporaryDirectory("depot-key-rings")
        defer { data.remove() }
        let token = try prepareDataFolder(data.path, app: "com.example.game")
        var server = try startServer(dataPath: data.path)
        defer { server.stop() }
        var origin = TestOrigin(server: server, data: data, app: "com.example.game", token: token)
        #expect(try upload(origin, pack: "level", Array(repeating: 1, count: 100)).status == 201)
        let revision = try #require(try liveManifest(origin)[pack: "level"]?.revision)
        let apps = AppStore(folder: DataFolder(data.path))
        let k1 = try apps.packKeys(origin.app).current
        let k2 = try apps.rotatePackKey(origin.app)
        let signing = try Self.manifestKeyID(origin)
        let other = "ed25519:00112233445566ff"
        for _ in 0..<3 { #expect(try Self.report(origin, revision: revision, extra: ",\"packKeys\":\(Self.list([k1])),\"manifestKeys\":\(Self.list([other]))").status == 202) }
        for _ in 0..<2 { #expect(try Self.report(origin, revision: revision, extra: ",\"packKeys\":\(Self.list([k2, k1])),\"manifestKeys\":\(Self.list([signing, other]))").status == 202) }
        #expect(try Self.report(origin, revision: revision).status == 202, "a report of a build from before key rings")

        func check(_ when: String) throws {
            let keys = try Self.keys(origin)
            let pack = try Self.figures(keys, "pack")
            #expect(pack.byID[k1]?.state == "current" && pack.byID[k1]?.with == 5 && pack.byID[k1]?.without == 0, "\(when): \(keys)")
            #expect(pack.byID[k2]?.state == "staged" && pack.byID[k2]?.with == 2 && pack.byID[k2]?.without == 3, "\(when): \(keys)")
            #expect(pack.byID.count == 2 && pack.unnamed == 1, "\(when): \(keys)")
            let manifest = try Self.figures(keys, "manifest")
            #expect(manifest.byID[signing]?.state == "newest" && manifest.byID[signing]?.with == 2 && manifest.byID[signing]?.without == 3, "\(when): \(keys)")
            #expect(manifest.unnamed == 1, "\(when): \(keys)")
        }
        try check("counted")
        // Stopped (its counts written) and started again: the same figures, from the data folder.
        server.stop()
        server = try startServer(dataPath: data.path)
        origin = TestOrigin(server: server, data: data, app: "com.example.game", token: token)
        try check("after a restart")
    }

    @Test("A report naming more than 32 pack keys, an invalid or repeated key id, more than 8 manifest keys or a manifest key id that is not one is refused 400 and not counted")
    func refused() async throws {
        try await withServer { origin in
            #expect(try upload(origin, pack: "level", Array(repeating: 1, count: 100)).status == 201)
            let revision = try #require(try liveManifest(origin)[pack: "level"]?.revision)
            let many = (0..<33).map { String(format: "k%08x", $0) }
            let cases: [(String, String)] = [
                (",\"packKeys\":\(Self.list(many))", "more than 32"),
                (",\"packKeys\":\(Self.list(["k1", "bad/id"]))", "key id"),
                (",\"packKeys\":\(Self.list(["k1", "k1"]))", "twice"),
                (",\"manifestKeys\":\(Self.list((0..<9).map { String(format: "ed25519:%016x", $0) }))", "more than 8"),
                (",\"manifestKeys\":\(Self.list(["k1"]))", "manifest key id"),
                (",\"manifestKeys\":\(Self.list(["ed25519:00112233"]))", "manifest key id"),
            ]
            for (extra, why) in cases {
                let response = try Self.report(origin, revision: revision, extra: extra)
                #expect(response.status == 400 && response.bodyText.contains(why), "\(extra): \(response.status) \(response.bodyText)")
            }
            #expect(try Self.report(origin, revision: revision, extra: ",\"packKeys\":\(Self.list(Array(many.prefix(32))))").status == 202, "32 keys is the most")
            let keys = try Self.keys(origin)
            let pack = try Self.figures(keys, "pack")
            let current = try AppStore(folder: DataFolder(origin.data.path)).packKeys(origin.app).current
            #expect(pack.byID[current]?.without == 1 && pack.byID[current]?.with == 0 && pack.unnamed == 0, "only the valid report counts: \(keys)")
        }
    }

    @Test("Distinct key rings kept per channel and day are bounded (64): past it a report counts as another ring, which the fleet shows as naming none; a ring already kept still counts as itself")
    func ringsBounded() async throws {
        try await withServer(configure: { $0.reportRatePerAddress = 1_000_000; $0.reportRateTotal = 1_000_000 }) { origin in
            #expect(try upload(origin, pack: "level", Array(repeating: 1, count: 100)).status == 201)
            let revision = try #require(try liveManifest(origin)[pack: "level"]?.revision)
            for index in 0...64 {
                #expect(try Self.report(origin, revision: revision, extra: ",\"packKeys\":[\"" + String(format: "k%08x", index + 1) + "\"]").status == 202)
            }
            #expect(try Self.report(origin, revision: revision, extra: ",\"packKeys\":[\"k00000001\"]").status == 202)
            let keys = try Self.keys(origin)
            let pack = try Self.figures(keys, "pack")
            let current = try AppStore(folder: DataFolder(origin.data.path)).packKeys(origin.app).current
            #expect(pack.byID[current]?.without == 65 && pack.unnamed == 1, "\(keys)")
        }
    }
}

extension KeyRingReportTests {
    @Test("A day keeps at most 64 rings per kind and channel and 1,024 in all; the rest count as another ring; the day's log and its compaction keep every count")
    func dayBound() throws {
        let work = TemporaryDirectory("depot-key-ring-day")
        defer { work.remove() }
        let folder = work.path + "/reports"
        var day = try ReportDayFile.load(folder: folder, day: "2026-11-26") { _ in Issue.record("nothing to read aside") }
        for channel in 0..<20 {
            for ring in 0..<70 {
                day.addReport(channel: "c\(channel)")
                day.addRing(.pack, channel: "c\(channel)", ids: [String(format: "k%08x", ring)])
            }
        }
        day.addRing(.manifest, channel: "c0", ids: ["ed25519:00112233445566ff"])
        let kept = day.rings.filter { $0.key.ring != KeyRingCounts.other }
        #expect(kept.count == KeyRingCounts.ringsPerDayInAll && kept.values.allSatisfy { $0 == 1 })
        #expect(day.rings[KeyRingCounts.Key(kind: .pack, channel: "c0", ring: KeyRingCounts.other)] == 6, "past 64 on one channel")
        #expect(day.rings[KeyRingCounts.Key(kind: .pack, channel: "c19", ring: KeyRingCounts.other)] == 70, "past 1,024 in all")
        #expect(day.rings[KeyRingCounts.Key(kind: .manifest, channel: "c0", ring: KeyRingCounts.other)] == 1)
        try ReportDayFile.append(&day, folder: folder)
        #expect(try ReportDayFile.read(folder: folder, day: "2026-11-26").figures == day.figures, "the log keeps them")
        try ReportDayFile.compact(&day, folder: folder)
        let read = try ReportDayFile.read(folder: folder, day: "2026-11-26")
        #expect(read.figures == day.figures, "the snapshot keeps them")
        var tally = KeyRingTally()
        tally.add(read.figures, channels: ["c0"])
        #expect(tally.figures("pack", key: "k00000000") == (with: 1, without: 63, unnamed: 6))
    }
}

@Suite("Pack keys: the key file's forms")
struct PackKeyFileTests {
    @Test("The first form of keys/<app>.json (current and keys, nothing staged or retired) is read as it was: its current key encrypts new packs, its other keys count as retired, a rotation stages the next one")
    func firstForm() async throws {
        try await withServer { origin in
            let apps = AppStore(folder: DataFolder(origin.data.path))
            let path = origin.data.path + "/keys/\(origin.app).json"
            let current = try apps.packKeys(origin.app).current
            let old = "k0ld0000"
            let stored = try #require(try JSONSerialization.jsonObject(with: Data(FileSystem.readFile(path))) as? [String: Any])
            let keys = try #require(stored["keys"] as? [String: String])
            let first = "{\"current\":\"\(current)\",\"keys\":{\"\(current)\":\"\(keys[current]!)\",\"\(old)\":\"\(Data(repeating: 7, count: 32).base64EncodedString())\"}}\n"
            try FileSystem.writeAtomically(Array(first.utf8), to: path)

            #expect(try upload(origin, pack: "level", Array(repeating: 1, count: 100)).status == 201)
            #expect(try liveManifest(origin)[pack: "level"]?.keyID == current)
            #expect(try apps.packKeys(origin.app).ring[old] != nil, "the ring still holds the older key (older packs, patches)")
            // Exported: the current key; the older one only while a live pack uses it (none does).
            #expect(Set(try origin.clientConfiguration().packKeys.keys) == [current])
            let staged = try apps.rotatePackKey(origin.app)
            #expect(try apps.packKeys(origin.app).current == current, "a rotation stages the next key")
            #expect(Set(try origin.clientConfiguration().packKeys.keys) == [current, staged])
            #expect(try upload(origin, pack: "level", Array(repeating: 2, count: 100)).status == 201)
            #expect(try liveManifest(origin)[pack: "level"]?.keyID == current)
        }
    }
}
