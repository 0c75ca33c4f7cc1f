import DepotCore
import Foundation

extension DataRestore {
    /// What a restored folder names and does not hold, found before it takes the data folder's
    /// place (``check(_:stored:takenAt:retention:)``).
    public struct Findings: Sendable {
        /// A pointer or a rollout naming a release the folder lacks (`apps/X/channels/beta: release 12`).
        public var dangling: [String] = []
        /// Blobs that what devices are served or a draft names lack: a pointed release, a
        /// rollout's candidate or base, a draft. The origin would answer 404 for them.
        public var missingLive: [String] = []
        /// Blobs of releases published within the retention before the backup, not live, that
        /// the store lacks: a rollback to those releases would fail.
        public var missingRecent: Int = 0
        /// Draft packs whose blob the store lacks (no device is served a draft: publishing
        /// them fails, naming the pack).
        public var missingDraft: [String] = []

        /// True when the restored folder can serve what it names.
        public var whole: Bool { dangling.isEmpty && missingLive.isEmpty }

        /// One line each, for a backup or a restore that goes on (`--accept-missing`).
        public var lines: [String] {
            dangling + missingLive + missingDraft.map { $0 + " (a draft: publishing it will fail)" }
                + (missingRecent > 0 ? ["\(missingRecent) blobs of releases published in the 30 days before are missing: rolling back to those releases will fail"] : [])
        }

        /// The refusal for a folder that is not whole.
        func refusal(where place: String) -> DepotError {
            let shown = (dangling.prefix(5) + missingLive.prefix(5)).joined(separator: "; ")
            let more = dangling.count + missingLive.count > 10 ? " (and \(dangling.count + missingLive.count - 10) more)" : ""
            return DepotError.conflict("restore_incomplete", "the backup names what \(place) does not hold: \(shown)\(more). Restoring it would serve manifests naming missing files; nothing was changed. An origin on object storage keeps its blobs in the bucket: give --storage s3 and the bucket's options. There, a backup's blobs are kept until its hold expires (depot backup --keep-days): restore a more recent backup, or one taken with a longer hold; or give --accept-missing to restore it as it is (those channels then answer 404 for those packs until they are published again)")
        }
    }

    /// What `folder` names: blobs that live state names (pointed releases, running rollouts,
    /// drafts; each with where), blobs of other releases published within `retention` before
    /// `takenAt`, and pointers or rollouts naming a release the folder lacks.
    static func named(_ folder: DataFolder, takenAt: Date, retention: TimeInterval) throws -> (live: [(what: String, blob: String)], recent: Set<String>, dangling: [String], drafts: [(what: String, blob: String)]) {
        let releases = ReleaseStore(folder: folder, apps: AppStore(folder: folder), manifestLifetime: 90 * 86_400)
        var live = [(what: String, blob: String)]()
        var recent = Set<String>()
        var dangling: [String] = []
        var drafts = [(what: String, blob: String)]()
        for app in FileSystem.contents(of: folder.apps) where Identifier.isValidApp(app) && FileSystem.isDirectory(folder.app(app)) {
            let held = Set(ReleaseStore.versions(in: folder.releases(app)))
            var pointed: [(what: String, release: Int)] = []
            // Not `head`: the newest release, live or not (after a rollback its blobs go once
            // it is past the retention).
            if let number = ReleaseStore.readNumber(folder.currentPointer(app)), number > 0 { pointed.append(("apps/\(app)/current", number)) }
            for channel in FileSystem.contents(of: folder.channels(app)) where Identifier.isValidChannel(channel) {
                if let number = ReleaseStore.readNumber(folder.channels(app) + "/" + channel) { pointed.append(("apps/\(app)/channels/\(channel)", number)) }
            }
            for name in FileSystem.contents(of: folder.app(app) + "/rollouts") where name.hasSuffix(".json") {
                let record = try StoredJSON.read(RolloutRecord.self, from: folder.app(app) + "/rollouts/" + name)
                // Only a running rollout serves its candidate (a halted or completed one names
                // releases as its history; its base is the channel's pointer anyway).
                guard record.state == .running, record.release > 0 else { continue }
                pointed.append(("apps/\(app)/rollouts/\(name) (candidate)", record.release))
            }
            for (what, number) in pointed {
                guard held.contains(number) else {
                    dangling.append("\(what): release \(number), which the backup lacks")
                    continue
                }
                for pack in try releases.load(app, number).manifest.allEntries {
                    for blob in pack.blobs { live.append(("release \(number) of \(app), pack \(pack.id)", blob)) }
                }
            }
            for pack in try releases.staging(app).upserts.values { drafts.append(("the draft of \(app), pack \(pack.id)", pack.sha256)) }
            for version in held where !pointed.contains(where: { $0.release == version }) {
                let manifest = try releases.load(app, version).manifest
                if manifest.publishedAt >= takenAt.addingTimeInterval(-retention) { for pack in manifest.allEntries { recent.formUnion(pack.blobs) } }
            }
        }
        return (live, recent, dangling, drafts)
    }

    /// Checks the folder at `folder` (a restore's copy before it takes the data folder's place,
    /// or a backup's before it gets its name): every pointer and running rollout names a
    /// release it holds, and every blob a pointed release, a rollout or a draft names is in
    /// `stored` (the copy's `blobs/`, or the bucket's listing). Blobs of other releases
    /// published within `retention` before `takenAt` are only counted when missing (a sweep
    /// with a shorter retention removes them legitimately).
    public static func check(_ folder: DataFolder, stored: Set<String>, takenAt: Date, retention: TimeInterval = 30 * 86_400) throws -> Findings {
        let (live, recent, dangling, drafts) = try named(folder, takenAt: takenAt, retention: retention)
        var findings = Findings(dangling: dangling)
        var shown = Set<String>()
        for item in live where !stored.contains(item.blob) && shown.insert(item.blob).inserted {
            findings.missingLive.append("\(item.what): blob \(item.blob.prefix(16))…")
        }
        findings.missingRecent = recent.subtracting(stored).subtracting(live.map(\.blob)).count
        findings.missingDraft = drafts.filter { !stored.contains($0.blob) }.map { "\($0.what): blob \($0.blob.prefix(16))…" }
        return findings
    }

    /// Every blob `stored` holds: the folder's `blobs/`, or the bucket's (listed: a listing
    /// that fails throws, never reads as empty).
    static func storedBlobs(_ folder: DataFolder, bucket: BucketState?) throws -> Set<String> {
        if let bucket {
            return Set(try bucket.bucket.list(prefix: "blobs/").map { String($0.key.dropFirst("blobs/".count)) }.filter(Hex.isSHA256))
        }
        return Set(FileBlobStore(folder: folder).enumerate().map(\.sha256))
    }
}
