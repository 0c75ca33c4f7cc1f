import DepotCore
import Foundation
import Logging
import Synchronization

/// Guarded rollouts, in domain terms: a release offered to a fraction of a channel's devices
/// first. Each step publishes the channel's next release (versions only go up) whose signed
/// manifest carries the current packs and the candidate's entries with the fraction and the
/// salt (`Rollout`); every device chooses for itself. The origin keeps a record per
/// channel (``RolloutRecord``) and halts a guarded rollout itself when the candidate's failure
/// rate crosses its threshold.
///
/// Managed apps refuse rollouts: the system, not the app, chooses what a device downloads from
/// the one download manifest, so a device cannot take a candidate.
final class Rollouts: Sendable {
    let publisher: Publisher
    let reports: ReportBook
    private var releases: ReleaseStore { publisher.releases }
    var folder: DataFolder { publisher.folder }
    /// One step at a time per origin (the record and the release it publishes go together).
    let steps = Mutex(())

    init(publisher: Publisher, reports: ReportBook) {
        (self.publisher, self.reports) = (publisher, reports)
    }

    /// The record of a channel's latest rollout, or nil.
    func record(_ app: String, channel: String) -> RolloutRecord? {
        try? StoredJSON.read(RolloutRecord.self, from: folder.rollout(app, channel: channel))
    }

    /// The record, made to agree with what the channel serves first: the signed manifest is the
    /// truth, and a crash between a step's release and its record (or a failed write) leaves
    /// them apart. A rollout in the manifest that the record does not know is taken up
    /// (`recovered`); a running one the manifest no longer carries was completed. Call under `steps`.
    func reconciled(_ app: String, channel: String) throws -> RolloutRecord? {
        var record = record(app, channel: channel)
        let live = try releases.current(app, channel: channel)
        if let live, let rollout = live.rollout {
            let state: RolloutRecord.State = rollout.fraction > 0 ? .running : .halted
            if var known = record, known.salt == rollout.salt, known.state != .completed {
                guard known.fraction != rollout.fraction || known.state != state || known.steps.isEmpty else { return known }
                (known.fraction, known.state) = (rollout.fraction, state)
                known.steps.append(RolloutRecord.Step(at: live.publishedAt, action: "recovered", fraction: rollout.fraction, manifest: live.version, by: "origin"))
                record = known
            } else {
                record = RolloutRecord(
                    app: app, channel: channel, release: rollout.release, baseRelease: 0, state: state, fraction: rollout.fraction, salt: rollout.salt,
                    candidates: rollout.packs.map { RolloutRecord.Candidate(pack: $0.id, revision: $0.revision) }, removed: rollout.removed,
                    haltOnFailureRate: nil, minReports: nil, haltedBy: state == .halted ? "unknown (recovered)" : nil, trigger: nil,
                    steps: [RolloutRecord.Step(at: live.publishedAt, action: "recovered", fraction: rollout.fraction, manifest: live.version, by: "origin")]
                )
            }
            try save(record!)
        } else if let known = record, known.steps.isEmpty {
            // Written before a start whose release never came (a crash, a refusal): no rollout.
            FileSystem.remove(folder.rollout(app, channel: channel))
            record = nil
        } else if var known = record, known.state == .running {
            known.state = .completed
            known.fraction = 1
            try save(known)
            record = known
        }
        return record
    }

    private func save(_ record: RolloutRecord) throws {
        try FileSystem.createDirectory(folder.app(record.app) + "/rollouts")
        try StoredJSON.write(record, to: folder.rollout(record.app, channel: record.channel))
    }

    /// Whether the app's settings require attested reports (its App Attest settings).
    static func requiresAttestation(_ settings: AppSettings) -> Bool {
        settings.attestation?.required == true
    }

    static func checkFraction(_ fraction: Double) throws {
        guard fraction.isFinite, fraction > 0, fraction <= 1 else {
            throw DepotError.badRequest("a rollout's fraction is above 0 and at most 1 (0.1 is 10 % of devices)")
        }
    }

    /// Starts offering release `release` to `fraction` of `channel`'s devices. Its guard counts
    /// only attested reports when `attestedOnly` is set or the app's settings require attestation
    /// (recorded at the start: a later change of the settings does not change a running guard).
    func start(
        _ app: String, channel: String, release: Int, fraction: Double, haltOnFailureRate: Double?, minReports: Int?, attestedOnly: Bool = false,
        force: Bool, acceptRetiredKeys: Bool = false, by: String
    ) throws -> RolloutStatus {
        try Self.checkFraction(fraction)
        if let rate = haltOnFailureRate, !(rate.isFinite && rate >= 0 && rate < 1) {
            throw DepotError.badRequest("haltOnFailureRate is a share of failures from 0 up to (not including) 1: 0.05 halts above 5 %")
        }
        if let minReports, minReports < 1 { throw DepotError.badRequest("minReports is at least 1") }
        if haltOnFailureRate == nil && minReports != nil { throw DepotError.badRequest("minReports goes with haltOnFailureRate") }
        guard let settings = publisher.appSettings(app) else { throw DepotError.notFound("app \(app)") }
        if settings.isManaged {
            throw DepotError.conflict("rollout_managed", "app \(app) is managed: the system chooses what every device downloads from the one download manifest, so a device cannot take a candidate; publish the release on a channel (beta) instead. Nothing changed")
        }
        if attestedOnly && settings.attestation == nil {
            throw DepotError.conflict("attestation_not_configured", "app \(app) takes no App Attest keys, so none of its reports is attested and a guard that counts only attested reports would never see one: configure it first (depot attest configure --app \(app) --app-id TEAMID.BUNDLEID). Nothing changed")
        }
        let onlyAttested: Bool? = attestedOnly || Self.requiresAttestation(settings) ? true : nil
        return try steps.withLock { _ in
            var made: Rollout?
            var base = 0
            var candidates: [RolloutRecord.Candidate] = []
            let before = record(app, channel: channel)
            var provisional = false
            let published: LiveManifest?
            do { published = try releases.publish(app, channel: channel, rolloutChange: .compute({ [releases, publisher] live in
                guard let live else { throw DepotError.notFound("a release on channel \(channel) of app \(app)") }
                if let running = live.rollout, running.fraction > 0 { throw ReleaseStore.rolloutRunning(running, channel: channel) }
                guard release != live.version else {
                    throw DepotError.conflict("release_live", "channel \(channel) serves release \(release) already: a rollout offers a release the channel does not serve yet. Nothing changed")
                }
                guard let target = try releases.release(app, release) else { throw DepotError.notFound("release \(release) of app \(app)") }
                let (targetManifest, liveManifest) = (try target.manifest, try live.manifest)
                try Publisher.requireStored(targetManifest, version: release, in: publisher.blobs)
                let blobs = publisher.blobs
                let rollout = Self.candidate(
                    targetManifest, over: liveManifest, release: release, fraction: fraction, highest: try releases.index(app).highestRevisions,
                    floor: ReleaseFloor.read(releases.folder) ?? 0, isMissing: { blobs.isMissing($0) }
                )
                guard !rollout.packs.isEmpty || !rollout.removed.isEmpty else {
                    throw DepotError.conflict("nothing_to_roll_out", "release \(release) has the packs channel \(channel) serves: there is nothing to roll out. Nothing changed")
                }
                if !acceptRetiredKeys { try Publisher.checkRetiredKeys(rollout.packs, release: release, app: app, apps: publisher.apps) }
                base = live.version
                made = rollout
                // Only what changes revision is the candidate's to measure: a pack whose policy or
                // tags alone changed keeps the live revision, which the other devices report too.
                candidates = rollout.packs.filter { liveManifest[pack: $0.id]?.revision != $0.revision }
                    .map { RolloutRecord.Candidate(pack: $0.id, revision: $0.revision) }
                // The record (its guard above all) is written before the release: a crash between
                // them leaves a record without steps, completed or dropped by ``reconciled``.
                try self.save(RolloutRecord(
                    app: app, channel: channel, release: release, baseRelease: base, state: .running, fraction: fraction, salt: rollout.salt,
                    candidates: candidates, removed: rollout.removed, haltOnFailureRate: haltOnFailureRate,
                    minReports: haltOnFailureRate == nil ? nil : (minReports ?? 20), attestedOnly: onlyAttested, haltedBy: nil, trigger: nil, steps: []
                ))
                provisional = true
                return rollout
            }), change: { $0 }, check: force ? nil : publisher.allowanceGuard(app, channel: channel)) } catch {
                // Refused after the record was written (the allowance guard): the one before stands.
                if provisional {
                    if let before { try save(before) } else { FileSystem.remove(folder.rollout(app, channel: channel)) }
                }
                throw error
            }
            guard let published, let made else { throw DepotError.conflict("nothing_to_roll_out", "nothing changed") }
            let record = RolloutRecord(
                app: app, channel: channel, release: release, baseRelease: base, state: .running, fraction: fraction, salt: made.salt,
                candidates: candidates, removed: made.removed,
                haltOnFailureRate: haltOnFailureRate, minReports: haltOnFailureRate == nil ? nil : (minReports ?? 20), attestedOnly: onlyAttested, haltedBy: nil, trigger: nil,
                steps: [RolloutRecord.Step(at: WallClock.now(), action: "start", fraction: fraction, manifest: published.version, by: by)]
            )
            try save(record)
            publisher.logger.notice("rollout started", metadata: [
                "app": .string(app), "channel": .string(channel), "release": .stringConvertible(release), "fraction": .stringConvertible(fraction),
                "manifest": .stringConvertible(published.version),
            ])
            return status(record)
        }
    }

    /// The candidate's entries: the packs of `target` that differ from the live ones in anything
    /// but their patches (or that it adds) — a changed container with a revision above any the
    /// pack ever had when its own is not above the live one, the same container with the live
    /// revision (its policy or tags changed: nothing to download) — and the packs it drops.
    /// Patches whose blobs are known to be gone are left out (never a URL that answers 404).
    /// `floor` (a restored folder's ``ReleaseFloor``): a changed or added pack whose revision is
    /// below it gets one at or above it, past any the pack has (a release from before the restore
    /// offered again).
    static func candidate(
        _ target: Manifest, over live: Manifest, release: Int, fraction: Double, highest: [String: Int], floor: Int = 0, isMissing: (String) -> Bool
    ) -> Rollout {
        let current = Dictionary(live.packs.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        var packs: [PackEntry] = []
        for var pack in target.packs {
            let now = current[pack.id]
            if let now, now.sha256 == pack.sha256 {
                var same = pack
                (same.revision, same.patches) = (now.revision, now.patches)
                guard same != now else { continue }
                pack.revision = now.revision
            } else {
                if let now, pack.revision <= now.revision { pack.revision = max(highest[pack.id] ?? 0, now.revision) + 1 }
                if pack.revision < floor { pack.revision = max(floor, (highest[pack.id] ?? 0) + 1) }
            }
            if let patches = pack.patches {
                let kept = patches.filter { !isMissing($0.sha256) && $0.fromRevision < pack.revision }
                pack.patches = kept.isEmpty ? nil : kept
            }
            packs.append(pack)
        }
        let kept = Set(target.packs.map(\.id))
        return Rollout(release: release, fraction: fraction, salt: Rollout.newSalt(), packs: packs, removed: live.packs.map(\.id).filter { !kept.contains($0) })
    }

    /// One step on a channel's rollout: the release it publishes carries `next(rollout)`, or,
    /// for `complete`, the candidate's packs and no rollout.
    private func step(
        _ app: String, channel: String, action: String, by: String, complete: Bool = false, trigger: RolloutRecord.Trigger? = nil,
        expecting expected: RolloutExpectation = RolloutExpectation(), _ next: @escaping (Rollout, RolloutRecord) throws -> Rollout
    ) throws -> RolloutStatus {
        try steps.withLock { _ in
            guard var record = try reconciled(app, channel: channel), record.state != .completed else {
                if let release = expected.release {
                    throw DepotError.conflict("rollout_changed", "channel \(channel) has no running or halted rollout now (you saw one of release \(release)): it was completed or replaced. Nothing changed; read the rollout again")
                }
                throw DepotError.notFound("a rollout on channel \(channel) of app \(app)")
            }
            try expected.check(record)
            var fraction = 0.0
            let published = try releases.publish(app, channel: channel, rolloutChange: .compute({ live in
                guard let rollout = live?.rollout, rollout.salt == record.salt else {
                    throw DepotError.conflict("rollout_gone", "channel \(channel) no longer carries the rollout of release \(record.release) (a publish replaced it after a halt). Nothing changed")
                }
                if complete { return nil }
                let changed = try next(rollout, record)
                fraction = changed.fraction
                return changed
            }), change: { packs in
                guard complete, let live = try self.releases.current(app, channel: channel)?.manifest else { return packs }
                return live.choosing(candidate: true).packs
            }, check: complete ? publisher.allowanceGuard(app, channel: channel) : nil)
            guard let published else { throw DepotError.conflict("unchanged", "nothing changed") }
            record.steps.append(RolloutRecord.Step(
                at: WallClock.now(), action: action, fraction: complete ? 1 : fraction, manifest: published.version, by: by, trigger: action == "halt" ? trigger : nil
            ))
            switch action {
            case "complete":
                record.state = .completed
                record.fraction = 1
            case "halt":
                record.state = .halted
                record.fraction = 0
                record.haltedBy = by
                record.trigger = trigger
            default:
                record.state = .running
                record.fraction = fraction
                record.haltedBy = nil
            }
            try save(record)
            publisher.logger.notice("rollout \(action)", metadata: [
                "app": .string(app), "channel": .string(channel), "release": .stringConvertible(record.release), "fraction": .stringConvertible(record.fraction),
                "manifest": .stringConvertible(published.version), "by": .string(by),
            ])
            return status(record)
        }
    }

    /// Raises the fraction (every device that was in stays in); resumes a halted rollout.
    func advance(_ app: String, channel: String, fraction: Double, by: String, expecting: RolloutExpectation = RolloutExpectation()) throws -> RolloutStatus {
        try Self.checkFraction(fraction)
        return try step(app, channel: channel, action: "advance", by: by, expecting: expecting) { rollout, _ in
            guard fraction > rollout.fraction else {
                throw DepotError.conflict("fraction_not_raised", "the rollout reaches \(RolloutRecord.percent(rollout.fraction)) of devices; advancing only raises it (to take devices back, halt it). Nothing changed")
            }
            var next = rollout
            next.fraction = fraction
            return next
        }
    }

    /// Fraction 0: devices that took the candidate go back to the current release at their next event.
    /// `measured`, when given (the guard): only the rollout with this salt, counted from this
    /// manifest — not one started, or resumed, since the figures were read.
    func halt(
        _ app: String, channel: String, by: String, trigger: RolloutRecord.Trigger? = nil, measured: (salt: String, from: Int)? = nil,
        expecting: RolloutExpectation = RolloutExpectation()
    ) throws -> RolloutStatus {
        try step(app, channel: channel, action: "halt", by: by, trigger: trigger, expecting: expecting) { rollout, record in
            if let measured, measured.salt != rollout.salt || measured.from != record.countingFrom {
                throw DepotError.conflict("rollout_changed", "the rollout on channel \(channel) was started or resumed since its figures were read. Nothing changed")
            }
            guard rollout.fraction > 0 else {
                throw DepotError.conflict("rollout_halted", "the rollout of release \(record.release) on channel \(channel) is halted already. Nothing changed")
            }
            var next = rollout
            next.fraction = 0
            return next
        }
    }

    /// The candidate becomes the channel's release, for every device.
    func complete(_ app: String, channel: String, by: String, expecting: RolloutExpectation = RolloutExpectation()) throws -> RolloutStatus {
        try step(app, channel: channel, action: "complete", by: by, complete: true, expecting: expecting) { rollout, _ in rollout }
    }

    /// The record with its figures, or 404.
    func status(_ app: String, channel: String) throws -> RolloutStatus {
        guard let record = try steps.withLock({ _ in try reconciled(app, channel: channel) }) else { throw DepotError.notFound("a rollout on channel \(channel) of app \(app)") }
        return status(record)
    }

    private func status(_ record: RolloutRecord) -> RolloutStatus {
        self.reports.settle()
        let tally = self.reports.candidateFigures(record)
        let (reports, failures, byKind) = (tally.reports, tally.failures, tally.byKind)
        let attested = tally.attested
        return RolloutStatus(
            app: record.app, channel: record.channel, state: record.state, release: record.release, baseRelease: record.baseRelease, fraction: record.fraction,
            manifest: (try? releases.current(record.app, channel: record.channel)?.version) ?? 0, candidates: record.candidates, removed: record.removed,
            haltOnFailureRate: record.haltOnFailureRate, minReports: record.minReports, haltedBy: record.haltedBy, trigger: record.trigger, steps: record.steps,
            reports: reports, failures: failures, failureRate: reports > 0 ? Double(failures) / Double(reports) : nil, failuresByKind: byKind,
            attestedOnly: record.countsAttestedOnly, attestedReports: attested.reports, attestedFailures: attested.failures,
            attestedFailureRate: attested.reports > 0 ? Double(attested.failures) / Double(attested.reports) : nil, attestedFailuresByKind: attested.byKind,
            manifestURL: publisher.urls.manifest(record.app, channel: record.channel)
        )
    }

    /// Fleet figures of a channel over `days` days, with its rollout's status and its keys section.
    func fleet(_ app: String, channel: String, days: Int) -> FleetFigures {
        let record = try? steps.withLock { _ in try reconciled(app, channel: channel) }
        let figures = reports.figures(app, days: days)
        return FleetFigures(app: app, channel: channel, figures: figures, rollout: record.flatMap { $0 }.map(status), keys: FleetKeys(apps: publisher.apps, app: app, channel: channel, figures: figures))
    }
}
