import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// The invariant each crash must leave, checked from outside after a restart.
extension OriginCrashLab {
    /// Restarts the origin and checks the invariant from outside; false when it does not hold.
    func check(_ acks: [Ack], _ what: String) throws -> Bool {
        if [.tus, .tusRefused].contains(sequence) {
            // A sweep before the restart: a blob an upload's record names (moved, not yet staged) stays.
            let swept = try Processes.run(Processes.depotBinary, ["gc", "--data", data, "--retention-days", "0", "--grace-minutes", "0"])
            #expect(swept.status == 0, "\(what): gc before the restart: \(swept.stderr)")
        }
        let restartedAt = Date()
        let server = try start()
        defer { stop(server) }
        let port = server.port
        guard port != "0" else {
            Issue.record("\(what): the origin does not start again: \(server.errorOutput())")
            return false
        }
        let configuration = try Processes.run(Processes.depotBinary, ["keys", "export", "--data", data, "--app", app]).stdout
        let keys = try ClientConfiguration.decode(Array(configuration.utf8)).trustedKeys()
        var verified: Set<String> = []
        var failed = false
        func expect(_ condition: Bool, _ message: @autoclosure () -> String) {
            if !condition { Issue.record(Comment(rawValue: message())); failed = true }
        }
        func manifest(_ path: String) -> Manifest? {
            guard let answer = call(port, "GET", path), answer.status == 200 else { return nil }
            return try? Envelope.decode(answer.body).verifiedManifest(trusting: keys)
        }
        // A changed pack whose patch the crash left unmade: the restarted origin makes it.
        if sequence == .patchRelease, (manifest("/v1/apps/\(app)/manifest")?[pack: "movie"]?.revision ?? 0) > 1 { try waitForPatch(port) }
        _ = try CrashTests.checkInvariants(data: data, app: app, keys: keys, verified: &verified, swept: true, restartedAt: restartedAt)
        for ack in acks {
            switch ack {
            case .released(let release, let pack, let sha256):
                let found = manifest("/v1/apps/\(app)/releases/\(release)")?[pack: pack]?.sha256
                expect(found == sha256, "\(what): acknowledged release \(release) of \(pack) is lost")
            case .staged(let pack, let sha256):
                let staging = call(port, "GET", "/v1/apps/\(app)/staging", token: token).map { String(decoding: $0.body, as: UTF8.self) } ?? ""
                let live = manifest("/v1/apps/\(app)/manifest")?[pack: pack]?.sha256
                let inDraft = staging.contains("\"\(pack)\"") && (sha256.map { staging.contains($0) } ?? true)
                expect(inDraft || (sha256 != nil && live == sha256), "\(what): acknowledged upload of \(pack) is neither staged nor live: \(staging)")
            case .offset(let location, let offset, let length, let pack, let digest):
                let head = call(port, "HEAD", location, token: token, headers: ["Tus-Resumable: 1.0.0"])
                let now = head?.headers.first { $0.0.lowercased() == "upload-offset" }.flatMap { Int($0.1) }
                expect(head?.status == 200 && (now ?? -1) >= offset, "\(what): upload \(location) acknowledged at \(offset) answers \(head?.status ?? 0) offset \(now ?? -1)")
                // An upload at its end was verified and recorded: start-up staged (here: released) its pack.
                if now == length {
                    let live = manifest("/v1/apps/\(app)/manifest")?[pack: pack]?.plaintextSHA256
                    expect(live == digest, "\(what): upload \(location) is complete, and its pack is not live")
                }
            case .notLive(let pack, let digest):
                expect(manifest("/v1/apps/\(app)/manifest")?[pack: pack]?.plaintextSHA256 != digest, "\(what): a refused upload of \(pack) went live")
            case .live(let pack, let digest):
                expect(manifest("/v1/apps/\(app)/manifest")?[pack: pack]?.plaintextSHA256 == digest, "\(what): the acknowledged upload of \(pack) is not live")
            case .channel(let channel, let releases):
                let path = channel == "production" ? "/v1/apps/\(app)/manifest" : "/v1/apps/\(app)/channels/\(channel)/manifest"
                let live = manifest(path)
                expect(live != nil, "\(what): channel \(channel) serves no manifest")
                // A promotion is signed again for its channel: the same packs as the release named.
                let served = releases.contains { release in
                    let named = manifest("/v1/apps/\(app)/releases/\(release)")
                    return live.map { Set($0.packs.map(\.sha256)) } == named.map { Set($0.packs.map(\.sha256)) } && live?.version ?? 0 >= release
                }
                expect(served, "\(what): channel \(channel) does not serve release \(releases[0]), which was acknowledged")
            case .signingKeys(let count):
                let exported = try Processes.run(Processes.depotBinary, ["keys", "export", "--data", data, "--app", app]).stdout
                let keys = (try? ClientConfiguration.decode(Array(exported.utf8)).trustedKeys().count) ?? 0
                expect(keys >= count, "\(what): the acknowledged signing key is not in the app's configuration (\(keys) keys)")
            case .packKeyCurrent(let id):
                let listed = try Processes.run(Processes.depotBinary, ["keys", "list", "--data", data, "--app", app]).stdout
                expect(listed.contains(id + "\tcurrent"), "\(what): the acknowledged current pack key \(id) is not current:\n\(listed)")
            case .rootAdded(let version):
                let shown = try Processes.run(Processes.depotBinary, ["root", "show", "--data", data, "--app", app]).stdout
                expect(shown.contains("version \(version) (newest)"), "\(what): the acknowledged root version \(version) is not the newest:\n\(shown)")
                let exported = try Processes.run(Processes.depotBinary, ["keys", "export", "--data", data, "--app", app]).stdout
                expect((try? ClientConfiguration.decode(Array(exported.utf8)).pinnedRoot()) != nil, "\(what): the configuration does not pin the acknowledged root")
            case .signed(let channel, let release):
                let pinned = try ClientConfiguration.decode(Array(configuration.utf8)).pinnedRoot()
                let path = channel == "production" ? "/v1/apps/\(app)/manifest" : "/v1/apps/\(app)/channels/\(channel)/manifest"
                let trusted = try pinned.flatMap { pinned in
                    try call(port, "GET", path).map { try ManifestTrust.verify(envelope: $0.body, pinned: pinned, record: nil, app: app, channel: channel, now: Date()) }
                }
                expect(trusted?.signedRelease == release, "\(what): a device pinning the root does not find channel \(channel) serving release \(release)'s signed statement")
            case .keyExported(let id):
                let exported = try Processes.run(Processes.depotBinary, ["keys", "export", "--data", data, "--app", app]).stdout
                expect(exported.contains("\"\(id)\""), "\(what): the acknowledged key \(id) is not in the app's configuration")
            case .tokenWorks(let token):
                expect(call(port, "GET", "/v1/apps/\(app)/staging", token: token)?.status == 200, "\(what): an acknowledged token does not work")
            case .ruleListed(let rule):
                let listed = try Processes.run(Processes.depotBinary, ["apps", "trust", app, "--list", "--data", data]).stdout
                expect(listed.contains(rule), "\(what): the acknowledged rule \(rule) is not listed")
            case .attestedKey, .keyRevoked, .attestedReport:
                break
            case .tokenRefused(let token):
                expect(call(port, "GET", "/v1/apps/\(app)/staging", token: token)?.status == 401, "\(what): a revoked token still works")
            case .rollout(let states):
                let status = call(port, "GET", "/v1/apps/\(app)/rollouts/production", token: token).map { String(decoding: $0.body, as: UTF8.self) } ?? ""
                let acknowledged = states.contains { state in
                    state == "complete" ? !status.contains("\"running\"") && !status.contains("\"halted\"") : status.contains("\"\(state)\"")
                }
                expect(acknowledged, "\(what): the rollout was acknowledged \(states[0]), and is: \(status)")
            }
        }
        if sequence == .attest { try checkAttest(acks, port: port, what, expect: expect) }
        if sequence == .attestedReports { checkAttestedReports(acks, port: port, what, expect: expect) }
        // Every channel's manifest verifies and every blob it names is served whole.
        let channels = ["/v1/apps/\(app)/manifest"] + FileSystem.contents(of: data + "/apps/\(app)/channels").filter { !$0.hasPrefix(".") }
            .map { "/v1/apps/\(app)/channels/\($0)/manifest" }
        for path in channels {
            guard let live = manifest(path) else {
                expect(call(port, "GET", path)?.status == 404, "\(what): \(path) does not verify")
                continue
            }
            for pack in live.allEntries {
                let blob = call(port, "GET", "/v1/apps/\(app)/blobs/\(pack.sha256)")
                expect(blob?.status == 200 && blob?.body.count == Int(pack.size) && blob.map { Hex.encode(SHA256Hasher.hash($0.body)) } == pack.sha256,
                        "\(what): \(path) names \(pack.id)@\(pack.revision), which is not served whole")
            }
        }
        // A device syncs the live release, byte for byte.
        let dest = work.path + "/device"
        try? FileManager.default.removeItem(atPath: dest)
        let config = work.path + "/client.json"
        try FileSystem.writeAtomically(Array(configuration.utf8), to: config)
        if let live = manifest("/v1/apps/\(app)/manifest") {
            let synced = try Processes.run(Processes.depotBinary, ["sync", "--server", server.url, "--app", app, "--config", config, "--dest", dest, "--quiet"])
            expect(synced.status == 0, "\(what): a device's sync fails: \(synced.stderr)")
            let chosen = live.resolved(installID: (try? StateStore(destination: dest).installID(app: app)) ?? "")
            for pack in chosen.packs {
                let copy = (try? FileSystem.readFile(dest + "/packs/" + pack.id, limit: 64 << 20)).map { Hex.encode(SHA256Hasher.hash($0)) }
                expect(copy == pack.plaintextSHA256, "\(what): the device's \(pack.id) is not the live release's")
            }
        }
        // A sweep leaves nothing unreferenced (only live and draft blobs are kept with no retention).
        stop(server)
        let swept = try Processes.run(Processes.depotBinary, ["gc", "--data", data, "--retention-days", "0", "--grace-minutes", "0"])
        expect(swept.status == 0, "\(what): gc: \(swept.stderr)")
        var named: Set<String> = []
        for name in FileSystem.contents(of: data + "/apps/\(app)/releases") where name.hasSuffix(".json") {
            if let manifest = try? Envelope.decode(FileSystem.readFile(data + "/apps/\(app)/releases/" + name)).verifiedManifest(trusting: keys) {
                named.formUnion(manifest.allEntries.map(\.sha256) + manifest.allEntries.flatMap { $0.patches ?? [] }.map(\.sha256))
            }
        }
        let staging = FileSystem.contents(of: data + "/apps/\(app)/staging").compactMap { try? FileSystem.readText(data + "/apps/\(app)/staging/" + $0) }.joined()
        for prefix in FileSystem.contents(of: data + "/blobs") {
            for blob in FileSystem.contents(of: data + "/blobs/" + prefix) {
                expect(named.contains(blob) || staging.contains(blob), "\(what): blob \(blob) outlived a sweep, unreferenced")
            }
        }
        return !failed
    }
}
