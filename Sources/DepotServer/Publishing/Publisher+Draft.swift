import DepotCore
import Foundation

/// The draft, in domain terms: a pack's staged change dropped or its removal staged, and the
/// draft as the next release would list it.
extension Publisher {
    /// Stages a pack's removal (or drops its staged upload). A live pack needs `confirmLive`:
    /// devices that installed it delete it at their next sync. Returns whether it was live. With
    /// `stagedOnly`, only the pack's staged change (an upload or a removal) goes: the live pack
    /// stays as it is.
    func remove(_ pack: String, app: String, confirmLive: Bool, stagedOnly: Bool = false, scope: [String]? = nil) throws -> RemovalResult {
        var isLive = false
        var dropped: String?
        try releases.stage(app) { staging, live in
            isLive = live.contains { $0.id == pack }
            try staging.checkChange(pack, by: scope)
            if stagedOnly {
                guard staging.changedPacks.contains(pack) else { throw DepotError.notFound("a staged change of pack \(pack) in the draft of app \(app)") }
                let staged = staging.upserts.removeValue(forKey: pack)
                staging.removals.remove(pack)
                if let staged, !live.contains(where: { $0.sha256 == staged.sha256 }) { dropped = staged.sha256 }
                staging.record(pack, scope: nil)
                return
            }
            let staged = staging.upserts.removeValue(forKey: pack)
            guard isLive || staged != nil else { throw DepotError.notFound("pack \(pack) in the live release or the draft of app \(app)") }
            if isLive {
                guard confirmLive else {
                    throw DepotError.conflict("live_pack", "pack \(pack) is live: devices that installed it will delete it at their next sync; repeat with ?removeLive=true to stage its removal (or ?staged=true to drop only its staged change)")
                }
                staging.removals.insert(pack)
            }
            staging.record(pack, scope: scope)
            if let staged, !live.contains(where: { $0.sha256 == staged.sha256 }) { dropped = staged.sha256 }
        }
        // Only once the draft no longer references it.
        removeUnneeded([dropped].compactMap { $0 })
        let note = stagedOnly ? "the staged change of \(pack) was dropped; the live pack is unchanged"
            : isLive ? "staged: the next release drops \(pack), and devices that installed it will delete it" : "the staged upload of \(pack) was dropped"
        return RemovalResult(app: app, pack: pack, live: isLive, note: note)
    }

    /// The draft, as the next release on `channel` would list it.
    func staging(_ app: String, channel: String) throws -> StagingView {
        let staging = try releases.staging(app)
        let live = try releases.current(app, channel: channel)
        let next = staging.merged(into: try live?.manifest.packs ?? []).packs
        return StagingView(
            app: app, base: live?.version ?? 0, changed: staging.upserts.keys.sorted(), removed: staging.removals.sorted(), next: next,
            scopes: staging.scopes.isEmpty ? nil : staging.scopes, fingerprint: staging.fingerprint
        )
    }
}
