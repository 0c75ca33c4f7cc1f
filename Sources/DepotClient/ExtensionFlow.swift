import DepotCore
import Foundation

/// A pack download for the system to schedule: what a `BAURLDownload` needs.
public struct ScheduledDownload: Hashable, Sendable {
    /// The manifest entry it downloads.
    public var entry: PackEntry
    /// Essential (the app waits for it before first launch), or not.
    public var isEssential: Bool

    /// `pack@revision`: matches the finished download to its manifest entry.
    public var identifier: String { "\(entry.id)@\(entry.revision)" }
    /// The pack's URL, as the manifest states it (https for Background Assets).
    public var url: URL { URL(string: entry.url)! }
    /// The exact container size: the system fails a download of any other size.
    public var fileSize: Int { Int(entry.size) }
}

/// What a Background Assets extension does with this module, in two calls: ``schedule(manifestFile:kind:allowance:essentialAllowance:now:)``
/// when the system hands it the manifest, ``install(identifier:file:now:)`` when it hands it a
/// finished download. The system downloads; verifying, planning, decrypting and installing are
/// done here. The integration guide's extension is built on exactly these calls, and a test
/// runs them against the real origin's output.
public struct ExtensionFlow: Sendable {
    public let configuration: ClientConfiguration
    public let store: StateStore
    /// The channel this build follows.
    public let channel: String

    /// `destination` is the folder in the App Group container that the app and the extension share.
    public init(configuration: ClientConfiguration, destination: String, channel: String = ManifestSource.production) throws {
        self.configuration = configuration
        store = try StateStore(destination: destination)
        self.channel = channel
    }

    private func source() throws -> ManifestSource {
        ManifestSource(
            url: URL(fileURLWithPath: store.cachedEnvelope(channel: channel)), app: configuration.app, channel: channel,
            trustedKeys: try configuration.trustedKeys()
        )
    }

    /// The manifest the system fetched from `BAManifestURL` (a local file): verified, accepted
    /// under the exclusive lock (the channel's floor raised, its bytes kept for
    /// ``install(identifier:file:now:)``), then planned. Pass the allowances the system reports
    /// (`BAAppExtensionInfo`), or none. A refused manifest throws and schedules nothing.
    public func schedule(
        manifestFile path: String, kind: RequestKind, allowance: Int64? = nil, essentialAllowance: Int64? = nil, now: Date = Date()
    ) throws -> [ScheduledDownload] {
        let envelope = try FileSystem.readFile(path, limit: ManifestSource.sizeLimit)
        let source = try source()
        let (manifest, state) = try store.withExclusiveControl(app: configuration.app) { state in
            let manifest = try source.verify(envelope, floor: state.floor(channel: channel), now: now)
            state.raiseFloor(channel: channel, to: manifest.version)
            try FileSystem.writeAtomically(envelope, to: store.cachedEnvelope(channel: channel))
            return (manifest, state)
        }
        let plan = Planner.plan(
            manifest: manifest, state: state,
            request: Planner.Request(kind: kind, allowance: allowance, essentialAllowance: essentialAllowance),
            installedCopyExists: { FileSystem.exists(store.packPath($0)) }
        )
        return plan.downloads.map { ScheduledDownload(entry: $0.entry, isEssential: $0.essential) }
    }

    /// A finished download (`identifier` as scheduled; the file is gone once the system's
    /// callback returns): checked against the accepted manifest, decrypted, installed atomically
    /// and recorded. Returns the entry installed. A download for a revision the manifest no
    /// longer lists, a wrong size or hash, or a missing key throws, and the previous revision stays.
    @discardableResult
    public func install(identifier: String, file path: String, now: Date = Date()) throws -> PackEntry {
        let envelope = try FileSystem.readFile(store.cachedEnvelope(channel: channel), limit: ManifestSource.sizeLimit)
        let floor = try store.read(app: configuration.app).floor(channel: channel)
        let manifest = try source().verify(envelope, floor: floor, now: now)
        let parts = identifier.split(separator: "@")
        guard parts.count == 2, let revision = Int(parts[1]), let entry = manifest[pack: String(parts[0])], entry.revision == revision else {
            throw ClientError.integrity(identifier, "the accepted manifest does not list this download (a newer revision replaced it)")
        }
        let unpacked = try Installer(keyRing: configuration.keyRing()).install(entry, from: path, to: store.packPath(entry.id))
        try store.withExclusiveControl(app: configuration.app) { state in
            state.packs[entry.id] = InstalledState.Pack(
                revision: entry.revision, sha256: entry.sha256, plaintextSHA256: entry.plaintextSHA256,
                installSize: entry.installSize, installedAt: now, unpacked: unpacked
            )
        }
        return entry
    }
}
