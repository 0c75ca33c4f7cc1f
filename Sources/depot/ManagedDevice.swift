import DepotClient
import DepotCore
import Foundation

/// A device as the system manages a managed app's asset packs (iOS 26+), applied to the
/// origin's real download manifest, for `depot sync --managed --event …`:
/// - install: essential and then prefetch packs whose installationEventTypes include
///   `firstInstallation`; update: those with `subsequentUpdate`; periodic: no new pack;
/// - on-demand packs only when asked for (`--pack`, which fetches any pack by id);
/// - a pack the device holds is downloaded again only when its `version` rises (bytes that
///   change under the same version are never fetched: the device keeps its copy);
/// - a pack that left the manifest is deleted;
/// - a download whose size differs from `downloadSize` by one byte fails (and one whose SHA-256
///   differs from the origin's `userInfo` entry), keeping what the device had.
/// - localized packs (iOS 27+, `language`): of each group only the best match for the device's
///   `languages` (else the primary language's, from the origin's `userInfo` entry) is downloaded,
///   on the events its policy names and on a language change; a held pack of another language is
///   deleted once its group's pick is held.
/// Packs land in DEST/packs/<id>.aar; what the device holds is in DEST/managed-state.json.
struct ManagedDevice {
    var destination: String
    var allowHTTP: Bool
    var requested: Set<String>
    var languages: [String] = []

    struct Held: Codable { var version: Int; var size: Int64; var sha256: String }
    struct State: Codable { var packs: [String: Held] = [:] }
    struct Report { var lines: [String] = []; var failed: [String: String] = [:] }

    var statePath: String { destination + "/managed-state.json" }
    func packPath(_ id: String) -> String { destination + "/packs/" + id + ".aar" }

    func run(event: String, manifestURL: URL, transport: HTTPTransport, headers: [String: String]) async throws -> Report {
        try FileSystem.createDirectory(destination + "/packs")
        var state = (try? JSONDecoder().decode(State.self, from: Data(FileSystem.readFile(statePath, limit: 1 << 24)))) ?? State()
        if !allowHTTP && manifestURL.scheme != "https" { throw CLIError("the system reads BAManifestURL over https only: \(manifestURL) (--allow-http for a development run)") }
        let response = try await transport.get(manifestURL, headers: headers, limit: 16 << 20)
        guard response.status == 200 else { throw CLIError("cannot read the download manifest: HTTP \(response.status): \(Publish.message(response.body))") }
        let manifest: DownloadManifest
        do {
            manifest = try DownloadManifest.decode(response.body)
        } catch {
            throw CLIError("\(manifestURL) is not a download manifest: \(error)")
        }
        var report = Report()
        // The download manifest is not signed: nothing in it is trusted before it is checked. An
        // id becomes a file name only if it is a valid pack id (no `/`, no `..`).
        for pack in manifest.assetPacks where !Identifier.isValidPack(pack.id) {
            throw CLIError("the download manifest names a pack id that is not valid (\(pack.id.prefix(80).debugDescription)); nothing was changed")
        }
        let listed = Set(manifest.assetPacks.map(\.id))
        // The state records only archives on disk whole: a pack leaves it before its file goes,
        // and enters it (again) only once its new file is in place.
        let save = { (state: State) throws in try FileSystem.writeAtomically(Array(try JSONEncoder().encode(state)), to: statePath) }
        for id in state.packs.keys.sorted() where !listed.contains(id) && Identifier.isValidPack(id) {
            state.packs[id] = nil
            try save(state)
            FileSystem.remove(packPath(id))
            report.lines.append("deleted \(id): it left the download manifest")
        }
        let primary = manifest.assetPacks.lazy.compactMap(\.primaryLanguage).first.flatMap(LanguageTag.init)
        let picks = LanguageSelection.picks(manifest.assetPacks.map { ($0.id, $0.language) }, preferred: LanguageTag.list(languages), primary: primary)
        let otherLanguage = Set(manifest.assetPacks.filter { $0.language != nil && picks[$0.id] != $0.id }.map(\.id))
        let trigger = event == "install" ? "firstInstallation" : event == "update" ? "subsequentUpdate" : nil
        // Essential packs first, prefetch after, then any asked for.
        let order: [PackEntry.Policy] = [.essential, .prefetch, .onDemand]
        for pack in manifest.assetPacks.sorted(by: { (order.firstIndex(of: $0.downloadPolicy.policy)!, $0.id) < (order.firstIndex(of: $1.downloadPolicy.policy)!, $1.id) }) {
            let held = state.packs[pack.id]
            if otherLanguage.contains(pack.id) && !requested.contains(pack.id) { continue }
            let dueByEvent = pack.downloadPolicy.policy != .onDemand
                && (trigger.map(pack.downloadPolicy.installationEventTypes.contains) == true || (event == "language-change" && pack.language != nil))
            guard held != nil || dueByEvent || requested.contains(pack.id) else { continue }
            if let held, pack.version <= held.version {
                if pack.sha256 != nil && pack.sha256 != held.sha256 {
                    report.lines.append("kept \(pack.id) version \(held.version): the manifest has other bytes under version \(pack.version), which the system never fetches")
                }
                continue
            }
            if pack.sha256 == nil {
                report.lines.append("warning: \(pack.id) has no SHA-256 in its userInfo (\(DownloadManifest.sha256Key)): only its size can be checked")
            }
            do {
                let temporary = packPath(pack.id) + ".part"
                defer { FileSystem.remove(temporary) }
                try await download(pack, to: temporary, manifestURL: manifestURL, transport: transport, headers: headers)
                if state.packs[pack.id] != nil {
                    state.packs[pack.id] = nil
                    try save(state)
                }
                // The archive's bytes are durable before its name is, and both before the state
                // records it: after a power cut the state never names an archive shorter than it says.
                try FileDescriptor.openForReading(temporary).sync()
                try FileSystem.durableRename(temporary, to: packPath(pack.id))
                state.packs[pack.id] = Held(version: pack.version, size: pack.downloadSize, sha256: pack.sha256 ?? "")
                try save(state)
                report.lines.append("downloaded \(pack.id) version \(pack.version) (\(pack.downloadSize) bytes, \(pack.downloadPolicy.policy.rawValue))")
            } catch {
                report.failed[pack.id] = "\(error)"
            }
        }
        // Another language's packs go once their group's pick is held.
        for id in state.packs.keys.sorted() where otherLanguage.contains(id) {
            guard let pick = picks[id], state.packs[pick] != nil else { continue }
            state.packs[id] = nil
            try save(state)
            FileSystem.remove(packPath(id))
            report.lines.append("deleted \(id): the device's language takes \(pick)")
        }
        try save(state)
        for (id, held) in state.packs.sorted(by: { $0.key < $1.key }) {
            report.lines.append("device has \(id) version \(held.version) (\(held.size) bytes)")
        }
        report.lines.append("managed \(event): \(state.packs.count) packs held, \(report.failed.count) failed")
        return report
    }

    /// Downloads a pack into `temporary` beside its place, streamed with the size limit enforced
    /// as it arrives, and checks it (the caller renames it into place). Credentials go only to the
    /// manifest's own host (scheme, host and port): a pack URL elsewhere gets none.
    private func download(
        _ pack: DownloadManifest.AssetPack, to temporary: String, manifestURL: URL, transport: HTTPTransport, headers: [String: String]
    ) async throws {
        guard let url = URL(string: pack.url), allowHTTP || url.scheme == "https" else { throw CLIError("the pack URL is not https: \(pack.url)") }
        guard pack.downloadSize >= 0 else { throw CLIError("downloadSize \(pack.downloadSize) is negative") }
        func origin(_ url: URL) -> String { "\(url.scheme ?? "")://\(url.host?.lowercased() ?? ""):\(url.port ?? (url.scheme == "https" ? 443 : 80))" }
        let sameHost = origin(url) == origin(manifestURL)
        let response: HTTPTransport.Response
        do {
            response = try await transport.download(url, headers: sameHost ? headers : [:], to: temporary, limit: pack.downloadSize)
        } catch {
            throw CLIError("the download is larger than downloadSize \(pack.downloadSize), or failed: \(error)")
        }
        guard response.status == 200 else { throw CLIError("HTTP \(response.status) for \(pack.url)") }
        let size = try FileDescriptor.openForReading(temporary).size()
        guard size == pack.downloadSize else {
            throw CLIError("\(size) bytes arrived where downloadSize says \(pack.downloadSize): the system fails the download")
        }
        if let sha256 = pack.sha256, try SHA256Hasher.hexDigest(ofFile: temporary) != sha256 {
            throw CLIError("the archive's SHA-256 differs from the manifest's \(DownloadManifest.sha256Key)")
        }
    }
}
