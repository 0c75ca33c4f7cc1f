import DepotCore
import Foundation

/// The draft of an app's next release, `apps/<app>/staging.json`: packs uploaded or removed
/// since the live release. It becomes a release only through ``ReleaseStore/publish(_:base:change:)``.
struct Staging: Codable, Sendable, Equatable {
    /// Uploaded packs by id; their `revision` is decided when they are released.
    var upserts: [String: PackEntry] = [:]
    /// Pack ids to drop from the next release.
    var removals: Set<String> = []
    /// Per changed pack, the channels of the token that staged the change when it was a token
    /// of trusted publishing (stored with the change); absent: a token of every channel. A change
    /// a `beta` job staged never reaches `production` through anyone's release.
    var scopes: [String: [String]] = [:]

    private enum CodingKeys: String, CodingKey { case upserts, removals }

    /// The packs the draft changes.
    var changedPacks: Set<String> { Set(upserts.keys).union(removals) }

    /// Records who changed `pack`: a token that may act on `scope` (nil: every channel).
    mutating func record(_ pack: String, scope: [String]?) {
        scopes[pack] = changedPacks.contains(pack) ? scope : nil
    }

    /// Refuses a token scoped to channels that would replace or drop what a token of wider
    /// scope staged for `pack`.
    func checkChange(_ pack: String, by scope: [String]?) throws {
        guard let scope, changedPacks.contains(pack), !(scopes[pack].map { Set($0).isSubset(of: scope) } ?? false) else { return }
        throw DepotError(.forbidden, "channel_not_allowed", "pack \(pack)'s staged change was made by a token that may act on more channels than this one")
    }

    /// Refuses a release on `channel` of changes staged for other channels only, and (for a
    /// token scoped to channels) of changes it could not have staged itself.
    func checkRelease(on channel: String, by scope: [String]?) throws {
        let excluded = scopes.filter { $0.value.contains(channel) == false && changedPacks.contains($0.key) }.keys.sorted()
        if !excluded.isEmpty {
            throw DepotError.conflict("draft_scoped", "the draft holds changes staged by a token of trusted publishing for other channels (\(excluded.prefix(10).joined(separator: ", "))): release them on their channel, or drop those changes (DELETE …/packs/{pack}?staged=true) before releasing on \(channel)")
        }
        guard let scope else { return }
        let foreign = changedPacks.filter { pack in !(scopes[pack].map { Set($0).isSubset(of: scope) } ?? false) }.sorted()
        if !foreign.isEmpty {
            throw DepotError.conflict("draft_not_yours", "the draft holds changes staged by a publisher of wider scope (\(foreign.prefix(10).joined(separator: ", "))): a token of trusted publishing releases only what tokens of its channels staged; release them, or drop them (DELETE …/packs/{pack}?staged=true), first")
        }
    }

    var isEmpty: Bool { upserts.isEmpty && removals.isEmpty }

    /// The draft's fingerprint: 32 hex digits of the SHA-256 of its changes (each staged pack's
    /// entry, the removals), in a fixed order. What a person confirmed (`draft=` of a release)
    /// is compared with it, so that a change staged since is never published unseen.
    var fingerprint: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var bytes: [UInt8] = []
        for id in upserts.keys.sorted() {
            bytes += Array("+\(id)\n".utf8)
            bytes += (try? encoder.encode(upserts[id])).map(Array.init) ?? []
            bytes.append(0x0a)
        }
        for id in removals.sorted() { bytes += Array("-\(id)\n".utf8) }
        return String(Hex.encode(SHA256Hasher.hash(bytes)).prefix(32))
    }

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
