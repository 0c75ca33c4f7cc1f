import DepotClient
import DepotCore
import DepotHTTP
@testable import DepotServer
import DepotTestSupport
import Foundation
import Logging
import Testing

/// Restores where App Attest meets them: the keys the origin accepted, and their counters.
@Suite("Restores with App Attest keys and counters", .ownThreads)
struct AttestationRestoreTests {
    @Test("A backup taken while a device reports with its attested key, restored: the device goes on signing with the same key (no new key, no second attestation), the restored origin accepts it and its counter continues above the backup's")
    func attestedKeySurvivesARestore() async throws {
        try await AttestingSetup.run { setup in
            let report = try ReporterAttestTests.installed(setup.origin)
            _ = try await setup.sendUntilAttested(report)
            #expect(try await setup.reporter.send(report) == 202)
            let key = try #require(setup.kept?.keyId)
            #expect(try Eventually.wait { (try setup.originKeys().first?.counter ?? 0) >= 2 })
            let work = TemporaryDirectory("depot-attest-restore")
            defer { work.remove() }
            _ = try DataBackup.take(data: setup.origin.data.path, to: work.path + "/backup")
            let atBackup = try #require(try AttestedKeys(folder: DataFolder(work.path + "/backup")).list(app: setup.origin.app).first?.counter)
            // Two more after it: the restored origin never saw them.
            for _ in 0..<2 { #expect(try await setup.reporter.send(report) == 202) }
            #expect(try Eventually.wait { (try setup.originKeys().first?.counter ?? 0) >= atBackup + 2 })
            setup.origin.server.stop()

            let restored = work.path + "/restored"
            let outcome = try DataRestore.restore(backup: work.path + "/backup", into: restored, replace: false)
            #expect(outcome.warnings.isEmpty, "\(outcome.warnings)")
            var configuration = OriginConfiguration(
                dataPath: restored, http: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 2),
                logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
            )
            configuration.patchDepth = 0
            configuration.appAttestAnchor = setup.device.root
            configuration.attestChallengeLifetime = .seconds(3_600)
            let server = try DepotServer(configuration: configuration)
            defer { server.stop() }
            var reporter = DeviceReporter(server: URL(string: "http://127.0.0.1:\(server.port)")!, app: setup.origin.app, attestation: setup.recorder, stateFolder: setup.state.path)
            reporter.timeout = 300
            let callsBefore = setup.recorder.calls.count
            #expect(try await reporter.send(report) == 202)
            #expect(setup.kept?.keyId == key && setup.kept?.attested == true, "the same key, still attested: \(String(describing: setup.kept))")
            #expect(setup.recorder.calls.dropFirst(callsBefore).allSatisfy { if case .generateAssertion(key) = $0 { true } else { false } }, "only signed: \(setup.recorder.calls.dropFirst(callsBefore))")
            let keys = AttestedKeys(folder: DataFolder(restored))
            #expect(try Eventually.wait { (try keys.list(app: setup.origin.app).first?.counter ?? 0) > atBackup + 2 }, "the counter continues above what the backup held")
        }
    }
}
