import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// What the origin does by itself stays level once its first month has gone by (issue 63): a
/// slice of ``YearOfLife`` (42 simulated days, a restart every 10; `Deploy/bench/year.sh` runs
/// the whole year on a release build with the same checks). After day 30 — the blob retention —
/// each day must leave: the blobs' bytes within 15 % of the highest of days 21–30 (the sweep
/// removes what a month ago added); the rest of the data folder (release records, the catalog,
/// report days) grown by at most 64 KiB per release since day 30 (what a release adds, never a
/// rewrite of the history); resident memory under the highest of days 21–30 plus 16 MiB; the
/// day's patch making and a maintenance pass each under twice their median of days 11–30 plus a
/// little (a pass that read the history would grow with it); open files under days 1–30's
/// highest plus 8; an incremental backup copied at most 1.5× what one did in the first month.
/// Each process started after day 30 ends its life within those margins of its third day.
/// The restarts after day 30 read alike (start-up and its first pass: the live releases and
/// the retention's, not the history).
@Suite("Year of life", .serialized, .enabled(if: HeavyTests.enabled, "run with the heavy suites, DEPOT_HEAVY_TESTS=1"))
struct YearOfLifeTests {
    @Test("A busy origin through simulated days (three apps, releases with zips, channels made and removed, rollouts started and halted, reports, weekly backups, restarts): memory, background CPU, disk, open files and start-up's reads stay level after the first month")
    func yearOfLife() throws {
        let work = TemporaryDirectory("depot-year")
        defer { work.remove() }
        let plan = YearOfLife.Plan(days: 42, releasesPerDay: 9, restartEvery: 10, backupEvery: 7).fromEnvironment()
        var year = try YearOfLife(plan: plan, work: work.path)
        let began = ContinuousClock.now
        let days: [YearOfLife.Day]
        do {
            days = try year.live()
        } catch {
            // What the days so far left, and what the origin said last (a crash, a refusal).
            let said = year.server.map { String($0.errorOutputSoFar().suffix(4_000)) } ?? ""
            let partial = "year of life: \(plan), stopped on day \(year.days.count + 1): \(error)\n" + YearOfLife.table(year.days) + "\norigin's log, the end:\n" + said
            print(partial)
            if let out = ProcessInfo.processInfo.environment["DEPOT_YEAR_TABLE"] { try? FileSystem.writeAtomically(Array(partial.utf8), to: out) }
            throw error
        }
        let table = YearOfLife.table(days)
        print("year of life: \(plan), lived in \(ContinuousClock.now - began)\n" + table)
        if let out = ProcessInfo.processInfo.environment["DEPOT_YEAR_TABLE"] {
            try FileSystem.writeAtomically(Array("\(plan)\n\n\(table)\n".utf8), to: out)
        }
        try #require(days.count == plan.days && plan.days > 30)
        let month = days.prefix(30), later = days.dropFirst(30)
        let lastDays = month.suffix(10)
        let blobCeiling = Double(lastDays.map(\.blobBytes).max()!) * 1.15
        let residentCeiling = lastDays.map(\.residentKiB).max()! + 16 * 1024
        // Medians of days 11–30 (the first days' history is too short to tell).
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        let patchCeiling = 2 * median(month.dropFirst(10).map(\.patchSeconds)) + 1
        let passCeiling = 2 * median(month.dropFirst(10).map(\.maintenancePerPass)) + 0.05
        let filesCeiling = month.map(\.openFiles).max()! + 8
        let day30 = month.last!
        for day in later {
            let context = "day \(day.day):\n" + table
            #expect(Double(day.blobBytes) <= blobCeiling, "blobs \(day.blobBytes) bytes, more than 1.15× days 21–30's highest; \(context)")
            let grown = day.otherBytes - day30.otherBytes, releases = day.releases - day30.releases
            #expect(grown <= Int64(releases) * 65_536, "the rest of the data folder grew \(grown) bytes over \(releases) releases since day 30; \(context)")
            #expect(day.residentKiB <= residentCeiling, "RSS \(day.residentKiB) KiB, ceiling \(residentCeiling); \(context)")
            #expect(day.patchSeconds <= patchCeiling, "patch making took \(day.patchSeconds) CPU s, ceiling \(patchCeiling); \(context)")
            #expect(day.maintenancePerPass <= passCeiling, "a maintenance pass took \(day.maintenancePerPass) CPU s, ceiling \(passCeiling); \(context)")
            #expect(day.openFiles <= filesCeiling, "\(day.openFiles) open files, ceiling \(filesCeiling); \(context)")
        }
        // Within one process: the reference days above and the later ones are at the same ages
        // of their processes (a restart every `restartEvery` days), so a leak that grows with a
        // process's life is checked on its own: each process after day 30 that lived 7 days or
        // more ends no higher than on its third day plus the same margins.
        let starts = days.filter { $0.restart != nil }.map(\.day)
        for (index, start) in starts.enumerated() where start > 30 {
            let end = index + 1 < starts.count ? starts[index + 1] - 1 : days.last!.day
            guard end - start >= 6 else { continue }
            let third = days[start + 1], last = days[end - 1]
            #expect(last.residentKiB <= third.residentKiB + 16 * 1024, "the process started on day \(start): RSS \(third.residentKiB) KiB on day \(third.day), \(last.residentKiB) KiB on day \(last.day)")
            #expect(last.openFiles <= third.openFiles + 8, "the process started on day \(start): \(third.openFiles) open files on day \(third.day), \(last.openFiles) on day \(last.day)")
        }
        // Start-up and its first maintenance pass read the live releases and the retention's
        // (the sweep's needs), not the history: restarts after the first month read alike.
        let restarts = days.compactMap { day in day.restart.map { (day: day.day, restart: $0) } }.filter { $0.day > 30 }
        try #require(restarts.count >= 2, "the plan restarts at least twice after day 30")
        for later in restarts.dropFirst() {
            let first = restarts[0]
            #expect(
                later.restart.releaseFilesRead <= first.restart.releaseFilesRead + 2 * plan.releasesPerDay + 8,
                "a restart on day \(later.day) read \(later.restart.releaseFilesRead) release files, day \(first.day)'s \(first.restart.releaseFilesRead)"
            )
        }
        // The backups ran, each after the first linking what the one before held.
        let backups = days.compactMap(\.backup)
        #expect(backups.count == plan.days / plan.backupEvery)
        #expect(backups.dropFirst().allSatisfy { $0.linked > 0 }, "\(backups)")
        // An incremental backup copies what changed in its week (blobs and records alike): level too.
        let incremental = days.filter { $0.backup != nil }.dropFirst()
        let weekCeiling = Double(incremental.filter { $0.day <= 30 }.map { $0.backup!.copiedBytes }.max() ?? 0) * 1.5 + 65_536
        for day in incremental where day.day > 30 {
            #expect(Double(day.backup!.copiedBytes) <= weekCeiling, "the backup of day \(day.day) copied \(day.backup!.copiedBytes) bytes, ceiling \(Int(weekCeiling)):\n\(table)")
        }
    }
}
