import DepotClient
import DepotCore
import Foundation

/// What the signer checks before signing: a release key vouches for bytes the signer checked
/// against a source the origin does not control. Each pack of release N is either unchanged
/// since the channel's last signed release (every field a statement binds equal, that release's
/// statement verified with the root's release keys: a release key holder checked it before; the
/// release no older than the one the signer's configuration was exported at, and never a rollout's
/// candidate), or matched by the signer's own file, whose plaintext the container the release
/// names decrypts to. A pack given a file is always checked against it; `--check-all` counts no
/// release signed before.
extension ReleaseSigning {
    /// A pack of a release signed before for the channel, and the release it came with.
    struct SignedPack {
        var pack: BoundPack
        var release: Int
    }

    /// The packs the channel's live manifest carries under release statements the configuration's
    /// root verifies, by id, and a line saying where they come from.
    struct SignedBefore {
        var packs: [String: [SignedPack]] = [:]
        var summary: String

        /// The release a pack as `entry` binds it was signed with, if any.
        func release(of entry: PackEntry) -> Int? {
            let bound = BoundPack(entry)
            return packs[entry.id]?.filter { $0.pack == bound }.map(\.release).max()
        }
    }

    /// Release `release`, checked pack by pack against the channel's last signed release and
    /// the signer's files (one line per pack printed before anything is signed); throws, naming
    /// every pack that is neither, when one is.
    static func checked(
        origin: ServerOptions, credentials: CredentialsOption, channel: String, release: Int, config: String, files: PackFilesOptions, trust: SignerTrustOptions
    ) async throws -> (manifest: Manifest, root: TrustedRoot) {
        let configuration = try Sync.loadConfiguration(config)
        guard configuration.app == origin.app else { throw CLIError("\(config) is for app \(configuration.app), not \(origin.app)") }
        try ReleaseNumbers.check(release, confirmed: trust.confirmRelease)
        // The root the signer trusts: their own files (--root) when given, the configuration checked
        // against them; else the configuration's, which depot keys export took from the host.
        let configured = try configuration.pinnedRoot()
        let (anchor, record, source) = try trust.anchor(app: origin.app)
        let pinned: Envelope
        if let anchor {
            if let configured { try OfflineRoots.check(configuration: configured, against: anchor, config: config) }
            pinned = anchor.envelope
        } else if let configured {
            FileHandle.standardError.write(Data("""
                note: the root you check against is the one \(config) pins, which depot keys export read from the origin's data folder; \
                pass your own root files (--root root-N.json) so that a host taken over cannot choose it

                """.utf8))
            pinned = configured
        } else {
            throw CLIError("\(config) pins no root of trust: only an app with a root has release statements; export its configuration again after depot root add (depot keys export --app \(origin.app))")
        }
        let (manifest, reached) = try await fetch(origin: origin, credentials: credentials, release: release, pinned: pinned, config: config, anchor: anchor)
        try record?.checkNotBehind(release, manifest: manifest, channel: channel, path: trust.record ?? "your record", confirmed: trust.confirmRelease)
        // No release below the one your configuration was exported at, or the last you signed
        // (your record), counts as signed before.
        let floor = max(configuration.releaseFloors?[channel] ?? 0, record?.signed[channel] ?? 0)
        let before = files.checkAll
            ? SignedBefore(summary: "--check-all: every pack is checked against your files")
            : try await signedBefore(origin: origin, credentials: credentials, channel: channel, pinned: pinned, floor: floor, newest: anchor?.document.version)
        let index = files.index(ids: Set(manifest.packs.map(\.id)))
        let containers = ContainerCheck(
            keyRing: try configuration.keyRing(), headers: credentials.headers, options: origin.connection.options, release: release
        )
        var lines: [String] = []
        var refused: [(id: String, line: String)] = []
        for entry in manifest.packs.sorted(by: { $0.id < $1.id }) {
            let name = "\(entry.id) revision \(entry.revision)\(entry.language.map { " (\($0))" } ?? "")"
            // What a device does with it: unpacked (a zip) or one file, and how large once installed.
            let how = " [\(entry.contentType), \(entry.installSize) bytes installed]"
            let file = index.file(for: entry.id)
            // A pack you gave a file for is checked against it, unchanged or not: the origin
            // chose which release the baseline is.
            if let signed = before.release(of: entry), case .none = file {
                lines.append("  \(name): unchanged since release \(signed) (signed)" + how)
                continue
            }
            switch file {
            case .none(let why):
                refused.append((entry.id, "\(name): changed since the last signed release, and \(why)"))
            case .file(let path):
                switch await containers.vouch(entry, file: path) {
                case .success(let found): lines.append("  \(name): matches \(path) (\(found))" + how)
                case .failure(let why): refused.append((entry.id, "\(name): \(why.description)"))
                }
            }
        }
        let kept = Set(manifest.packs.map(\.id))
        for id in before.packs.keys.sorted() where !kept.contains(id) { lines.append("  \(id): removed (the last signed release has it; release \(release) does not)") }
        if let language = ReleaseStatement.boundLanguage(of: manifest) {
            lines.append("  primary language: \(language) (a device that speaks none of a group's languages keeps this language's pack; the statement binds it)")
        }
        for unused in index.unused(ids: kept) { lines.append("  note: \(unused) names no pack of release \(release)") }
        let against = anchor.map { "your root version \($0.document.version) (\(source))" } ?? config
        let heading = "release \(release) of \(origin.app) for channel \(channel), checked against \(against): \(before.summary)"
        guard refused.isEmpty else {
            FileHandle.standardError.write(Data(([heading] + refused.map { "  " + $0.line }).map { $0 + "\n" }.joined().utf8))
            let (count, total) = (refused.count, manifest.packs.count)
            throw CLIError("""
                refusing to sign release \(release) of \(origin.app) for channel \(channel): \(count) of its \(total) pack\(total == 1 ? "" : "s") \
                (\(refused.map(\.id).joined(separator: ", "))) \(count == 1 ? "is" : "are") neither unchanged since the channel's last signed release \
                nor matched by your files (above); nothing was signed or uploaded
                """)
        }
        print(heading)
        for line in lines { print(line) }
        return (manifest, reached)
    }

    /// The packs of the channel's live manifest that release statements bind: its main packs,
    /// and a running rollout's candidate's, when the configuration's root verifies the manifest
    /// and the statements. None when the channel serves nothing yet, is not protected, or its
    /// manifest carries no statement the root verifies: then every pack needs its file.
    static func signedBefore(
        origin: ServerOptions, credentials: CredentialsOption, channel: String, pinned: Envelope, floor: Int, newest: Int?
    ) async throws -> SignedBefore {
        let response = try await origin.transport().get(origin.endpoint("channels/\(channel)/manifest"), headers: credentials.headers, limit: ManifestSource.sizeLimit)
        guard response.status != 404 else { return SignedBefore(summary: "channel \(channel) serves no release yet, so every pack is checked against your files") }
        guard response.status == 200 else {
            throw CLIError("reading channel \(channel)'s manifest failed: HTTP \(response.status): \(Publish.message(response.body))")
        }
        let trusted: TrustedManifest
        do {
            trusted = try ManifestTrust.verify(envelope: response.body, pinned: pinned, record: nil, app: origin.app, channel: channel, now: Date())
        } catch {
            return SignedBefore(summary: "no release signed before counts: channel \(channel)'s live manifest does not verify with your configuration (\(error)), so every pack is checked against your files")
        }
        if let newest, trusted.root.document.version > newest {
            return SignedBefore(summary: "no release signed before counts: channel \(channel)'s live manifest carries root version \(trusted.root.document.version), after your newest (version \(newest)), so every pack is checked against your files")
        }
        guard let main = trusted.signedRelease else {
            return SignedBefore(summary: "channel \(channel) is not protected by root version \(trusted.root.document.version), so no release of it was signed and every pack is checked against your files")
        }
        // The origin answers this request: it could show any release ever signed for the channel.
        // Only one at or above the release your configuration was exported at counts (export it
        // again before signing; --check-all takes none), and never a rollout's candidate.
        guard main >= floor else {
            return SignedBefore(summary: "no release signed before counts: channel \(channel) shows release \(main), older than release \(floor), which your configuration was exported at or you last signed; every pack is checked against your files")
        }
        var before = SignedBefore(summary: "channel \(channel)'s last signed release is release \(main) (its statement verified with root version \(trusted.root.document.version)'s release keys; your configuration was exported at release \(floor))")
        for entry in trusted.manifest.packs { before.packs[entry.id, default: []].append(SignedPack(pack: BoundPack(entry), release: main)) }
        return before
    }
}
