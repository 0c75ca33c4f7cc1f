import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// The primary language on a protected channel (issue 61): it decides which signed localized pack
/// a device keeps, so the release keys sign it with the packs, and the origin serves what they signed.
@Suite("Protected channels: the primary language is signed", .blocking)
struct PrimaryLanguageBindingTests {
    @Test("`--sign` binds the primary language (and says so); a change of the app's setting reaches the protected channel only with a signed release, never through a re-sign; a statement binding another language than the release carries is refused 409 statement_language_differs, nothing stored")
    func thePrimaryLanguageIsSigned() async throws {
        try await withServer(configure: { $0.refreshInterval = 3600 }) { origin in
            try AppStore(folder: DataFolder(origin.data.path)).setPrimaryLanguage(origin.app, "en")
            let lab = try ProtectedLab(origin, label: "depot-primary-language", pack: "core", bytes: bytes(600, seed: 1))
            defer { lab.work.remove() }
            let (app, data, work, trust, root, common) = (origin.app, origin.data.path, lab.work, lab.trust, lab.root, lab.common)
            let depot = lab.depot
            for (id, language, seed) in [("voice-en", "en", 2), ("voice-fr", "fr", 3)] as [(String, String, UInt8)] {
                try FileSystem.writeAtomically(bytes(900, seed: seed), to: work.path + "/\(id)")
                let run = try depot(["publish", id, "--pack", id, "--language", language, "--release", "--channel", "beta", "--quiet"] + common)
                #expect(run.status == 0, "\(run.stderr)")
            }
            try FileSystem.writeAtomically(bytes(600, seed: 1), to: work.path + "/core")
            let release = try TrustFixture.manifest(ProtectedChannelTests.served(origin, channel: "beta").bytes).version
            let promoted = try lab.promote(release)
            #expect(promoted.status == 0 && promoted.stdout.contains("primary language: en ("), "\(promoted.stdout)\(promoted.stderr)")
            let statement = try ReleaseStatement.decode(try #require(ProtectedChannelTests.served(origin).envelope.releases?.first?.payloadBytes))
            #expect(statement.primaryLanguage == "en" && statement.release == release)
            #expect(try ProtectedChannelTests.verified(origin, root: root).manifest.primaryLanguage == "en")

            // The operator switches the app to French: beta's next release carries it, production's
            // re-sign (here: before expiry) keeps the signed English, and devices still take it.
            let changed = try depot(["apps", "language", app, "--primary", "fr", "--data", data])
            #expect(changed.status == 0, "\(changed.stderr)")
            #expect(try origin.server.origin.releases.refresh(app, channel: "production", now: Date().addingTimeInterval(80 * 86_400)))
            let resigned = try ProtectedChannelTests.verified(origin, root: root)
            #expect(resigned.manifest.version > release && resigned.manifest.primaryLanguage == "en" && resigned.signedRelease == release)

            // A statement binding French for the release that carries English is refused.
            let french = try ReleaseStatement(
                app: app, channel: "production", release: release, signedAt: Date(), packs: resigned.manifest.packs, primaryLanguage: "fr"
            ).signed(with: [trust.releaseKeys[0]]).encoded()
            let statements = FileSystem.contents(of: data + "/apps/\(app)/statements/production").sorted()
            let refused = try #require(try RawHTTP.send(port: origin.port, "POST /v1/apps/\(app)/channels/production/statements HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(origin.token)\r\nContent-Type: application/json\r\nContent-Length: \(french.count)\r\nConnection: close\r\n\r\n" + String(decoding: french, as: UTF8.self)).first)
            #expect(refused.status == 409 && refused.bodyText.contains("statement_language_differs") && refused.bodyText.contains("binds primary language fr"), "\(refused.status) \(refused.bodyText)")
            #expect(FileSystem.contents(of: data + "/apps/\(app)/statements/production").sorted() == statements, "nothing stored")

            // The next release made on beta carries French; signed and promoted, production then does.
            try FileSystem.writeAtomically(bytes(950, seed: 4), to: work.path + "/voice-fr")
            #expect(try depot(["publish", "voice-fr", "--pack", "voice-fr", "--language", "fr", "--release", "--channel", "beta", "--quiet"] + common).status == 0)
            let next = try TrustFixture.manifest(ProtectedChannelTests.served(origin, channel: "beta").bytes)
            #expect(next.primaryLanguage == "fr")
            let again = try lab.promote(next.version)
            #expect(again.status == 0 && again.stdout.contains("primary language: fr ("), "\(again.stdout)\(again.stderr)")
            #expect(try ProtectedChannelTests.verified(origin, root: root).manifest.primaryLanguage == "fr")
        }
    }

    @Test("A rollout on a protected channel whose candidate brings the app's first localized packs starts (signed), its manifest names the primary language the candidate's statement binds, and a device verifies it")
    func aRolloutBringsTheFirstLocalizedPacks() async throws {
        try await withServer(configure: { $0.refreshInterval = 3600 }) { origin in
            try AppStore(folder: DataFolder(origin.data.path)).setPrimaryLanguage(origin.app, "en")
            let lab = try ProtectedLab(origin, label: "depot-primary-language-rollout", pack: "core", bytes: bytes(600, seed: 1))
            defer { lab.work.remove() }
            let (work, root, common) = (lab.work, lab.root, lab.common)
            let depot = lab.depot
            try FileSystem.writeAtomically(bytes(600, seed: 1), to: work.path + "/core")
            // Production's release signed: no localized pack.
            let signedMain = try lab.promote(1)
            #expect(signedMain.status == 0, "\(signedMain.stdout)\(signedMain.stderr)")
            #expect(try ProtectedChannelTests.verified(origin, root: root).manifest.primaryLanguage == nil)
            // The first localized pack, on beta, rolled out to half of production.
            try FileSystem.writeAtomically(bytes(900, seed: 2), to: work.path + "/voice-en")
            #expect(try depot(["publish", "voice-en", "--pack", "voice-en", "--language", "en", "--release", "--channel", "beta", "--quiet"] + common).status == 0)
            let candidate = try TrustFixture.manifest(ProtectedChannelTests.served(origin, channel: "beta").bytes).version
            let started = try depot(["rollout", "start", "--release", "\(candidate)", "--fraction", "0.5", "--sign", "release-key.json", "--config", "config.json", "--packs", "."] + common)
            #expect(started.status == 0 && started.stdout.contains("primary language: en ("), "\(started.stdout)\(started.stderr)")
            let verified = try ProtectedChannelTests.verified(origin, root: root)
            #expect(verified.manifest.primaryLanguage == "en" && verified.manifest.rollout?.release == candidate, "\(verified.manifest)")
        }
    }
}
