import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// The `attestedReports` sequence: reports signed by a key attested in the base state, in two
/// batches of three, each batch waited for until the report writer's pass has written it (the
/// key's counter appended to `attest/counters.log`, then the day's counts). Killed at each crash
/// point of those passes: after the restart, no report counts twice — each report the origin
/// counted has its counter in the journal, so its replay is refused (`409 stale_counter`).
extension OriginCrashLab {
    /// The base state's key: attested over HTTP by the lab's device on a copy of the base state,
    /// which becomes the base state.
    func attestReportKey() async throws {
        try CrashSeam.copy(base, to: data)
        let server = try start()
        let (keyID, status) = try await attestKey(server.port)
        stop(server, gracefully: true)
        try #require(status == 201, "the base state's key must be attested")
        reportKey = keyID
        try CrashSeam.copy(data, to: base)
    }

    private var journal: String { data + "/apps/\(app)/attest/counters.log" }

    /// The bytes of the day's counts (logs and snapshots) in the reports folder.
    private func reportBytes() -> Int64 {
        let folder = data + "/apps/\(app)/reports"
        return FileSystem.contents(of: folder).reduce(0) { $0 + (FileSystem.fileSize(folder + "/" + $1) ?? 0) }
    }

    /// The step: two batches of three signed reports; after each, waits until the writer has
    /// appended the batch's last counter to the journal and written counts (or the origin died at
    /// its crash point).
    func stepAttestedReports(trace: String?, crash: (point: Int, mode: CrashSeam.Mode, backup: String)?) async throws -> [Ack] {
        var environment: [String: String] = trace.map { ["DEPOT_CRASH_TRACE": $0] } ?? [:]
        if let crash { environment = CrashSeam.environment(at: crash.point, mode: crash.mode, backup: crash.backup) }
        let server = try start(environment)
        defer { stop(server, gracefully: crash != nil) }
        let device = try #require(attestDevice)
        let keyHex = Hex.encode(Array(try #require(Data(base64Encoded: reportKey))))
        var acks: [Ack] = []
        for batch in 0..<2 {
            let before = reportBytes()
            for index in 0..<3 {
                let report = DeviceReport(channel: "production", release: 2, packs: [.init(id: "level", revision: 1, outcome: .installed, bytes: Int64(1_000 + 3 * batch + index))])
                let body = report.encoded()
                let assertion = try await device.generateAssertion(reportKey, clientDataHash: Data(SHA256Hasher.hash(body)))
                assertions += 1
                let headers = ["Content-Type: application/json", "X-Depot-Attest-Key: \(reportKey)", "X-Depot-Assertion: \(assertion.base64EncodedString())"]
                // Recorded before it is sent: a report the origin counted and never answered is replayed too.
                acks.append(.attestedReport(body: body, headers: headers))
                let sent = call(server.port, "POST", "/v1/apps/\(app)/reports", body: body, headers: headers)
                if trace != nil { #expect(sent?.status == 202, "\(sent.map { "\($0.status) " + String(decoding: $0.body, as: UTF8.self) } ?? "no answer")") }
                guard sent != nil else { return acks }
            }
            // The writer's pass (within a second): the batch's last counter, then its counts.
            let line = "\(keyHex) \(assertions)\n"
            var written = false
            // Waited for as long as the origin lives (the bound only keeps a broken build from hanging).
            let start = ContinuousClock.now
            while server.process.isRunning && ContinuousClock.now - start < Eventually.hangBound {
                let logged = (try? FileSystem.readText(journal))?.contains(line) ?? false
                if logged && reportBytes() > before {
                    written = true
                    break
                }
                usleep(20_000)
            }
            if trace != nil { #expect(written, "the report writer never wrote the batch's counter and counts") }
            guard written else { return acks }
        }
        return acks
    }

    /// After the restart: the reports counted (read from disk by the restarted origin), plus
    /// those of the sent reports its replay is accepted again, are at most the reports sent; every
    /// replay not accepted is `409 stale_counter`.
    func checkAttestedReports(_ acks: [Ack], port: String, _ what: String, expect: (Bool, @autoclosure () -> String) -> Void) {
        let sent = acks.compactMap { ack -> (body: [UInt8], headers: [String])? in
            if case .attestedReport(let body, let headers) = ack { (body, headers) } else { nil }
        }
        guard !sent.isEmpty else { return }
        let fleet = call(port, "GET", "/v1/apps/\(app)/fleet?channel=production", token: token)
        expect(fleet?.status == 200, "\(what): the fleet answers \(fleet?.status ?? 0)")
        let object = fleet.flatMap { try? JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any] } ?? [:]
        let counted = ((object["reports"] as? [Any]) ?? []).reduce(0) { $0 + ((($1 as? NSNumber)?.intValue) ?? 0) }
        var accepted = 0
        for report in sent {
            let again = call(port, "POST", "/v1/apps/\(app)/reports", body: report.body, headers: report.headers)
            if again?.status == 202 {
                accepted += 1
            } else {
                let body = again.map { String(decoding: $0.body, as: UTF8.self) } ?? "no answer"
                expect(again?.status == 409 && body.contains("stale_counter"), "\(what): a replay answered \(again?.status ?? 0): \(body)")
            }
        }
        expect(
            counted + accepted <= sent.count,
            "\(what): \(counted) reports counted after the restart, and \(accepted) of the \(sent.count) sent accepted again: a report counts twice (its counter lost, its count kept)"
        )
    }
}
