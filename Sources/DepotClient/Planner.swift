import DepotCore

/// Why the system (or `depot sync`) is running: Background Assets' events, plus the app
/// asking in the foreground.
public enum RequestKind: String, Sendable, CaseIterable, Codable {
    /// The app was just installed, before its first launch.
    case install
    /// The app was just updated.
    case update
    /// A periodic check in the background.
    case periodic
    /// The app asks while it runs.
    case foreground
    /// iOS 27+: the person changed the app's language (`BAContentRequest.languageChange`): the
    /// new language's packs come in, the old ones go once they are in.
    case languageChange = "language-change"

    /// Whether essential downloads may be scheduled: only on install and update, as in the framework.
    public var allowsEssential: Bool { self == .install || self == .update }
}

/// A download the plan schedules.
public struct PlannedDownload: Hashable, Sendable {
    public var entry: PackEntry
    /// Scheduled as essential (the app waits for it before launch); false once demoted.
    public var essential: Bool
    /// The patch to download instead of the whole pack: the installed copy is its base.
    public var patch: PackPatch?

    public init(entry: PackEntry, essential: Bool, patch: PackPatch? = nil) {
        self.entry = entry
        self.essential = essential
        self.patch = patch
    }

    /// Bytes this download transfers: the patch's, or the whole container's.
    public var size: Int64 { patch?.size ?? entry.size }

    /// The same download, non-essential: what the framework's `removingEssential()` gives, and
    /// what a failed essential download is rescheduled as.
    public func removingEssential() -> PlannedDownload { PlannedDownload(entry: entry, essential: false, patch: patch) }

    /// The same download as the whole pack (a patch that failed falls back to it).
    public func withoutPatch() -> PlannedDownload { PlannedDownload(entry: entry, essential: essential) }

    /// `pack@revision` (the whole pack) or `pack@revision-from-base` (a patch): the identifier the
    /// system schedules it under (`BAURLDownload`'s identifier).
    public var identifier: String { Self.identifier(entry, patch: patch) }

    static func identifier(_ entry: PackEntry, patch: PackPatch?) -> String {
        "\(entry.id)@\(entry.revision)" + (patch.map { "-from-\($0.fromRevision)" } ?? "")
    }
}

/// What a sync will do, in order.
public struct Plan: Hashable, Sendable {
    /// Downloads in order: essential first, then prefetch, then on-demand packs asked for; by id within each.
    public var downloads: [PlannedDownload]
    /// Downloads that did not fit the remaining allowance: left for a later sync, not failed.
    public var deferred: [PlannedDownload]
    /// Installed packs the manifest no longer lists: removed once the sync succeeded.
    public var removals: [String]
    /// Installed packs that are current.
    public var unchanged: [String]
    /// On-demand packs nobody asked for (not installed, not downloaded).
    public var notRequested: [String]
    /// For each deferred download, by how many bytes it would have exceeded its allowance (the
    /// essential one for an essential download, the download allowance otherwise).
    public var overAllowance: [String: Int64] = [:]
    /// Downloads the system already has in hand (scheduled, or finished and waiting for the
    /// install step), by identifier (``PlannedDownload/identifier``): not asked for again.
    public var alreadyScheduled: [String] = []
    /// Localized packs of languages this device does not take (neither installed nor downloaded).
    public var otherLanguages: [String] = []
    /// Installed localized packs of a language the device no longer takes, each with the pack of
    /// its group that replaces it: removed once that one is installed, not before. (One whose
    /// group has nothing left for the device is in ``removals``.)
    public var languageReplacements: [String: String] = [:]
}

/// The planner: a pure function from (manifest, installed state, request) to a ``Plan``.
///
/// Rules (each has a row in the planner's table-driven tests):
/// - A pack is downloaded when it is not installed, its revision or container hash changed, or
///   its installed copy is gone.
/// - Essential packs are scheduled as essential only on `install` and `update`; on `periodic`
///   and `foreground` they are scheduled as non-essential.
/// - Prefetch packs are scheduled on every kind of request.
/// - On-demand packs only when asked for by id or tag, or when an installed copy is out of date.
/// - Packs gone from the manifest are removed.
/// - An installed pack whose new revision lists a patch from exactly the installed revision and
///   plaintext gets the patch, charged at the patch's size.
/// - A download the system already has (scheduled or delivered: ``Request/scheduled``) is not
///   asked for again, and takes nothing from the allowances: any download of the same pack
///   revision, whole or a patch from any base, counts.
/// - Of each group of localized packs (`PackEntry.languageGroup`) only the pack of the language
///   `LanguageTag.choose(preferred:primary:from:)` picks for the device's languages is taken
///   (on every kind of request, so a periodic one after a change of language catches up too);
///   an installed pack of another language is replaced: removed once its group's pick is in.
/// - Downloads are taken in order while they fit the allowances; the rest is deferred, not failed.
///   As Apple documents the Info.plist keys, there are two separate budgets: the essential
///   allowance (`BAEssentialDownloadAllowance`) bounds the essential downloads, the download
///   allowance (`BADownloadAllowance`) the non-essential ones.
public enum Planner {
    /// What the caller asks for besides the manifest.
    public struct Request: Hashable, Sendable {
        public var kind: RequestKind
        /// Bytes that non-essential downloads may take (nil: no limit).
        public var allowance: Int64?
        /// Bytes that essential downloads may take (nil: no limit).
        public var essentialAllowance: Int64?
        /// On-demand packs asked for by id.
        public var packs: Set<String>
        /// On-demand packs asked for by tag.
        public var tags: Set<String>
        /// Identifiers (`pack@revision` or `pack@revision-from-base`, ``PlannedDownload/identifier``) of downloads already
        /// scheduled (`BADownloadManager`'s current downloads) or delivered and not yet
        /// installed: the plan does not ask for them again.
        public var scheduled: Set<String>
        /// Whether a patch may replace a whole pack (the installed copy being its base).
        public var usePatches = true
        /// The device's preferred languages, most preferred first (`Locale.preferredLanguages`
        /// on a device): which localized packs it takes. Empty: the app's primary language's.
        public var languages: [String] = []

        public init(
            kind: RequestKind, allowance: Int64? = nil, essentialAllowance: Int64? = nil, packs: Set<String> = [], tags: Set<String> = [],
            scheduled: Set<String> = []
        ) {
            self.scheduled = scheduled
            self.kind = kind
            self.allowance = allowance
            self.essentialAllowance = essentialAllowance
            self.packs = packs
            self.tags = tags
        }
    }

    /// Plans with a check of each installed copy that only asks whether it exists (for callers
    /// with no folder to look at, such as tests of the rules). A device plans with
    /// ``plan(manifest:state:request:installedCopyIsWhole:)`` and ``StateStore/isWhole(_:_:)``.
    public static func plan(
        manifest: Manifest, state: InstalledState, request: Request, installedCopyExists: (String) -> Bool = { _ in true }
    ) -> Plan {
        plan(manifest: manifest, state: state, request: request, installedCopyIsWhole: { id, _ in installedCopyExists(id) })
    }

    /// Plans; `installedCopyIsWhole` says whether the copy of a recorded pack is still on disk as
    /// recorded (``StateStore/isWhole(_:_:)``): one that is not — purged in part, truncated — is
    /// downloaded again whole, never patched.
    public static func plan(
        manifest: Manifest, state: InstalledState, request: Request, installedCopyIsWhole: (String, InstalledState.Pack) -> Bool
    ) -> Plan {
        var wanted: [PlannedDownload] = []
        wanted.reserveCapacity(manifest.packs.count)
        var unchanged: [String] = []
        var notRequested: [String] = []
        var otherLanguages: [String] = []
        var replacements: [String: String] = [:]
        var removals = Set(state.packs.keys.filter { id in !manifest.packs.contains { $0.id == id } })
        let picks = LanguageSelection.picks(manifest.packs, preferred: LanguageTag.list(request.languages), primary: manifest.primaryLanguageTag)
        for entry in manifest.packs {
            let installed = state.packs[entry.id]
            if entry.languageGroup != nil, picks[entry.id] != entry.id {
                if installed == nil {
                    otherLanguages.append(entry.id)
                } else if let replacement = picks[entry.id] {
                    replacements[entry.id] = replacement
                } else {
                    removals.insert(entry.id)
                }
                continue
            }
            // Asked once per pack: a tree's check walks its folder.
            let whole = installed.map { installedCopyIsWhole(entry.id, $0) } ?? false
            let current = installed.map { $0.revision == entry.revision && $0.sha256 == entry.sha256 && whole } ?? false
            if current {
                unchanged.append(entry.id)
                continue
            }
            // A patch when the installed copy is exactly its base (the revision and the plaintext
            // SHA-256 recorded at install; not recomputed here) and is still whole on disk.
            let patch = installed.flatMap { installed in
                // A zip is installed unpacked and patched as a tree; any other pack as a file.
                request.usePatches && installed.unpacked == ZipPack.isZip(contentType: entry.contentType) && installed.patchFailed != true
                    && whole
                    ? entry.patch(from: installed.revision, plaintextSHA256: installed.plaintextSHA256) : nil
            }
            switch entry.policy {
            case .essential:
                wanted.append(PlannedDownload(entry: entry, essential: request.kind.allowsEssential, patch: patch))
            case .prefetch:
                wanted.append(PlannedDownload(entry: entry, essential: false, patch: patch))
            case .onDemand:
                let asked = request.packs.contains(entry.id) || !request.tags.isDisjoint(with: entry.tags) || installed != nil
                if asked { wanted.append(PlannedDownload(entry: entry, essential: false, patch: patch)) } else { notRequested.append(entry.id) }
            }
        }
        func rank(_ download: PlannedDownload) -> Int {
            download.essential ? 0 : download.entry.policy == .onDemand ? 2 : 1
        }
        wanted.sort { (rank($0), $0.entry.id) < (rank($1), $1.entry.id) }

        // The downloads are kept in `wanted` itself, compacted in place (a manifest of 10,000
        // packs is planned in an extension's tight memory: no second array of them).
        var kept = 0
        var deferred: [PlannedDownload] = []
        var nonEssential: Int64 = 0
        var essential: Int64 = 0
        var overAllowance: [String: Int64] = [:]
        var alreadyScheduled: [String] = []
        // What the system has for each pack revision, whole or as a patch from any base: that
        // revision is on its way. (A patch whose base is gone by the time it arrives is dropped
        // by the install step, which marks the pack so that the next plan asks for it whole. Not
        // counting it would download the revision twice whenever an install step and a plan
        // meet: the plan sees the copy the install is switching in as not yet recorded.)
        var held: [String: String] = [:]
        for identifier in request.scheduled.sorted() {
            // `pack@revision[-from-base]`: a pack id has no `@` (but may hold "-from-").
            guard let at = identifier.lastIndex(of: "@") else { continue }
            let numbers = identifier[identifier.index(after: at)...]
            let revision = identifier[..<at] + "@" + (numbers.components(separatedBy: "-from-").first ?? "")
            if held[revision] == nil || !numbers.contains("-from-") { held[revision] = identifier }
        }
        for index in wanted.indices {
            let download = wanted[index]
            if let identifier = request.scheduled.contains(download.identifier) ? download.identifier : held[PlannedDownload.identifier(download.entry, patch: nil)] {
                alreadyScheduled.append(identifier)
                continue
            }
            let size = download.size
            let (used, allowance) = download.essential ? (essential, request.essentialAllowance) : (nonEssential, request.allowance)
            if let allowance, used + size > allowance {
                deferred.append(download)
                overAllowance[download.entry.id] = used + size - allowance
                continue
            }
            if download.essential { essential += size } else { nonEssential += size }
            wanted.swapAt(kept, index)
            kept += 1
        }
        wanted.removeSubrange(kept...)
        return Plan(
            downloads: wanted, deferred: deferred, removals: removals.sorted(), unchanged: unchanged, notRequested: notRequested, overAllowance: overAllowance,
            alreadyScheduled: alreadyScheduled, otherLanguages: otherLanguages, languageReplacements: replacements
        )
    }
}
