import DepotCore
import Foundation

/// The draft of an app's next release, `apps/<app>/staging.json`: packs uploaded or removed
/// since the live release. It becomes a release only through ``ReleaseStore/publish(_:base:change:)``.
struct Staging: Codable, Sendable, Equatable {
    /// Uploaded packs by id; their `revision` is decided when they are released.
    var upserts: [String: PackEntry] = [:]
    /// Pack ids to drop from the next release.
    var removals: Set<String> = []
    /// The channels the draft may be released on, when a token scoped to channels (trusted
    /// publishing) changed it: the intersection of their scopes. Nil: any channel. A draft a
    /// `beta` job staged never reaches `production` through another publisher's release.
    var channels: [String]? = nil

    /// Records a change made by a token that may act on `scope` (nil: every channel).
    mutating func changed(by scope: [String]?) {
        guard let scope else { return }
        channels = (channels ?? scope).filter(scope.contains)
    }

    /// Refuses a release on `channel` that the draft's scope excludes.
    func checkRelease(on channel: String) throws {
        guard let channels, !channels.contains(channel) else { return }
        throw DepotError.conflict("draft_scoped", "the draft holds changes staged by a token for channel \(channels.joined(separator: ", ")) only: release it there, or drop those packs from the draft (DELETE …/packs/{pack}) before releasing on \(channel)")
    }

    var isEmpty: Bool { upserts.isEmpty && removals.isEmpty }

    /// The next release's packs: `live` with the staged changes. A staged pack whose plaintext
    /// equals the live one keeps the live container and revision (devices keep their copy);
    /// other content gets the next revision. Returns the packs and the staged blobs that ended
    /// up unused (identical content), which the caller deletes.
    func merged(into live: [PackEntry]) -> (packs: [PackEntry], unusedBlobs: [String]) {
        var packs = Dictionary(live.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        var unused: [String] = []
        for id in removals { packs[id] = nil }
        for (id, staged) in upserts {
            guard let old = packs[id] else {
                var entry = staged
                entry.revision = 1
                packs[id] = entry
                continue
            }
            var entry = staged
            if old.plaintextSHA256 == staged.plaintextSHA256 && old.keyID == staged.keyID {
                // A draft left by a crash after its release went live names the live container
                // itself: that blob is in use, never unused.
                if staged.sha256 != old.sha256 { unused.append(staged.sha256) }
                entry.url = old.url
                entry.size = old.size
                entry.sha256 = old.sha256
                entry.revision = old.revision
                entry.patches = old.patches
            } else {
                entry.revision = old.revision + 1
            }
            packs[id] = entry
        }
        return (packs.values.sorted { $0.id < $1.id }, unused)
    }
}
