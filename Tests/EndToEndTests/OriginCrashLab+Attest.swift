import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// The `attest` sequence: two keys of a device attested over HTTP one after the other (the
/// origin stores each before its `201`; the second's crash points are where a power cut tests
/// the first's durability), then `depot attest revoke` of the first beside the running origin. Killed at each crash
/// point of both processes, numbered across them: after the restart an acknowledged key is
/// listed, a revocation that exited 0 holds, and the restarted origin knows the key (`409`).
extension OriginCrashLab {
    var attestAnchor: String { work.path + "/attest-anchor.der" }

    /// The lab's test device, and its CA's root as the origin's anchor (before the origin starts).
    func makeAttestDevice() throws {
        let device = try TestAppAttest(appID: Self.attestAppID)
        attestDevice = device
        try FileSystem.writeAtomically(device.root, to: attestAnchor)
    }

    /// The base state: the app takes App Attest keys of the lab's test device.
    func prepareAttest() throws {
        let configured = try Processes.run(Processes.depotBinary, ["attest", "configure", "--data", data, "--app", app, "--app-id", Self.attestAppID])
        #expect(configured.status == 0, "\(configured.stderr)")
    }

    static let attestAppID = "ABCDE12345.com.example.dev"

    /// Attests a new key of the device over a fresh challenge; its key id when answered 201.
    func attestKey(_ port: String) async throws -> (keyID: String, status: Int?) {
        let device = try #require(attestDevice)
        let keyID = try await device.generateKey()
        guard let answer = call(port, "POST", "/v1/apps/\(app)/attest/challenges"), answer.status == 201,
              let object = try? JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any],
              let text = object["challenge"] as? String, let challenge = Data(base64Encoded: text) else { return (keyID, nil) }
        let attestation = try await device.attestKey(keyID, clientDataHash: Data(SHA256Hasher.hash(Array(challenge))))
        let body = #"{"keyId":"\#(keyID)","challenge":"\#(text)","attestation":"\#(attestation.base64EncodedString())"}"#
        return (keyID, call(port, "POST", "/v1/apps/\(app)/attest/keys", body: Array(body.utf8), headers: ["Content-Type: application/json"])?.status)
    }

    /// The step: the origin (its crash points first), then the command. With `trace`, counts
    /// the origin's points (``attestServerPoints``) and appends both processes' to `trace`.
    func stepAttest(trace: String?, crash: (point: Int, mode: CrashSeam.Mode, backup: String)?) async throws -> [Ack] {
        var acks: [Ack] = []
        let own = work.path + "/server-trace"
        FileSystem.remove(own)
        var environment: [String: String] = trace != nil ? ["DEPOT_CRASH_TRACE": own] : [:]
        if let crash, crash.point <= attestServerPoints { environment = CrashSeam.environment(at: crash.point, mode: crash.mode, backup: crash.backup) }
        let server = try start(environment)
        defer { stop(server, gracefully: crash != nil) }
        let (keyID, status) = try await attestKey(server.port)
        if status == 201 { acks.append(.attestedKey(keyID)) }
        let (second, secondStatus) = status == 201 ? try await attestKey(server.port) : ("", nil)
        if secondStatus == 201 { acks.append(.attestedKey(second)) }
        if let trace {
            #expect(status == 201 && secondStatus == 201, "the attestations must be accepted when nothing crashes")
            attestServerPoints = CrashSeam.trace(own).count
            try FileSystem.writeAtomically(Array(CrashSeam.trace(own).map { $0 + "\n" }.joined().utf8), to: trace)
        }
        // The command runs only if the origin lived through its crash points (as a script stops with its machine).
        let left = crash.map { $0.point - attestServerPoints }
        guard secondStatus == 201, left.map({ $0 > 0 }) ?? true else { return acks }
        let commandTrace = work.path + "/process-trace"
        FileSystem.remove(commandTrace)
        var commandEnvironment = ["DEPOT_CRASH_TRACE": commandTrace]
        if let crash, let left { commandEnvironment.merge(CrashSeam.environment(at: left, mode: crash.mode, backup: crash.backup)) { $1 } }
        let revoked = try Processes.run(Processes.depotBinary, ["attest", "revoke", "--data", data, "--app", app, keyID], environment: commandEnvironment)
        let lines = CrashSeam.trace(commandTrace)
        if let trace {
            let previous = (try? FileSystem.readFile(trace)) ?? []
            try FileSystem.writeAtomically(previous + Array(lines.map { $0 + "\n" }.joined().utf8), to: trace)
            #expect(revoked.status == 0, "\(revoked.stderr)")
        }
        // Killed at a point (left ≤ its points): not acknowledged. Cut at its exit, one past its
        // last point: it had finished, and said so.
        if revoked.status == 0 || left.map({ $0 == lines.count + 1 }) == true, left.map({ $0 > lines.count }) ?? true {
            acks.append(.keyRevoked(keyID))
        }
        return acks
    }

    /// After the restart: an acknowledged key is listed (revoked when that was acknowledged), the
    /// restarted origin refuses to attest it again, no temporary file is left in `attest/`, and
    /// every key file there reads.
    func checkAttest(_ acks: [Ack], port: String, _ what: String, expect: (Bool, @autoclosure () -> String) -> Void) throws {
        let listed = try Processes.run(Processes.depotBinary, ["attest", "list", "--data", data, "--app", app])
        expect(listed.status == 0, "\(what): depot attest list fails: \(listed.stderr)")
        let folder = data + "/apps/\(app)/attest"
        expect(!FileSystem.contents(of: folder).contains { $0.hasPrefix(".tmp-") }, "\(what): a temporary file survived the start in \(folder)")
        for ack in acks {
            switch ack {
            case .attestedKey(let keyID):
                let line = listed.stdout.split(separator: "\n").first { $0.hasPrefix(keyID + "\t") }
                expect(line != nil, "\(what): the acknowledged key \(keyID) is not listed:\n\(listed.stdout)")
                // The origin knows it after the restart: attesting it again is 409 (before any verification).
                let body = #"{"keyId":"\#(keyID)","challenge":"\#(challenge(port) ?? "")","attestation":"AAAA"}"#
                let again = call(port, "POST", "/v1/apps/\(app)/attest/keys", body: Array(body.utf8))
                expect(again?.status == 409, "\(what): the restarted origin does not know the acknowledged key \(keyID): \(again?.status ?? 0)")
            case .keyRevoked(let keyID):
                let line = listed.stdout.split(separator: "\n").first { $0.hasPrefix(keyID + "\t") }
                expect(line?.contains("\trevoked ") == true, "\(what): the acknowledged revocation of \(keyID) does not hold:\n\(listed.stdout)")
            default: break
            }
        }
    }

    private func challenge(_ port: String) -> String? {
        guard let answer = call(port, "POST", "/v1/apps/\(app)/attest/challenges"), answer.status == 201,
              let object = try? JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any] else { return nil }
        return object["challenge"] as? String
    }
}
