import DepotClient
import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

@Suite("Guarded rollouts: the extension flow, the guard that halts a failing rollout, hostile reports, what is refused")
struct RolloutGuardTests {
    @Test("Through the extension flow (schedule / receive / installArrived), a sample of devices each takes its own choice, reports it from the app, and goes back after a halt")
    func extensionFlow() async throws {
        try await withServer { origin in
            let work = TemporaryDirectory("depot-rollout-extension")
            defer { work.remove() }
            let (v1, v2) = (bytes(5_000, seed: 4), bytes(5_500, seed: 5))
            try put(origin, "level", v1)
            try put(origin, "level", v2, query: "&channel=beta")
            let fleet = try RolloutFleet(origin: origin, root: work.path, count: 24)
            let configuration = fleet.configuration
            #expect(try call(origin, "POST", "/v1/apps/\(origin.app)/rollouts/production/start?release=2&fraction=0.5").status == 201)

            /// One event on one device, as the system runs it: the manifest fetched to a file, the
            /// extension schedules, the system downloads, the extension receives, the app installs.
            func event(_ device: Int, kind: RequestKind) throws -> (scheduled: [String], report: ArrivedReport) {
                let flow = try ExtensionFlow(configuration: configuration, destination: fleet.destination(device))
                let envelope = try call(origin, "GET", "/v1/apps/\(origin.app)/manifest", token: "").body
                let file = work.path + "/manifest-\(device).json"
                try FileSystem.writeAtomically(envelope, to: file)
                let downloads = try flow.schedule(manifestFile: file, kind: kind, languages: ["en"])
                for download in downloads {
                    let response = try call(origin, "GET", download.url.path, token: "")
                    #expect(response.status == 200 && response.body.count == download.fileSize)
                    let delivered = work.path + "/delivered-\(device)"
                    try FileSystem.writeAtomically(response.body, to: delivered)
                    try flow.receive(identifier: download.identifier, file: delivered)
                }
                return (downloads.map(\.identifier), try flow.installArrived(languages: ["en"]))
            }
            let manifest = try fleet.manifest()
            let candidate = try #require(manifest.rollout?.packs.first { $0.id == "level" })
            var taken = 0
            for device in 0..<fleet.count {
                let (scheduled, report) = try event(device, kind: .install)
                let installID = try fleet.installID(device)
                let chosen = try #require(manifest.resolved(installID: installID)[pack: "level"])
                #expect(scheduled == ["level@\(chosen.revision)"])
                #expect(report.installed == ["level"] && report.deviceReport?.packs.map(\.revision) == [chosen.revision])
                #expect(try FileSystem.readFile(fleet.destination(device) + "/packs/level") == (chosen.sha256 == candidate.sha256 ? v2 : v1))
                // The app sends it (never the extension).
                let status = try await DeviceReporter(server: origin.baseURL, app: origin.app).send(try #require(report.deviceReport))
                #expect(status == 202)
                if chosen.sha256 == candidate.sha256 { taken += 1 }
            }
            #expect(taken > 0 && taken < fleet.count, "\(taken) of \(fleet.count) at 50 %")
            origin.server.flushReports()
            #expect(try rolloutStatus(origin).reports == Int64(taken))

            #expect(try call(origin, "POST", "/v1/apps/\(origin.app)/rollouts/production/halt").status == 201)
            for device in 0..<fleet.count {
                let before = try #require(try fleet.installed(device, "level"))
                let (scheduled, report) = try event(device, kind: .periodic)
                if before.sha256 == candidate.sha256 {
                    #expect(scheduled == ["level@1"] && report.installed == ["level"])
                } else {
                    #expect(scheduled.isEmpty)
                }
                #expect(try FileSystem.readFile(fleet.destination(device) + "/packs/level") == v1)
            }

            // A download the system failed, noted by the extension, is in the app's next report.
            let flow = try ExtensionFlow(configuration: configuration, destination: fleet.destination(0))
            flow.downloadFailed(identifier: "level@1", error: URLError(.badServerResponse))
            flow.downloadFailed(identifier: "../../etc@1", error: URLError(.badServerResponse))
            // The device's own conditions are not the pack's failures (had it been noted, the kind
            // below would be `transport`).
            flow.downloadFailed(identifier: "level@1", error: URLError(.notConnectedToInternet))
            let noted = try flow.installArrived(languages: ["en"])
            #expect(noted.deviceReport?.packs == [DeviceReport.PackResult(id: "level", revision: 1, outcome: .failed, error: "http")])
            #expect(try flow.installArrived(languages: ["en"]).deviceReport == nil, "noted once")
            // Background Assets' own errors: a URL on a domain the build does not allow is the
            // release's failure; the allowance, Low Power Mode or a failure to start are the
            // device's; an NSURLErrorDomain error under a Background Assets error is looked at too.
            let cases: [(NSError, String?)] = [
                (NSError(domain: "BAErrorDomain", code: 202), "domain"),
                (NSError(domain: "com.apple.backgroundassets.error", code: 202), "domain"),
                (NSError(domain: "BAErrorDomain", code: 112), nil),
                (NSError(domain: "BAErrorDomain", code: 111), nil),
                (NSError(domain: "BAErrorDomain", code: 102), nil),
                (NSError(domain: "BAErrorDomain", code: 102, userInfo: [
                    NSUnderlyingErrorKey: NSError(domain: NSURLErrorDomain, code: URLError.Code.serverCertificateUntrusted.rawValue),
                ]), "tls"),
                (NSError(domain: NSURLErrorDomain, code: URLError.Code.resourceUnavailable.rawValue), "http"),
                (NSError(domain: NSURLErrorDomain, code: URLError.Code.timedOut.rawValue), nil),
            ]
            for (error, kind) in cases {
                flow.downloadFailed(identifier: "level@1", error: error)
                let packs = try flow.installArrived(languages: ["en"]).deviceReport?.packs
                #expect(packs?.first?.error == kind, "\(error)")
            }
        }
    }

    @Test("Devices whose candidate install fails report it; the rollout halts itself once the failure rate crosses the threshold, not before --min-reports; with no failures it never halts")
    func guardHalts() async throws {
        let log = CapturedLog()
        try await withServer(configure: { $0.logger = log.logger() }) { origin in
            let work = TemporaryDirectory("depot-rollout-guard")
            defer { work.remove() }
            let (v1, v2) = (bytes(5_000, seed: 6), bytes(5_000, seed: 7))
            try put(origin, "level", v1)
            try put(origin, "level", v2, query: "&channel=beta")
            let fleet = try RolloutFleet(origin: origin, root: work.path, count: 120)
            let candidateSHA = try #require(try fleet.manifest(channel: "beta")[pack: "level"]).sha256
            // The injected failure: the candidate's stored container damaged (same size), so every
            // device that takes it fails its check.
            let blob = origin.data.path + "/blobs/" + candidateSHA.prefix(2) + "/" + candidateSHA
            let good = try FileSystem.readFile(blob)
            var bad = good
            bad[2_000] ^= 0xff
            try FileSystem.writeAtomically(bad, to: blob)
            #expect(try call(origin, "POST", "/v1/apps/\(origin.app)/rollouts/production/start?release=2&fraction=0.5&haltOnFailureRate=0.2&minReports=8").status == 201)

            var failures = 0
            var device = 0
            while device < fleet.count {
                let report = try await fleet.sync(device, report: true)
                device += 1
                origin.server.flushReports()
                let status = try rolloutStatus(origin)
                if let failed = report.deviceReport?.packs.first(where: { $0.outcome == .failed }) {
                    #expect(failed.error == "integrity")
                    failures += 1
                }
                if failures < 8 {
                    #expect(status.state == "running", "halted after \(failures) failures, before the 8 reports it needs")
                } else {
                    #expect(status.state == "halted" && status.haltedBy == "automatic" && status.trigger?.reports == 8 && status.trigger?.failures == 8)
                    break
                }
            }
            #expect(failures == 8, "the guard halted at the 8th report about the candidate")
            #expect(log.all.contains { $0.contains("rollout halted automatically") })
            // Resumed by a person, it counts from the resumption: the old failures do not halt it
            // again; eight new ones do.
            #expect(try call(origin, "POST", "/v1/apps/\(origin.app)/rollouts/production/advance?fraction=0.5").status == 201)
            origin.server.flushReports()
            #expect(try rolloutStatus(origin).state == "running")
            var again = 0
            while device < fleet.count, try rolloutStatus(origin).state == "running" {
                let report = try await fleet.sync(device, report: true)
                device += 1
                if report.deviceReport?.packs.contains(where: { $0.outcome == .failed }) == true { again += 1 }
                origin.server.flushReports()
            }
            let trigger = try rolloutStatus(origin).trigger
            #expect(again == 8 && trigger?.reports == 8, "\(again)")
            // Every device is on the current revision at its next sync (the failing ones never left it).
            for index in 0..<device {
                try await fleet.sync(index)
                #expect(try fleet.installed(index, "level")?.revision == 1)
            }

            // Repaired, the same candidate rolled out to everyone: no failures, never halted.
            try FileSystem.writeAtomically(good, to: blob)
            #expect(try call(origin, "POST", "/v1/apps/\(origin.app)/rollouts/production/start?release=2&fraction=1&haltOnFailureRate=0.2&minReports=8").status == 201)
            for index in 0..<40 {
                let report = try await fleet.sync(index, report: true)
                #expect(report.failed.isEmpty)
                origin.server.flushReports()
            }
            let status = try rolloutStatus(origin)
            #expect(status.state == "running" && status.reports >= 40 && status.failures == 0)
        }
    }

    @Test("Hostile reports — oversized, malformed, of unknown revisions, releases, channels or error kinds, a flood from one address — are refused and leave the stored figures bounded")
    func hostileReports() async throws {
        /// The one day's counts an origin stored: its rows and its reports.
        func stored(_ origin: TestOrigin) throws -> (rows: [[String: Any]], reports: Int?, text: String) {
            origin.server.flushReports()
            let days = FileSystem.contents(of: origin.data.path + "/apps/\(origin.app)/reports").filter { $0.hasSuffix(".json") }
            #expect(days.count == 1)
            let bytes = try FileSystem.readFile(origin.data.path + "/apps/\(origin.app)/reports/" + days[0])
            let object = try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
            return (try #require(object?["rows"] as? [[String: Any]]), (object?["reports"] as? [String: Int])?["production"], String(decoding: bytes, as: UTF8.self))
        }
        func send(_ origin: TestOrigin, _ body: [UInt8], headers: String = "") throws -> RawHTTP.Response {
            try call(origin, "POST", "/v1/apps/\(origin.app)/reports", token: "", body: body, headers: "Content-Type: application/json\r\n" + headers)
        }
        let good = DeviceReport(channel: "production", release: 1, packs: [.init(id: "level", revision: 1, outcome: .installed, bytes: 3_075)])
        let log = CapturedLog()
        try await withServer(configure: { $0.logger = log.logger() }) { origin in
            try put(origin, "level", bytes(3_000, seed: 8))
            #expect(try send(origin, good.encoded()).status == 202)
            var refusals: [(String, [UInt8], Int)] = [
                ("oversized", Array(repeating: 32, count: 40_000), 413),
                ("not JSON", Array("{\"channel\":".utf8), 400),
                ("another shape", Array("{\"a\":[1,2,3]}".utf8), 400),
                ("no pack", DeviceReport(channel: "production", release: 1, packs: []).encoded(), 400),
            ]
            var kind = good
            kind.packs[0].outcome = .failed
            kind.packs[0].error = "<script>"
            refusals.append(("unknown error kind", kind.encoded(), 400))
            var huge = good
            huge.packs[0].bytes = 1 << 40
            for (what, report) in [
                ("unknown revision", DeviceReport(channel: "production", release: 1, packs: [.init(id: "level", revision: 9, outcome: .installed)])),
                ("unknown pack", DeviceReport(channel: "production", release: 1, packs: [.init(id: "nope", revision: 1, outcome: .installed)])),
                ("unknown release", DeviceReport(channel: "production", release: 99, packs: [.init(id: "level", revision: 1, outcome: .installed)])),
                ("unknown channel", DeviceReport(channel: "staging", release: 1, packs: [.init(id: "level", revision: 1, outcome: .installed)])),
                ("more bytes than the pack has", huge),
            ] {
                refusals.append((what, report.encoded(), 422))
            }
            for (what, body, status) in refusals {
                let response = try send(origin, body)
                #expect(response.status == status, "\(what): \(response.status) \(response.bodyText)")
            }
            let declared = try call(origin, "POST", "/v1/apps/\(origin.app)/reports", token: "", headers: "Content-Length: 999999999\r\n")
            #expect(declared.status == 413 || declared.status == 400)
            #expect(try call(origin, "POST", "/v1/apps/com.example.none/reports", token: "", body: good.encoded()).status == 404)
            let (rows, reports, text) = try stored(origin)
            #expect(rows.count == 1 && (rows[0]["count"] as? Int) == 1 && reports == 1, "only the one report counted is stored: \(rows)")
            #expect(!text.contains("127.0.0.1"), "no address is stored")
            #expect(!log.all.contains { $0.contains("/reports") && $0.contains("127.0.0.1") }, "no report, counted or refused, is logged with its address")
            #expect(log.all.filter { $0.contains("/reports") }.count >= refusals.count)
        }
        // Counts near the largest number stop there: no report can make the origin trap (and
        // then again at every restart, from the file).
        try await withServer { origin in
            try put(origin, "level", bytes(3_000, seed: 8))
            let today = ISO8601DateFormatter().string(from: Date()).prefix(10)
            let folder = origin.data.path + "/apps/\(origin.app)/reports"
            try FileSystem.createDirectory(folder)
            let full = Int64.max - 2
            try FileSystem.writeAtomically(Array("""
                {"day":"\(today)","reports":{"production":\(full)},"rows":[{"bytes":\(full),"channel":"production","count":\(full),"outcome":"installed","pack":"level","release":1,"revision":1}]}
                """.utf8), to: folder + "/\(today).json")
            for _ in 0..<5 { #expect(try send(origin, good.encoded()).status == 202) }
            let (rows, reports, _) = try stored(origin)
            #expect((rows[0]["count"] as? Int) == Int.max && reports == Int.max)
            #expect(try call(origin, "GET", "/v1/apps/\(origin.app)/fleet").status == 200)
        }
        // A flood from one address: the bucket (one report every 2 s, a burst of 1) answers 429 with
        // Retry-After, and only what it let through is counted (150 requests would have to take
        // 300 s to pass untouched).
        try await withServer(configure: { $0.reportRatePerAddress = 0.5 }) { origin in
            try put(origin, "level", bytes(3_000, seed: 8))
            var (accepted, limited) = (0, 0)
            for _ in 0..<150 {
                let response = try send(origin, good.encoded())
                if response.status == 202 { accepted += 1 } else if response.status == 429 {
                    limited += 1
                    #expect(response.header("Retry-After").flatMap(Int.init).map { (1...2).contains($0) } == true, "\(response.headers)")
                }
            }
            #expect(limited > 0 && accepted > 0 && accepted + limited == 150)
            let (rows, reports, _) = try stored(origin)
            #expect(rows.count == 1 && (rows[0]["count"] as? Int) == accepted && reports == accepted, "\(rows)")
        }
    }

    @Test("What a rollout refuses: a managed app, a content publish or promotion while it runs, a lower fraction, the live release, a bad fraction, no token; after a halt a publish drops it")
    func refusals() async throws {
        try await withServer { origin in
            try put(origin, "level", bytes(2_000, seed: 9))
            try put(origin, "level", bytes(2_100, seed: 10), query: "&channel=beta")
            let rollouts = "/v1/apps/\(origin.app)/rollouts/production"
            func expect(_ method: String, _ path: String, _ status: Int, _ code: String? = nil, token: String? = nil) throws {
                let response = try call(origin, method, path, token: token)
                #expect(response.status == status, "\(path): \(response.status) \(response.bodyText)")
                if let code { #expect(response.bodyText.contains("\"\(code)\""), "\(response.bodyText)") }
            }
            try expect("POST", rollouts + "/start?release=2&fraction=0.1", 401, token: "")
            try expect("POST", rollouts + "/start?release=2&fraction=0", 400)
            try expect("POST", rollouts + "/start?release=2&fraction=1.5", 400)
            try expect("POST", rollouts + "/start?release=1&fraction=0.1", 409, "release_live")
            try expect("POST", rollouts + "/start?release=7&fraction=0.1", 404)
            try expect("POST", rollouts + "/halt", 404)
            // Builds that allow only what the current release needs: the candidate (100 bytes
            // more) would not fit a device that takes it.
            let apps = AppStore(folder: DataFolder(origin.data.path))
            try apps.setAllowances(origin.app, BuildAllowances(downloadAllowance: 2_100))
            try expect("POST", rollouts + "/start?release=2&fraction=0.2", 409, "allowance_exceeded")
            try expect("GET", rollouts, 404)
            try apps.setAllowances(origin.app, nil)
            try expect("POST", rollouts + "/start?release=2&fraction=0.2", 201)
            try expect("POST", rollouts + "/start?release=2&fraction=0.3", 409, "rollout_running")
            try expect("POST", rollouts + "/advance?fraction=0.1", 409, "fraction_not_raised")
            let publish = try put(origin, "other", bytes(100, seed: 11), expecting: 409)
            #expect(publish.bodyText.contains("rollout_running"))
            try expect("POST", "/v1/apps/\(origin.app)/channels/production?release=2", 409, "rollout_running")
            try expect("POST", rollouts + "/halt", 201)
            try expect("POST", rollouts + "/halt", 409, "rollout_halted")
            // After a halt a publish goes through and drops the halted rollout.
            try put(origin, "other", bytes(100, seed: 11))
            let fleet = try RolloutFleet(origin: origin, root: "/tmp", count: 0)
            #expect(try fleet.manifest().rollout == nil)
            try expect("POST", rollouts + "/advance?fraction=0.5", 409, "rollout_gone")

            // A crash between a step's release and its record: the manifest is the truth, and the
            // record is taken up again from it.
            try expect("POST", rollouts + "/start?release=2&fraction=0.3", 201)
            FileSystem.remove(origin.data.path + "/apps/\(origin.app)/rollouts/production.json")
            let recovered = try rolloutStatus(origin)
            #expect(recovered.state == "running" && recovered.fraction == 0.3)
            try expect("POST", rollouts + "/halt", 201)
            try expect("POST", rollouts + "/complete", 201)

            // A channel whose rollout runs cannot be removed (its devices would lose their manifest).
            let admin = try TokenStore(folder: DataFolder(origin.data.path)).create(app: origin.app, role: .admin).token
            try expect("POST", "/v1/apps/\(origin.app)/channels/gamma?release=1", 201)
            try expect("POST", "/v1/apps/\(origin.app)/rollouts/gamma/start?release=2&fraction=0.5", 201)
            try expect("DELETE", "/v1/apps/\(origin.app)/channels/gamma", 409, "rollout_running", token: admin)
            try expect("POST", "/v1/apps/\(origin.app)/rollouts/gamma/halt", 201)
            try expect("DELETE", "/v1/apps/\(origin.app)/channels/gamma", 204, token: admin)

            // A managed app: the system chooses its downloads; refused with a clear error.
            let managed = "com.example.managed"
            _ = try AppStore(folder: DataFolder(origin.data.path)).create(managed, mode: .managed, appGroup: "group.com.example.managed")
            let token = try TokenStore(folder: DataFolder(origin.data.path)).create(app: managed, role: .publisher).token
            let refused = try call(origin, "POST", "/v1/apps/\(managed)/rollouts/production/start?release=1&fraction=0.1", token: token)
            #expect(refused.status == 409 && refused.bodyText.contains("rollout_managed") && refused.bodyText.contains("the system chooses"), "\(refused.bodyText)")
        }
    }
    @Test("A step names the rollout it was confirmed against (issue 50): after the guard halted it, after a halt and resumption, after a restart with another release, each step that names what was seen is refused with 409 rollout_changed and publishes nothing; the halt stays in the history after a resumption")
    func staleSteps() async throws {
        try await withServer { origin in
            try put(origin, "level", bytes(3_000, seed: 21))
            try put(origin, "level", bytes(3_100, seed: 22), query: "&channel=beta")
            try put(origin, "level", bytes(3_200, seed: 23), query: "&channel=gamma")
            let rollouts = "/v1/apps/\(origin.app)/rollouts/production"
            func post(_ path: String, _ status: Int, _ code: String? = nil) throws -> RawHTTP.Response {
                let response = try call(origin, "POST", rollouts + path)
                #expect(response.status == status, "\(path): \(response.status) \(response.bodyText)")
                if let code { #expect(response.bodyText.contains("\"\(code)\""), "\(path): \(response.bodyText)") }
                return response
            }
            func manifestVersion() throws -> Int { try rolloutStatus(origin).manifest }
            _ = try post("/start?release=2&fraction=0.1&haltOnFailureRate=0.3&minReports=3", 201)
            // What the admin's page read: release 2, running, one step.
            let seen = "release=2&state=running&steps=1"
            // Anonymous failure reports about the candidate trip the guard underneath.
            let candidate = try JSONDecoder().decode(StepsAnswer.self, from: Data(try call(origin, "GET", rollouts).body))
            let revision = try #require(candidate.candidates.first?.revision)
            let report = Array(#"{"channel":"production","release":\#(try manifestVersion()),"packs":[{"id":"level","revision":\#(revision),"outcome":"failed","error":"integrity","bytes":0}]}"#.utf8)
            for _ in 0..<3 {
                #expect(try call(origin, "POST", "/v1/apps/\(origin.app)/reports", token: "", body: report, headers: "Content-Type: application/json\r\n").status == 202)
            }
            origin.server.flushReports()
            #expect(try rolloutStatus(origin).state == "halted" && rolloutStatus(origin).haltedBy == "automatic")
            let halted = try manifestVersion()

            // The admin's Advance (to 50 %) and Complete name what the page showed: refused, nothing published.
            let advance = try post("/advance?fraction=0.5&" + seen, 409, "rollout_changed")
            #expect(advance.bodyText.contains("halted") && advance.bodyText.contains("automatic") && advance.bodyText.contains("3 failures in 3 reports"), "\(advance.bodyText)")
            _ = try post("/complete?" + seen, 409, "rollout_changed")
            _ = try post("/halt?" + seen, 409, "rollout_changed")
            #expect(try manifestVersion() == halted && rolloutStatus(origin).state == "halted" && rolloutStatus(origin).fraction == 0)
            // Bad expectations are 400.
            _ = try post("/advance?fraction=0.5&state=completed", 400)
            _ = try post("/advance?fraction=0.5&release=x", 400)
            _ = try post("/advance?fraction=0.5&steps=-1", 400)

            // Named as it is now (halted, two steps), the resumption goes through; the halt stays in its history.
            _ = try post("/advance?fraction=0.5&release=2&state=halted&steps=2", 201)
            let resumed = try JSONDecoder().decode(StepsAnswer.self, from: Data(try call(origin, "GET", rollouts).body))
            #expect(resumed.state == "running" && resumed.steps.map(\.action) == ["start", "halt", "advance"])
            #expect(resumed.steps[1].by == "automatic" && resumed.steps[1].trigger?.failures == 3 && resumed.steps[1].trigger?.reports == 3)
            // Someone who saw it running at 10 % before all that (one step): refused, though it runs again.
            _ = try post("/advance?fraction=0.8&release=2&state=running&steps=1", 409, "rollout_changed")

            // A publisher halts it and starts release 3 instead: a Complete confirmed for release 2 is refused.
            _ = try post("/halt", 201)
            _ = try post("/start?release=3&fraction=0.2", 201)
            let restarted = try manifestVersion()
            let complete = try post("/complete?release=2&state=running&steps=3", 409, "rollout_changed")
            #expect(complete.bodyText.contains("release 3"), "\(complete.bodyText)")
            #expect(try manifestVersion() == restarted && rolloutStatus(origin).state == "running")
            // Named as it is now, the Complete goes through; a Halt naming release 3 then finds none running.
            _ = try post("/complete?release=3&state=running&steps=1", 201)
            _ = try post("/halt?release=3", 409, "rollout_changed")
            _ = try post("/halt", 404)
        }
    }
}

/// A rollout's status with its steps (`GET …/rollouts/{channel}`).
struct StepsAnswer: Decodable {
    struct Candidate: Decodable { var pack: String; var revision: Int }
    struct Trigger: Decodable { var reports: Int64; var failures: Int64 }
    struct Step: Decodable { var action: String; var by: String; var trigger: Trigger? }
    var state: String
    var candidates: [Candidate]
    var steps: [Step]
}
