import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// `POST /v1/apps/{app}/channels/{channel}/statements`: what the origin keeps for a protected
/// channel, and every way a statement is refused (nothing stored).
@Suite("Release statements: the route")
struct StatementRouteTests {
    static func post(_ origin: TestOrigin, _ envelope: Envelope, channel: String = "production") throws -> RawHTTP.Response {
        try postBytes(origin, envelope.encoded(), channel: channel)
    }

    static func postBytes(_ origin: TestOrigin, _ body: [UInt8], channel: String = "production") throws -> RawHTTP.Response {
        try request(origin, "POST", "/v1/apps/\(origin.app)/channels/\(channel)/statements", headers: ["Authorization: Bearer \(origin.token)"], body: body)
    }

    static func packs(_ origin: TestOrigin, release: Int) throws -> [PackEntry] {
        try TrustFixture.manifest(try request(origin, "GET", "/v1/apps/\(origin.app)/releases/\(release)").body).packs
    }

    static func stored(_ origin: TestOrigin, channel: String = "production") -> [String] {
        FileSystem.contents(of: origin.data.path + "/apps/\(origin.app)/statements/\(channel)").filter { !$0.hasSuffix(".lock") }
    }

    @Test("Refused with the reason and nothing stored: no root, not a statement, bad signature, below threshold, another app, another channel, other packs, no such release; accepted at the threshold, and the one with more signatures kept")
    func refusals() async throws {
        try await withServer { origin in
            let trust = TrustFixture(app: origin.app, releaseKeys: 3, releaseThreshold: 2)
            #expect(try upload(origin, pack: "level", [1, 2, 3], query: "?channel=beta").status == 201)
            let packs = try Self.packs(origin, release: 1)
            let good = try trust.statement(release: 1, packs: packs)

            let noRoot = try Self.post(origin, good)
            #expect(noRoot.status == 409 && noRoot.bodyText.contains("no_root") && noRoot.bodyText.contains("depot root add"), "\(noRoot.bodyText)")
            try trust.addRoot(dataPath: origin.data.path)

            let garbage = try Self.postBytes(origin, Array("{\"release\":1}".utf8))
            #expect(garbage.status == 400 && garbage.bodyText.contains("not a signed release statement"), "\(garbage.bodyText)")
            let strangers = try trust.statement(release: 1, packs: packs, keys: [Ed25519PrivateKey(), Ed25519PrivateKey()])
            let unsigned = try Self.post(origin, strangers)
            #expect(unsigned.status == 422 && unsigned.bodyText.contains("statement_refused") && unsigned.bodyText.contains("signed by 0 of"), "\(unsigned.bodyText)")
            var forged = good
            forged.signatures = forged.signatures.map { Envelope.Signature(keyid: $0.keyid, sig: Data(repeating: 7, count: 64).base64EncodedString()) }
            #expect(try Self.post(origin, forged).bodyText.contains("signed by 0 of"))
            let one = try Self.post(origin, try trust.statement(release: 1, packs: packs, keys: [trust.releaseKeys[0]]))
            #expect(one.status == 422 && one.bodyText.contains("signed by 1 of") && one.bodyText.contains("needs 2"), "\(one.bodyText)")
            let otherApp = try Self.post(origin, try trust.statement(release: 1, packs: packs, app: "com.example.other"))
            #expect(otherApp.status == 422 && otherApp.bodyText.contains("com.example.other"), "\(otherApp.bodyText)")
            let forBeta = try Self.post(origin, try trust.statement(release: 1, packs: packs, channel: "beta"))
            #expect(forBeta.status == 422 && forBeta.bodyText.contains("statement_wrong_channel") && forBeta.bodyText.contains("signed for channel beta"), "\(forBeta.bodyText)")
            var changed = packs
            changed[0].sha256 = String(repeating: "0", count: 64)
            let differs = try Self.post(origin, try trust.statement(release: 1, packs: changed))
            #expect(differs.status == 409 && differs.bodyText.contains("statement_packs_differ") && differs.bodyText.contains("binds other packs than release 1"), "\(differs.bodyText)")
            #expect(try Self.post(origin, try trust.statement(release: 9, packs: packs)).status == 404)
            let noToken = try request(origin, "POST", "/v1/apps/\(origin.app)/channels/production/statements", body: good.encoded())
            #expect(noToken.status == 401)
            #expect(Self.stored(origin).isEmpty, "a refused statement is not stored")

            func answer(_ response: RawHTTP.Response) throws -> RootStore.AcceptedStatement {
                #expect(response.status == 201, "\(response.bodyText)")
                return try JSONDecoder().decode(RootStore.AcceptedStatement.self, from: Data(response.body))
            }
            let accepted = try answer(Self.post(origin, good))
            #expect((accepted.release, accepted.channel, accepted.signers, accepted.threshold) == (1, "production", 2, 2))
            #expect(Self.stored(origin) == ["000001.json"])
            let all = try trust.statement(release: 1, packs: packs, keys: trust.releaseKeys)
            #expect(try answer(Self.post(origin, all)).signers == 3)
            #expect(try answer(Self.post(origin, good)).signers == 3, "the statement with more signatures is kept")
            let kept = try Envelope.decode(FileSystem.readFile(origin.data.path + "/apps/\(origin.app)/statements/production/000001.json"))
            #expect(kept.signatures.count == 3)
        }
    }

    @Test("An app without a root serves envelopes without roots or releases, byte for byte as before")
    func noRootNoAttachments() async throws {
        try await withServer { origin in
            #expect(try upload(origin, pack: "level", [1, 2, 3]).status == 201)
            let served = try request(origin, "GET", "/v1/apps/\(origin.app)/manifest").bodyText
            #expect(!served.contains("\"roots\"") && !served.contains("\"releases\""))
            #expect(served.hasPrefix("{\"payload\":") && served.contains("\"signatures\":["))
        }
    }
}
