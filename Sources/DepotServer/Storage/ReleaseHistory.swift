import DepotCore
import DepotHTTP
import Foundation
import Synchronization

/// What the anonymous routes know of an app's releases and channels, kept so that a request
/// costs the same whatever the app's history: per release a few facts (its dates, its pack
/// count, the channel it was published for), every channel's release, and the answers of
/// `GET …/channels` and of `GET …/releases`'s first page, made once per change.
///
/// Every change this process makes (a publish, a promotion, a channel removed) is recorded into
/// the kept snapshot as it is made (``record(_:release:channel:version:)``): nothing is read
/// again. A change made underneath (a replica's pull, a hand) is seen by four stamps (`head`,
/// the production pointer, the channels folder, the releases folder: every change replaces a
/// file by a rename, which restamps its folder); a request that finds them changed rebuilds
/// the snapshot under one lock (one builder, however many requests arrive meanwhile), reading
/// the channel pointers (at most `--max-channels`), the folder's names, and only the releases
/// it has not read before (they are immutable), from the app's ``ReleaseCatalog`` where it has
/// them, else from their files. History is read once per process.
final class ReleaseHistory: Sendable {
    /// One release as the listings show it.
    struct Release: Sendable, Equatable {
        var version: Int
        var publishedAt: Date
        var expiresAt: Date
        var packs: Int
        /// The channel it was published for (production for releases that named none).
        var channel: String

        init(version: Int, publishedAt: Date, expiresAt: Date, packs: Int, channel: String) {
            (self.version, self.publishedAt, self.expiresAt, self.packs, self.channel) = (version, publishedAt, expiresAt, packs, channel)
        }

        init(_ manifest: Manifest) {
            (version, publishedAt, expiresAt, packs) = (manifest.version, manifest.publishedAt, manifest.expiresAt, manifest.packs.count)
            channel = manifest.channel ?? ReleaseStore.production
        }
    }

    /// One app's history at its stamps; immutable.
    final class Snapshot: Sendable {
        let stamps: [FileStamp?]
        let generation: Int
        let head: Int
        let channels: [String: Int]
        /// Visible releases, oldest first; `index[version]` is a release's place.
        let releases: [Release]
        let index: [Int: Int]
        /// Each release's summary as `GET …/releases` lists it (compact JSON), by place.
        let summaries: [[UInt8]]
        /// The summaries one after another, separated by commas, and where each begins (one more
        /// past the end): a page's releases are one slice of it.
        let joined: [UInt8]
        let offsets: [Int]
        /// A page's beginning: `{"app":…,"channels":{…}` and the live release.
        let prefix: [UInt8]
        /// The answers kept: the channel list, and the release list's first page.
        let channelList: (body: SharedBytes, etag: String)
        let firstPage: (body: SharedBytes, etag: String)
        /// Identifies this snapshot's content (the ETag of any other page is made from it).
        let digest: String

        init(
            app: String, stamps: [FileStamp?], generation: Int, head: Int, channels: [String: Int], releases: [Release], summaries: [[UInt8]],
            channelList: (SharedBytes, String), digest: String
        ) {
            (self.stamps, self.generation, self.head, self.channels, self.releases) = (stamps, generation, head, channels, releases)
            var index: [Int: Int] = [:]
            index.reserveCapacity(releases.count)
            for (place, release) in releases.enumerated() { index[release.version] = place }
            self.index = index
            (self.summaries, self.channelList, self.digest) = (summaries, channelList, digest)
            var joined: [UInt8] = []
            joined.reserveCapacity(summaries.reduce(0) { $0 + $1.count + 1 })
            var offsets: [Int] = []
            offsets.reserveCapacity(summaries.count + 1)
            for summary in summaries {
                offsets.append(joined.count)
                joined += summary
                joined.append(0x2C)
            }
            offsets.append(joined.count)
            (self.joined, self.offsets) = (joined, offsets)
            var prefix = Array("{\"app\":\"".utf8) + Array(app.utf8) + Array("\",\"channels\":".utf8)
            prefix += (try? StoredJSON.compact.encode(channels)).map(Array.init) ?? Array("{}".utf8)
            if let live = channels[ReleaseStore.production] { prefix += Array(",\"live\":\(live)".utf8) }
            self.prefix = prefix
            self.app = app
            let first = Self.page(app: app, prefix: prefix, joined: joined, offsets: offsets, releases: releases, before: nil, limit: ReleaseHistory.defaultPage)
            firstPage = (SharedBytes(first), "\"\(digest)-p\(ReleaseHistory.defaultPage)\"")
        }

        let app: String

        /// A page of `GET …/releases`: the newest `limit` releases below `before` (all when nil),
        /// oldest first, with the app's channels, the count of every release and the next page's
        /// path. Two copies of kept bytes, whatever the page.
        func page(before: Int?, limit: Int) -> [UInt8] {
            Self.page(app: app, prefix: prefix, joined: joined, offsets: offsets, releases: releases, before: before, limit: limit)
        }

        private static func page(app: String, prefix: [UInt8], joined: [UInt8], offsets: [Int], releases: [Release], before: Int?, limit: Int) -> [UInt8] {
            // The releases below `before`: a binary search (versions ascend).
            var end = releases.count
            if let before {
                var (low, high) = (0, releases.count)
                while low < high {
                    let middle = (low + high) / 2
                    if releases[middle].version < before { low = middle + 1 } else { high = middle }
                }
                end = low
            }
            let start = max(0, end - limit)
            var body: [UInt8] = []
            body.reserveCapacity(prefix.count + offsets[end] - offsets[start] + 160)
            body += prefix
            if start > 0 { body += Array(",\"next\":\"/v1/apps/\(app)/releases?before=\(releases[start].version)&limit=\(limit)\"".utf8) }
            body += Array(",\"releases\":[".utf8)
            // Without the comma after the last summary.
            if end > start { body += joined[offsets[start]..<(offsets[end] - 1)] }
            body += Array("],\"total\":\(releases.count)}\n".utf8)
            return body
        }

        func release(_ version: Int) -> Release? { index[version].map { releases[$0] } }
    }

    /// The summaries a page of `GET …/releases` holds by default, and at most.
    static let defaultPage = 100
    static let largestPage = 500

    private let folder: DataFolder
    private let urls: PublicURL
    private let kept = Mutex<[String: Snapshot]>([:])
    private let generations = Mutex<[String: Int]>([:])
    /// Per app, held while its snapshot is rebuilt or a change recorded: one builder per app (a
    /// request for another app never waits), never taken by a request that found a valid one.
    private let builders = Mutex<[String: Builder]>([:])
    private final class Builder: Sendable {
        let lock = Mutex(())
    }

    private func builder(_ app: String) -> Builder {
        builders.withLock { builders in
            if let known = builders[app] { return known }
            // Keyed by app ids the routes checked exist: bounded by the apps.
            let made = Builder()
            builders[app] = made
            return made
        }
    }

    init(folder: DataFolder, urls: PublicURL) {
        (self.folder, self.urls) = (folder, urls)
    }

    /// Makes `app`'s snapshot stale (its files were replaced underneath: a replica's pull). Its
    /// releases' facts stay for the rebuild (release files are immutable): only the channels,
    /// `head` and new release files are read again.
    func forget(_ app: String) {
        generations.withLock { $0[app, default: 0] += 1 }
    }

    private func stamps(_ app: String) -> [FileStamp?] {
        [folder.head(app), folder.currentPointer(app), folder.channels(app), folder.releases(app)].map { FileStampCache<Int>.stamp($0) }
    }

    /// `app`'s history now: four `stat`s when nothing changed.
    func snapshot(_ app: String) throws -> Snapshot {
        let stamps = stamps(app)
        let generation = generations.withLock { $0[app] ?? 0 }
        if let known = kept.withLock({ $0[app] }), known.stamps == stamps, known.generation == generation { return known }
        return try builder(app).lock.withLock { _ in
            // Another request may have rebuilt it while this one waited.
            let stamps = self.stamps(app)
            let generation = generations.withLock { $0[app] ?? 0 }
            let previous = kept.withLock { $0[app] }
            if let previous, previous.stamps == stamps, previous.generation == generation { return previous }
            let made = try build(app, stamps: stamps, generation: generation, previous: previous)
            kept.withLock { snapshots in
                // Keyed by app ids the routes checked exist: bounded by the apps.
                snapshots[app] = made
            }
            return made
        }
    }

    private static func readNumber(_ path: String) -> Int? { ReleaseStore.readNumber(path) }

    private func build(_ app: String, stamps: [FileStamp?], generation: Int, previous: Snapshot?) throws -> Snapshot {
        var channels: [String: Int] = [:]
        if let production = Self.readNumber(folder.currentPointer(app)) { channels[ReleaseStore.production] = production }
        for name in FileSystem.contents(of: folder.channels(app)) where Identifier.isValidChannel(name) {
            if let version = Self.readNumber(folder.channels(app) + "/" + name) { channels[name] = version }
        }
        let head = max(Self.readNumber(folder.head(app)) ?? 0, channels.values.max() ?? 0)
        var releases: [Release] = []
        // The catalog's facts, read once if any release is not known yet (start-up).
        var catalogued: [Int: Release]?
        for version in ReleaseStore.versions(in: folder.releases(app)) where version <= head {
            if let known = previous?.release(version) {
                releases.append(known)
                continue
            }
            if catalogued == nil { catalogued = ReleaseCatalog(path: folder.catalog(app)).summaries() }
            if let known = catalogued?[version] {
                releases.append(known)
                continue
            }
            // Read once per process: releases are immutable.
            guard let bytes = try? FileSystem.readFile(folder.release(app, version)), let envelope = try? Envelope.decode(bytes),
                  let payload = Data(base64Encoded: envelope.payload), let manifest = try? Manifest.decode(Array(payload)) else { continue }
            releases.append(Release(manifest))
        }
        return try assemble(app, stamps: stamps, generation: generation, head: head, channels: channels, releases: releases, previous: previous)
    }

    /// Records a change this process made (under the release store's publish lock, after its
    /// files were written): a release made visible, a channel moved or removed. The kept
    /// snapshot gains it without reading anything but the four stamps; with none kept, the next
    /// request reads the folder.
    func record(_ app: String, release: Release? = nil, channel: String, version: Int?) {
        builder(app).lock.withLock { _ in
            guard let previous = kept.withLock({ $0[app] }), previous.generation == generations.withLock({ $0[app] ?? 0 }) else { return }
            var channels = previous.channels
            channels[channel] = version
            var releases = previous.releases
            if let release, previous.index[release.version] == nil {
                // Numbers only grow: a new release goes last.
                guard release.version > (releases.last?.version ?? 0) else {
                    kept.withLock { $0[app] = nil }
                    return
                }
                releases.append(release)
            }
            let head = max(previous.head, release?.version ?? 0, version ?? 0)
            let made = try? assemble(app, stamps: stamps(app), generation: previous.generation, head: head, channels: channels, releases: releases, previous: previous)
            kept.withLock { $0[app] = made }
        }
    }

    /// A snapshot of `releases` and `channels`: each release's summary encoded again only when
    /// the channels serving it changed since `previous`.
    private func assemble(
        _ app: String, stamps: [FileStamp?], generation: Int, head: Int, channels: [String: Int], releases: [Release], previous: Snapshot?
    ) throws -> Snapshot {
        var serving: [Int: [String]] = [:]
        for (channel, version) in channels { serving[version, default: []].append(channel) }
        var previousServing: [Int: [String]] = [:]
        for (channel, version) in previous?.channels ?? [:] { previousServing[version, default: []].append(channel) }
        let live = channels[ReleaseStore.production]
        var summaries: [[UInt8]] = []
        summaries.reserveCapacity(releases.count)
        for release in releases {
            let version = release.version
            let names = (serving[version] ?? []).sorted()
            // A release's summary changes only with the channels serving it.
            if let previous, let place = previous.index[version], previous.releases[place] == release, (previousServing[version] ?? []).sorted() == names,
               (version == previous.channels[ReleaseStore.production]) == (version == live) {
                summaries.append(previous.summaries[place])
                continue
            }
            let summary = ReleaseSummary(
                version: version, publishedAt: release.publishedAt, expiresAt: release.expiresAt, packs: release.packs,
                live: version == live, channels: names, url: urls.release(app, version)
            )
            summaries.append(Array(try StoredJSON.compact.encode(summary)))
        }
        let channelList = ChannelList(app: app, channels: channels.sorted { $0.key < $1.key }.map {
            ChannelList.Channel(name: $0.key, release: $0.value, manifestURL: urls.manifest(app, channel: $0.key))
        })
        let channelBody = Array(try StoredJSON.compact.encode(channelList)) + [10]
        // Names this snapshot's content in the ETags of the pages made from it: a new one per
        // change (a page asked again after a change is sent again, never a stale one kept).
        let digest = Hex.encode(SecureRandom.bytes(12))
        return Snapshot(
            app: app, stamps: stamps, generation: generation, head: head, channels: channels, releases: releases, summaries: summaries,
            channelList: (SharedBytes(channelBody), Representation.etag(of: channelBody)), digest: digest
        )
    }
}
