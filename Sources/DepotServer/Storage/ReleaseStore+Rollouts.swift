import DepotCore

/// What a publish does to a rollout on its channel.
enum RolloutChange {
    /// A change of content (a publish of the draft, a rollback): refused while a rollout runs
    /// (its candidate was chosen against the current packs); a halted one is dropped.
    case content
    /// The same content named again (patches, a re-signing): the rollout carries on.
    case keep
    /// A rollout step: the rollout the new release carries, from the channel's live release
    /// (nil before it has one), computed under the publish lock.
    case compute((LiveManifest?) throws -> Rollout?)
}

extension ReleaseStore {
    /// What a content change meets on a channel whose rollout runs.
    static func rolloutRunning(_ rollout: Rollout, channel: String) -> DepotError {
        DepotError.conflict("rollout_running", "a rollout of release \(rollout.release) runs on channel \(channel) (\(RolloutRecord.percent(rollout.fraction)) of devices): halt or complete it first (depot rollout halt|complete); nothing changed")
    }
}
