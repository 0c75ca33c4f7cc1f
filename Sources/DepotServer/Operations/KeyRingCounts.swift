import DepotCore
import Foundation

/// Reports counted by the key ring a build holds: per channel and day, how many reports named
/// each set of pack key ids (``DeviceReport/packKeys``) and each set of manifest key ids
/// (``DeviceReport/manifestKeys``). A day keeps at most ``ringsPerDay`` distinct rings per kind
/// and channel, and ``ringsPerDayInAll`` in all: a report naming another one counts as ``other``
/// (no client grows a day without bound: at most about 2 MiB of ring names an app and day).
/// Ids only: a report never carries a key.
enum KeyRingCounts {
    enum Kind: String, Codable, Hashable, Sendable, CaseIterable {
        case pack, manifest
    }

    /// What one count is about.
    struct Key: Hashable, Sendable {
        var kind: Kind
        var channel: String
        /// The ids, sorted, joined with `,` (no key id has a comma), or ``KeyRingCounts/other``.
        var ring: String
    }

    /// Distinct rings a day keeps per kind and channel.
    static let ringsPerDay = 64
    /// Distinct rings a day keeps in all (every kind and channel).
    static let ringsPerDayInAll = 1_024
    /// The ring of reports past the bound (not an id: `*` is no key id's character).
    static let other = "*"
    /// The longest ring a stored line may name (32 ids of 64 characters and their commas).
    static let longestRing = 32 * 65

    /// A ring's name: its ids sorted, joined with `,`.
    static func ring(_ ids: [String]) -> String { ids.sorted().joined(separator: ",") }

    /// A ring's ids (none for ``other``).
    static func ids(_ ring: String) -> Set<String> { ring == other ? [] : Set(ring.split(separator: ",").map(String.init)) }

    /// The JSON form: per kind, per channel, per ring.
    static func nested(_ flat: [Key: Int64]) -> (pack: [String: [String: Int64]]?, manifest: [String: [String: Int64]]?) {
        var out: [Kind: [String: [String: Int64]]] = [:]
        for (key, count) in flat { out[key.kind, default: [:]][key.channel, default: [:]][key.ring] = count }
        return (out[.pack], out[.manifest])
    }

    /// The flat form of the JSON's.
    static func flat(pack: [String: [String: Int64]]?, manifest: [String: [String: Int64]]?) -> [Key: Int64] {
        var out: [Key: Int64] = [:]
        for (kind, nested) in [(Kind.pack, pack), (.manifest, manifest)] {
            for (channel, rings) in nested ?? [:] {
                for (ring, count) in rings { out[Key(kind: kind, channel: channel, ring: ring)] = count }
            }
        }
        return out
    }
}

/// What reports said about keys over some days: reports in all, and the reports that named a
/// ring, by ring (of the channels asked about).
public struct KeyRingTally: Sendable, Hashable {
    /// Reports counted.
    public var reports: Int64 = 0
    /// Reports by pack key ring (ids sorted, joined with `,`; `*`: past the day's bound).
    public var packRings: [String: Int64] = [:]
    /// Reports by manifest key ring.
    public var manifestRings: [String: Int64] = [:]

    /// For key `id` of `kind` (`pack` or `manifest`): the reports from builds that hold it,
    /// those from builds that do not, and the reports that name no ring of that kind (builds from
    /// before reports named their keys, builds that pin no manifest key, rings past the bound).
    public func figures(_ kind: String, key id: String) -> (with: Int64, without: Int64, unnamed: Int64) {
        var (with, without): (Int64, Int64) = (0, 0)
        for (ring, count) in kind == "manifest" ? manifestRings : packRings where ring != KeyRingCounts.other {
            if KeyRingCounts.ids(ring).contains(id) { with.saturatingAdd(count) } else { without.saturatingAdd(count) }
        }
        return (with, without, unnamed(kind))
    }

    /// The reports from builds that hold none of `keeping` among their keys of `kind` (a build
    /// stranded when every other key is retired), and the reports that named a ring of that kind.
    public func stranded(_ kind: String, keeping: Set<String>) -> (stranded: Int64, named: Int64) {
        var (stranded, named): (Int64, Int64) = (0, 0)
        for (ring, count) in kind == "manifest" ? manifestRings : packRings where ring != KeyRingCounts.other {
            named.saturatingAdd(count)
            if keeping.isDisjoint(with: KeyRingCounts.ids(ring)) { stranded.saturatingAdd(count) }
        }
        return (stranded, named)
    }

    /// The reports that name no ring of `kind` (`pack` or `manifest`), or one past the day's bound.
    public func unnamed(_ kind: String) -> Int64 {
        var named: Int64 = 0
        for (ring, count) in kind == "manifest" ? manifestRings : packRings where ring != KeyRingCounts.other { named.saturatingAdd(count) }
        return max(0, reports - named)
    }

    /// Adds a day's counts of `channels` (nil: every channel).
    mutating func add(_ figures: DayFigures, channels: Set<String>?) {
        for (channel, count) in figures.reports where channels?.contains(channel) ?? true { reports.saturatingAdd(count) }
        for (key, count) in figures.keyRings where channels?.contains(key.channel) ?? true {
            if key.kind == .pack { packRings[key.ring, default: 0].saturatingAdd(count) } else { manifestRings[key.ring, default: 0].saturatingAdd(count) }
        }
    }
}

extension AppStore {
    /// What this origin's stored reports of the last `days` days (today included; every channel)
    /// say about keys, read from the data folder (counts the running origin has not written yet —
    /// at most its last second — and other origins' reports in a bucket are not included).
    public func keyRingTally(_ id: String, days: Int = 7, now: Date = WallClock.now()) -> KeyRingTally {
        var tally = KeyRingTally()
        for day in ReportBook.days(back: days, now: now) {
            if let read = try? ReportDayFile.read(folder: folder.reports(id), day: day) { tally.add(read.figures, channels: nil) }
        }
        return tally
    }
}

/// The fleet's keys section (`GET …/fleet`): for the app's current and staged pack keys and the
/// manifest signing keys in force, how many reports of the window come from builds that hold
/// each and how many from builds without it; `unnamed`, the reports that name no ring of that kind.
struct FleetKeys: Encodable, Sendable {
    struct Key: Encodable, Sendable {
        var id: String
        /// `current` or `staged` (pack keys); `newest` or `signing` (manifest keys).
        var state: String
        var with: Int64
        var without: Int64
    }

    struct Kind: Encodable, Sendable {
        var keys: [Key]
        var unnamed: Int64
    }

    var pack: Kind
    var manifest: Kind

    /// The section for `channel` over `figures`' days: the app's current and staged pack keys, the
    /// manifest signing keys in force (newest last).
    init(apps: AppStore, app: String, channel: String, figures: [DayFigures]) {
        var tally = KeyRingTally()
        for day in figures { tally.add(day, channels: [channel]) }
        let states = try? apps.packKeyStates(app)
        let pack = states.map { [($0.current, PackKeyState.current.rawValue)] + $0.staged.map { ($0, PackKeyState.staged.rawValue) } } ?? []
        let signing = ((try? apps.signingKeys()) ?? []).map { ManifestSigningKey.keyID(for: $0.publicKey) }
        self.init(tally: tally, pack: pack, manifest: signing.enumerated().map { ($1, $0 == signing.count - 1 ? "newest" : "signing") })
    }

    init(tally: KeyRingTally, pack: [(id: String, state: String)], manifest: [(id: String, state: String)]) {
        func kind(_ name: String, _ keys: [(id: String, state: String)]) -> Kind {
            Kind(keys: keys.map { key in
                let figures = tally.figures(name, key: key.id)
                return Key(id: key.id, state: key.state, with: figures.with, without: figures.without)
            }, unnamed: tally.unnamed(name))
        }
        self.pack = kind("pack", pack)
        self.manifest = kind("manifest", manifest)
    }
}
