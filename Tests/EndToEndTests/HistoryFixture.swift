import DepotCore
@testable import DepotServer
import Foundation

/// A data folder shaped like an origin after years: apps with thousands of releases, hundreds of
/// channels, a window of recent releases with thousands of packs each, a manifest of 10,000
/// packs. Written through the project's own stores (``AppStore``, ``ReleaseStore``'s publish and
/// promotion: the same files, signatures and revisions a publisher's requests make), in seconds
/// rather than the hours the HTTP API would take; an origin then serves the folder as it is.
///
/// Pack entries name containers that are not stored (their sizes and digests are made up):
/// the routes under test read releases, channels and manifests, never those blobs. A test that
/// serves a blob publishes it through the HTTP API as usual.
struct HistoryFixture {
    struct Shape: Sendable, CustomStringConvertible {
        /// Releases of each history app, the window included.
        var releases: Int
        /// The last releases of each history app, each listing ``windowPacks`` packs.
        var window: Int
        var windowPacks: Int
        /// Channels besides production of each history app (`c1`…), spread over its releases.
        var channels: Int
        /// The live release of ``bigApp``.
        var bigManifestPacks: Int

        /// What a busy origin looks like after years (the figures).
        static let large = Shape(releases: 3_000, window: 64, windowPacks: 3_500, channels: 300, bigManifestPacks: 10_000)
        /// The same apps and routes, a hundredth of the history.
        static let small = Shape(releases: 30, window: 3, windowPacks: 35, channels: 3, bigManifestPacks: 100)

        /// ``small`` times `factor` (1, 10, 100: ``large`` at 100, its window capped at 64 releases).
        static func scaled(_ factor: Int) -> Shape {
            Shape(releases: 30 * factor, window: min(64, max(3, 64 * factor / 100)), windowPacks: 35 * factor, channels: 3 * factor, bigManifestPacks: 100 * factor)
        }

        var description: String {
            "\(releases) releases (the last \(window) of \(windowPacks) packs), \(channels) channels, a \(bigManifestPacks)-pack manifest"
        }
    }

    /// The apps with long histories (reports cycle across them).
    static let historyApps = ["com.example.old1", "com.example.old2"]
    /// An app whose live release lists ``Shape/bigManifestPacks`` packs.
    static let bigApp = "com.example.big"
    static let publicURL = "http://127.0.0.1:8080"

    let shape: Shape
    let data: String

    /// Writes the fixture into `data` (a new data folder); returns when it is durable. With
    /// `spacing`, each history app's releases are dated `spacing` apart, the last one now.
    @discardableResult
    static func build(data: String, shape: Shape, spacing: TimeInterval = 0) throws -> HistoryFixture {
        let folder = DataFolder(data)
        try folder.prepare()
        let apps = AppStore(folder: folder)
        let releases = ReleaseStore(folder: folder, apps: apps, manifestLifetime: 90 * 86_400)
        for app in historyApps {
            _ = try apps.create(app)
            let key = try apps.packKeys(app).current
            let start = Date().addingTimeInterval(-spacing * Double(shape.releases))
            var made = 0
            func date() -> Date? {
                made += 1
                return spacing > 0 ? start.addingTimeInterval(spacing * Double(made)) : nil
            }
            // Old releases: ten packs, one of them changed each time.
            let old = shape.releases - shape.window
            for version in 1...old {
                try publish(releases, app: app, packs: (0..<10).map { entry(app, "p\($0)", change: $0 == version % 10 ? version : 0, key: key) }, at: date())
            }
            // The window: `windowPacks` packs, a hundredth of them changed each time.
            for step in 0..<shape.window {
                let changed = max(1, shape.windowPacks / 100)
                try publish(releases, app: app, packs: (0..<shape.windowPacks).map { pack in
                    entry(app, "w\(pack)", change: (pack / changed) == step % 100 ? step + 1 : 0, key: key)
                }, at: date())
            }
            // Channels spread over the whole history, each signed for its own name (a promotion).
            for channel in 1...max(shape.channels, 1) where shape.channels > 0 {
                let version = max(1, shape.releases * channel / (shape.channels + 1))
                _ = try releases.promote(app, channel: "c\(channel)", to: version, check: nil)
            }
        }
        _ = try apps.create(bigApp)
        let key = try apps.packKeys(bigApp).current
        try publish(releases, app: bigApp, packs: (0..<shape.bigManifestPacks).map { entry(bigApp, "b\($0)", change: 0, key: key) })
        return HistoryFixture(shape: shape, data: data)
    }

    /// A pack entry whose container is made up: `change` picks another container of the pack.
    private static func entry(_ app: String, _ id: String, change: Int, key: String) -> PackEntry {
        let sha256 = Hex.encode(SHA256Hasher.hash(Array("\(app) \(id) \(change)".utf8)))
        let plain = Hex.encode(SHA256Hasher.hash(Array("plain \(app) \(id) \(change)".utf8)))
        let size = Int64(1_000 + id.utf8.count * 37 + change)
        return PackEntry(
            id: id, revision: 1, url: publicURL + "/v1/apps/\(app)/blobs/\(sha256)", size: size, sha256: sha256, installSize: size - 60,
            plaintextSHA256: plain, policy: .onDemand, tags: [], keyID: key, contentType: "application/octet-stream"
        )
    }

    private static func publish(_ releases: ReleaseStore, app: String, packs: [PackEntry], at date: Date? = nil) throws {
        _ = try releases.publish(app, rolloutChange: .content, change: { _ in packs }, at: date)
    }

    /// The live production release of a history app.
    var live: Int { shape.releases }

    /// The bytes of every channel's live envelope in the data folder `data` (each app's
    /// production and other channels; a promoted release's signed copy where it has one): what
    /// an origin keeps in memory to serve them.
    static func liveEnvelopeBytes(data: String) -> Int64 {
        let folder = DataFolder(data)
        var total: Int64 = 0
        for app in FileSystem.contents(of: folder.apps) {
            var pointers = [(ReleaseStore.production, folder.currentPointer(app))]
            for name in FileSystem.contents(of: folder.channels(app)) { pointers.append((name, folder.channels(app) + "/" + name)) }
            for (channel, pointer) in pointers {
                guard let text = try? FileSystem.readFile(pointer, limit: 64),
                      let version = Int(String(decoding: text, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) else { continue }
                let copy = folder.signedCopies(app, channel: channel) + "/" + DataFolder.releaseName(version)
                let path = FileSystem.exists(copy) ? copy : folder.release(app, version)
                total += (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int64) ?? 0
            }
        }
        return total
    }
}
