import DepotCore
import Foundation

/// What an upload or a release did.
struct PublishResult: Codable, Sendable {
    var app: String
    /// The pack as the release lists it (or, when staged, would list it).
    var pack: PackEntry?
    /// The live release after the call; nil while nothing was ever released.
    var release: Int?
    var staged: Bool
    var changed: Bool
    /// The channel the release went to (or, when staged, would go to).
    var channel: String
    var manifestURL: String
}

/// What a rollback did.
struct RollbackResult: Codable, Sendable {
    var app: String
    var channel: String
    var rolledBackTo: Int
    /// The new release (or the live one, when it already had that content).
    var release: Int
    var changed: Bool
    var packs: [String]
    /// Packs of the live release that the older one did not have: devices delete them.
    var removed: [String]
}

/// What removing a pack from the draft did.
struct RemovalResult: Codable, Sendable {
    var app: String
    var pack: String
    var live: Bool
    var note: String
}

/// The draft, as the next release would list it.
struct StagingView: Codable, Sendable {
    var app: String
    var base: Int
    var changed: [String]
    var removed: [String]
    var next: [PackEntry]
    /// The channels each change may be released on, for changes a token of trusted publishing staged.
    var scopes: [String: [String]]? = nil
    /// The draft's fingerprint: what `POST …/releases?draft=` names so that only this draft is published.
    var fingerprint: String
}

/// What a promotion did.
struct PromotionResult: Codable, Sendable {
    var app: String
    var channel: String
    var release: Int
    var changed: Bool
    var manifestURL: String
}

/// An app's releases and the channels serving them.
struct ReleaseList: Codable, Sendable {
    var app: String
    /// Production's release.
    var live: Int?
    /// Every channel's release.
    var channels: [String: Int]
    var releases: [ReleaseSummary]
}

struct ReleaseSummary: Codable, Sendable {
    var version: Int
    var publishedAt: Date
    var expiresAt: Date
    var packs: Int
    /// Whether production serves it.
    var live: Bool
    /// The channels that serve it.
    var channels: [String]
    var url: String
}

/// An app's channels.
struct ChannelList: Codable, Sendable {
    struct Channel: Codable, Sendable {
        var name: String
        var release: Int
        var manifestURL: String
    }
    var app: String
    var channels: [Channel]
}
