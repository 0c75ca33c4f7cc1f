import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// A busy origin run through simulated days (issue 63): the real `depot serve` on its default
/// settings (patches at depth 3, a 30-day retention, 90 days of report days), its calendar
/// time read from a file this generator rewrites (`DEPOT_CLOCK_FILE`, ``WallClock``), so that
/// a day takes seconds and everything dated — releases, the sweep's retention, report days,
/// rollouts, re-signing — sees the days go by.
///
/// Every day, over three apps: `releasesPerDay` publishes of changed packs (three binary packs,
/// a small change each time, and a zip pack of 12 entries with one entry changed, every fourth
/// publish of an app), spread over the working day; app A makes a channel (`qa-<day>`) and
/// removes the one made three days before; app B publishes a candidate to `beta`, starts a
/// rollout of it on production at 10 % and halts it the next morning (or completes it, every
/// other day); devices send reports about each app's live release. Every `backupEvery` days a
/// backup (incremental, from the previous one; the one before that removed), every
/// `restartEvery` days a restart. At the end of each day the clock goes to 23:00 and the
/// generator waits for what the origin does by itself (two maintenance passes begun after the
/// clock moved, and no patch work left: `depot_background_passes_total`,
/// `depot_patch_apps_waiting`) before it counts: resident memory, the background work's CPU
/// seconds that day, the data folder's bytes (blobs, and the rest), open files; at a restart,
/// the seconds to listening and to its first maintenance pass, and the release files it read.
struct YearOfLife {
    struct Plan: CustomStringConvertible {
        var days: Int
        var releasesPerDay: Int
        var restartEvery: Int
        var backupEvery: Int

        /// The plan, with `DEPOT_YEAR_DAYS`, `DEPOT_YEAR_RELEASES`, `DEPOT_YEAR_RESTART_EVERY` and
        /// `DEPOT_YEAR_BACKUP_EVERY` taking the place of its values when set (the bench's year).
        func fromEnvironment() -> Plan {
            let environment = ProcessInfo.processInfo.environment
            func value(_ name: String, _ fallback: Int) -> Int { environment[name].flatMap(Int.init).map { max(1, $0) } ?? fallback }
            return Plan(
                days: value("DEPOT_YEAR_DAYS", days), releasesPerDay: value("DEPOT_YEAR_RELEASES", releasesPerDay),
                restartEvery: value("DEPOT_YEAR_RESTART_EVERY", restartEvery), backupEvery: value("DEPOT_YEAR_BACKUP_EVERY", backupEvery)
            )
        }

        var description: String {
            "\(days) days, \(releasesPerDay) releases a day over three apps, a backup every \(backupEvery) days, a restart every \(restartEvery) days"
        }
    }

    /// What one day left behind, counted after its background work.
    struct Day {
        var day: Int
        var releases: Int
        var residentKiB: Int
        /// CPU seconds patch making took that day (for that day's releases).
        var patchSeconds: Double
        /// CPU seconds a maintenance pass took that day, on average (re-signing, the sweep,
        /// expired uploads: the passes run every second here, every hour by default).
        var maintenancePerPass: Double
        var blobBytes: Int64
        var otherBytes: Int64
        var openFiles: Int
        var restart: Restart?
        var backup: (seconds: Double, copiedBytes: Int, linked: Int)?
    }

    struct Restart {
        var listening: Double
        var firstPass: Double
        var releaseFilesRead: Int
    }

    static let apps = ["com.example.year-a", "com.example.year-b", "com.example.year-c"]
    static let binaryPacks = ["level-0", "level-1", "level-2"]
    /// An hour, in the clock's seconds.
    static let hour = 3_600.0

    let plan: Plan
    let work: String
    var data: String { work + "/data" }
    var clockFile: String { work + "/clock" }
    let start = Double(Int(Date().timeIntervalSince1970))
    /// Tokens by app (admin).
    var tokens: [String: String] = [:]
    var server: ServeProcess?
    var port: UInt16 = 0
    /// Publishes made per app and pack (a pack's content is derived from it).
    var made: [String: [String: Int]] = [:]
    /// The release each app's last production publish made, and a pack revision it lists.
    var lastProduction: [String: (release: Int, pack: String, revision: Int)] = [:]
    var rolloutRunning = false
    var published = 0
    var backups: [String] = []
    var days: [Day] = []

    init(plan: Plan, work: String) throws {
        self.plan = plan
        self.work = work
        try setClock(0)
        for app in Self.apps {
            try run(["apps", "create", app, "--data", data])
            let made = try run(["tokens", "create", "--data", data, "--app", app, "--role", "admin"])
            let token = made.split(separator: "\n").last.map(String.init) ?? ""
            guard !token.isEmpty else { throw YearError("tokens create printed no token: \(made)") }
            tokens[app] = token
        }
        try FileSystem.writeAtomically(Array("0123456789abcdef0123456789abcdef\n".utf8), to: work + "/metrics-token")
    }

    /// Runs the CLI (with the simulated clock); its standard output.
    @discardableResult
    func run(_ arguments: [String]) throws -> String {
        let result = try Processes.run(Processes.depotBinary, arguments, environment: ["DEPOT_CLOCK_FILE": clockFile])
        guard result.status == 0 else { throw YearError("depot \(arguments.joined(separator: " ")): \(result.status) \(result.stderr)") }
        return result.stdout
    }

    /// Sets the origin's calendar to `seconds` after the run's start.
    func setClock(_ seconds: Double) throws {
        try FileSystem.writeAtomically(Array(String(format: "%.3f\n", start + seconds).utf8), to: clockFile)
    }

    mutating func startServer() throws -> Restart {
        let began = ContinuousClock.now
        let server = try ServeProcess(data: data, environment: [
            "DEPOT_CLOCK_FILE": clockFile, "DEPOT_PATCH_DEPTH": "3", "DEPOT_REFRESH_INTERVAL": "1", "DEPOT_LOG_LEVEL": "warning",
            "DEPOT_METRICS_TOKEN_FILE": work + "/metrics-token", "DEPOT_PUBLIC_URL": HistoryFixture.publicURL,
            // Devices of three apps from one address: the report limits are an edge's concern here.
            "DEPOT_REPORT_RATE_PER_ADDRESS": "100000", "DEPOT_REPORT_RATE_TOTAL": "100000",
        ], bootstrap: false)
        let listening = Self.seconds(ContinuousClock.now - began)
        self.server = server
        port = try #require(UInt16(server.port))
        // The files read as the first pass ends, from the same answer that says it ended (the
        // next pass begins a second later and reads the retention's releases again).
        var snapshot = ""
        try waitFor("the first maintenance pass") {
            snapshot = try metrics()
            return Self.value(snapshot, "depot_background_passes_total", ["work": "maintenance"]) >= 1
        }
        let firstPass = Self.seconds(ContinuousClock.now - began)
        let read = Int(Self.value(snapshot, "depot_release_files_read"))
        try waitFor("patch making to be idle") { try metric("depot_patch_apps_waiting") == 0 }
        return Restart(listening: listening, firstPass: firstPass, releaseFilesRead: read)
    }

    func stopServer() {
        guard let server else { return }
        server.process.terminate()
        server.process.waitUntilExit()
    }

    static func seconds(_ duration: Duration) -> Double { Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18 }

    // MARK: HTTP

    func call(_ method: String, _ path: String, body: [UInt8] = [], contentType: String? = nil, app: String? = nil) throws -> RawHTTP.Response {
        let auth = app.flatMap { tokens[$0] }.map { "Authorization: Bearer \($0)\r\n" } ?? ""
        let type = contentType.map { "Content-Type: \($0)\r\n" } ?? ""
        let head = "\(method) \(path) HTTP/1.1\r\nHost: x\r\n\(auth)\(type)Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        guard let response = try RawHTTP.send(port: port, head, body: body, timeout: RawHTTP.changeWait).first else {
            throw YearError("\(method) \(path): no answer")
        }
        return response
    }

    /// A JSON object answer of `method path`, which must answer one of `statuses`.
    @discardableResult
    func json(_ method: String, _ path: String, body: [UInt8] = [], contentType: String? = nil, app: String, expect statuses: Set<Int>) throws -> [String: Any] {
        let response = try call(method, path, body: body, contentType: contentType, app: app)
        guard statuses.contains(response.status) else { throw YearError("\(method) \(path): \(response.status) \(response.bodyText.prefix(400))") }
        return (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any] ?? [:]
    }

    /// A metric's value from `/metrics` (summed over the series matching `labels`).
    func metric(_ name: String, _ labels: [String: String] = [:]) throws -> Double {
        Self.value(try metrics(), name, labels)
    }

    /// What `/metrics` answers.
    func metrics() throws -> String {
        let head = "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer 0123456789abcdef0123456789abcdef\r\nConnection: close\r\n\r\n"
        guard let response = try RawHTTP.send(port: port, head, timeout: RawHTTP.changeWait).first, response.status == 200 else { throw YearError("/metrics did not answer") }
        return response.bodyText
    }

    /// A metric's value in a `/metrics` answer (summed over the series matching `labels`).
    static func value(_ text: String, _ name: String, _ labels: [String: String] = [:]) -> Double {
        var total = 0.0
        for line in text.split(separator: "\n") where line.hasPrefix(name + " ") || line.hasPrefix(name + "{") {
            let series = String(line.split(separator: " ").first ?? "")
            guard labels.allSatisfy({ series.contains("\($0.key)=\"\($0.value)\"") }) else { continue }
            total += Double(line.split(separator: " ").last ?? "") ?? 0
        }
        return total
    }

    /// Waits for `condition` (checked every 50 ms); only a hang (ten minutes) ends the wait.
    func waitFor(_ what: String, _ condition: () throws -> Bool) throws {
        let began = ContinuousClock.now
        while try !condition() {
            if ContinuousClock.now - began > .seconds(600) { throw YearError("waited ten minutes for \(what)") }
            Thread.sleep(forTimeInterval: 0.05)
        }
    }

    // MARK: The packs

    /// A binary pack's bytes at its `count`th publish: 8 KiB seeded by the pack, 64 bytes of it
    /// changed per publish (a patch from any of the last three is worth making).
    static func binary(_ pack: String, _ count: Int) -> [UInt8] {
        var random = SeededRandom(seed: pack.utf8.reduce(UInt64(7)) { $0 &* 31 &+ UInt64($1) })
        var bytes = (0..<8_192).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        var change = SeededRandom(seed: UInt64(count) &* 1_000_003)
        let at = Int(change.next() % UInt64(8_192 - 64))
        for offset in 0..<64 { bytes[at + offset] = UInt8(truncatingIfNeeded: change.next()) }
        return bytes + Array("publish \(count)".utf8)
    }

    /// The zip pack's bytes at its `count`th publish: 12 entries of 4 KiB, entry `count % 12`
    /// changed (deflated by Python's zipfile, not the code under test).
    func zip(_ app: String, _ count: Int) throws -> [UInt8] {
        let script = """
            import random, sys, zipfile
            path, count = sys.argv[1], int(sys.argv[2])
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
                for i in range(12):
                    seed = 1000 * i + (count if i == count % 12 else 0)
                    z.writestr(f"level/part-{i:02d}.bin", random.Random(seed).randbytes(4096))
            """
        let path = work + "/bundle-\(app).zip"
        let made = try Processes.run("/usr/bin/python3", ["-c", script, path, String(count)])
        guard made.status == 0 else { throw YearError("zip: \(made.stderr)") }
        return try FileSystem.readFile(path, limit: 1 << 20)
    }

    // MARK: A day

    /// Publishes the next change of one of `app`'s packs on `channel`: the release it made.
    mutating func publish(_ app: String, channel: String = "production") throws -> (release: Int, pack: String, revision: Int) {
        let count = made[app, default: [:]].values.reduce(0, +)
        let pack = count % 4 == 3 ? "bundle" : Self.binaryPacks[count % 4 % 3]
        let number = made[app, default: [:]][pack, default: 0] + 1
        made[app, default: [:]][pack] = number
        let body = pack == "bundle" ? try zip(app, number) : Self.binary(pack, number)
        let query = channel == "production" ? "release=true" : "release=true&channel=\(channel)"
        let answer = try json(
            "PUT", "/v1/apps/\(app)/packs/\(pack)?\(query)", body: body, contentType: pack == "bundle" ? "application/zip" : nil, app: app, expect: [201]
        )
        published += 1
        let release = try #require(answer["release"] as? Int, "\(answer)")
        let revision = try #require((answer["pack"] as? [String: Any])?["revision"] as? Int, "\(answer)")
        return (release, pack, revision)
    }

    mutating func live(_ day: Int) throws {
        let base = Double(day) * 24 * Self.hour
        // Morning: yesterday's rollout of app B halted, or completed every other day.
        try setClock(base + 8 * Self.hour)
        let (a, b, c) = (Self.apps[0], Self.apps[1], Self.apps[2])
        if rolloutRunning {
            try json("POST", "/v1/apps/\(b)/rollouts/production/\(day % 2 == 0 ? "complete" : "halt")", app: b, expect: [201])
            rolloutRunning = false
        }
        // The working day's publishes, spread from 09:00 to 17:00, taking turns among the apps.
        for index in 0..<plan.releasesPerDay {
            try setClock(base + 9 * Self.hour + 8 * Self.hour * Double(index) / Double(plan.releasesPerDay))
            let app = Self.apps[index % Self.apps.count]
            lastProduction[app] = try publish(app)
        }
        try setClock(base + 17 * Self.hour)
        // App A: a channel made for today's QA, the one of three days ago removed.
        if let live = lastProduction[a] {
            try json("POST", "/v1/apps/\(a)/channels/qa-\(day)?release=\(live.release)", app: a, expect: [200, 201])
            if day >= 3 { try json("DELETE", "/v1/apps/\(a)/channels/qa-\(day - 3)", app: a, expect: [200, 204]) }
        }
        // App B: a candidate on beta, rolled out to 10 % of production until tomorrow.
        if lastProduction[b] != nil {
            let candidate = try publish(b, channel: "beta")
            try json("POST", "/v1/apps/\(b)/rollouts/production/start?release=\(candidate.release)&fraction=0.1", app: b, expect: [201])
            rolloutRunning = true
        }
        // Devices report on what each app's production serves.
        try setClock(base + 20 * Self.hour)
        for app in [a, b, c] {
            guard let live = lastProduction[app] else { continue }
            let report = DeviceReport(channel: "production", release: live.release, packs: [.init(id: live.pack, revision: live.revision, outcome: .installed, error: nil, bytes: 10)])
            for _ in 0..<10 {
                let response = try call("POST", "/v1/apps/\(app)/reports", body: report.encoded())
                guard response.status == 202 else { throw YearError("a report on \(app) release \(live.release): \(response.status) \(response.bodyText.prefix(300))") }
            }
        }
    }

    /// Moves the clock to 23:00 and waits for the origin's own work: patches, then two
    /// maintenance passes begun after the clock moved (the first may have begun before).
    func settle(_ day: Int) throws {
        try waitFor("patch making to be idle") { try metric("depot_patch_apps_waiting") == 0 }
        try setClock(Double(day) * 24 * Self.hour + 23 * Self.hour)
        let passes = try metric("depot_background_passes_total", ["work": "maintenance"])
        try waitFor("two maintenance passes") { try metric("depot_background_passes_total", ["work": "maintenance"]) >= passes + 2 }
        try waitFor("patch making to be idle") { try metric("depot_patch_apps_waiting") == 0 }
    }

    /// A backup into `work/backups/day-N`, from the previous one; the one before that removed.
    mutating func backup(_ day: Int) throws -> (seconds: Double, copiedBytes: Int, linked: Int) {
        try FileSystem.createDirectory(work + "/backups")
        let destination = work + "/backups/day-\(day)"
        let began = ContinuousClock.now
        let output = try run(["backup", "--data", data] + (backups.last.map { ["--previous", $0] } ?? []) + [destination])
        let seconds = Self.seconds(ContinuousClock.now - began)
        backups.append(destination)
        if backups.count > 2 { Installer.removeTree(backups.removeFirst()) }
        // "…: F files, B bytes copied, L blobs and R release records (X bytes) linked from …"
        func number(_ pattern: String) -> Int {
            guard let range = output.range(of: pattern, options: .regularExpression) else { return 0 }
            return Int(output[range].prefix { $0.isNumber }) ?? 0
        }
        return (seconds, number(#"[0-9]+ bytes copied"#), number(#"[0-9]+ blobs and"#) + number(#"[0-9]+ release records"#))
    }

    /// Bytes the data folder takes on disk: blobs, and everything else.
    func diskBytes() -> (blobs: Int64, other: Int64) {
        func size(_ path: String) -> Int64 {
            let result = try? Processes.run("/usr/bin/du", ["-s", "-B1", path])
            return Int64(result?.stdout.split(separator: "\t").first ?? "") ?? 0
        }
        let blobs = size(data + "/blobs")
        return (blobs, size(data) - blobs)
    }

    /// Lives every day of the plan; returns what each left.
    mutating func live() throws -> [Day] {
        var restart: Restart? = try startServer()
        defer { stopServer() }
        for day in 0..<plan.days {
            if day > 0 && day % plan.restartEvery == 0 {
                stopServer()
                restart = try startServer()
            }
            let patchesBefore = try metric("depot_background_cpu_seconds_total", ["work": "patches"])
            let maintenanceBefore = try metric("depot_background_cpu_seconds_total", ["work": "maintenance"])
            let passesBefore = try metric("depot_background_passes_total", ["work": "maintenance"])
            try live(day)
            try settle(day)
            let passes = try metric("depot_background_passes_total", ["work": "maintenance"]) - passesBefore
            let maintenance = try metric("depot_background_cpu_seconds_total", ["work": "maintenance"]) - maintenanceBefore
            let backup = (day + 1) % plan.backupEvery == 0 ? try backup(day) : nil
            let pid = try #require(server).process.processIdentifier
            let disk = diskBytes()
            days.append(Day(
                day: day + 1, releases: published, residentKiB: ProcessProbe.residentKiB(pid),
                patchSeconds: try metric("depot_background_cpu_seconds_total", ["work": "patches"]) - patchesBefore, maintenancePerPass: maintenance / max(1, passes),
                blobBytes: disk.blobs, otherBytes: disk.other, openFiles: ProcessProbe.openFiles(pid), restart: restart, backup: backup
            ))
            restart = nil
        }
        return days
    }

    /// The days as a Markdown table.
    static func table(_ days: [Day]) -> String {
        var rows = ["| day | releases | RSS MiB | patch CPU s | CPU s per maintenance pass | blobs MiB | rest MiB | open files | restart: listening s, first pass s, release files read | backup s (copied, linked) |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
        for day in days {
            let restart = day.restart.map { String(format: "%.2f, %.2f, %d", $0.listening, $0.firstPass, $0.releaseFilesRead) } ?? ""
            let backup = day.backup.map { String(format: "%.2f (%.1f MiB copied, %d files linked)", $0.seconds, Double($0.copiedBytes) / 1_048_576, $0.linked) } ?? ""
            rows.append(String(
                format: "| %d | %d | %.1f | %.2f | %.3f | %.1f | %.2f | %d | %@ | %@ |", day.day, day.releases, Double(day.residentKiB) / 1024, day.patchSeconds, day.maintenancePerPass,
                Double(day.blobBytes) / 1_048_576, Double(day.otherBytes) / 1_048_576, day.openFiles, restart, backup
            ))
        }
        return rows.joined(separator: "\n")
    }
}

struct YearError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
