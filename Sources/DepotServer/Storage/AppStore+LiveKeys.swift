import DepotCore
import Foundation

/// Which pack keys the packs devices can be given are encrypted under.
public struct LivePackKeys: Sendable, Hashable {
    /// Per key id, the distinct packs (container SHA-256s) of the live releases — every channel's
    /// live release and its running rollout's candidates — encrypted under it.
    public var live: [String: Set<String>] = [:]
    /// The distinct packs of the live releases.
    public var livePacks: Set<String> = []
    /// Per key id, the packs of the draft (the next release) encrypted under it.
    public var draft: [String: Set<String>] = [:]

    /// The keys some live or drafted pack is encrypted under.
    public var keysInUse: Set<String> { Set(live.keys).union(draft.keys) }
}

extension AppStore {
    /// What the app's live releases and its draft are encrypted under, read from the data
    /// folder (a channel's live release as it serves it: its copy signed for the channel, if any).
    public func livePackKeys(_ id: String) throws -> LivePackKeys {
        guard settings(id) != nil else { throw DepotError.notFound("app \(id)") }
        // The release store's own reading (pointers, copies signed for a channel); nothing cached.
        let releases = ReleaseStore(folder: folder, apps: self, manifestLifetime: 0)
        var out = LivePackKeys()
        for channel in releases.channels(id).keys {
            for pack in try releases.current(id, channel: channel)?.manifest.allEntries ?? [] where !pack.keyID.isEmpty {
                out.live[pack.keyID, default: []].insert(pack.sha256)
                out.livePacks.insert(pack.sha256)
            }
        }
        for pack in try releases.staging(id).upserts.values where !pack.keyID.isEmpty {
            out.draft[pack.keyID, default: []].insert(pack.sha256)
        }
        return out
    }

    /// What an app's builds are given: the manifest public keys (and, for an app with a root of
    /// trust, its newest root, which such a build pins instead) and the pack keys a build needs —
    /// the current key, the staged ones (so that it reads packs published after the next
    /// retirement), and the retired ones a pack of a live release or of the draft is still
    /// encrypted under (so that a build exported after a retirement reads the older live packs).
    public func clientConfiguration(_ id: String) throws -> ClientConfiguration {
        guard settings(id) != nil else { throw DepotError.notFound("app \(id)") }
        // One read of the key file: a retirement meanwhile cannot leave the ring without its current key.
        let stored = try storedPackKeys(id)
        let (ring, states) = (try stored.ring(), stored.states)
        let inUse = try livePackKeys(id).keysInUse
        var given = try KeyRing([String: [UInt8]]())
        for keyID in [states.current] + states.staged + states.retired.filter(inUse.contains) {
            if let key = ring[keyID] { try given.insert(key, id: keyID) }
        }
        let newest = try RootStore(folder: folder).trust(id)?.newest
        var configuration = ClientConfiguration(app: id, manifestPublicKeys: try signingKeys().map(\.publicKey), keyRing: given, root: newest?.envelope)
        if let root = newest?.document {
            // Each protected channel's signed release now: a new install accepts none older.
            let releases = ReleaseStore(folder: folder, apps: self, manifestLifetime: 0)
            var floors: [String: Int] = [:]
            for channel in releases.channels(id).keys where root.protects(channel) {
                guard let live = try releases.current(id, channel: channel),
                      let signed = releases.signedRelease(id, channel: channel, packs: try live.manifest.packs, root: root) else { continue }
                floors[channel] = signed.release
            }
            configuration.releaseFloors = floors.isEmpty ? nil : floors
        }
        return configuration
    }
}
