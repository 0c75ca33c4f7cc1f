import ArgumentParser
import DepotCore
import Foundation

/// What the signer trusts, from their own files rather than from the host (issue 61): `--root
/// FILE…`, the app's root documents as the operator signed them (`depot root sign --out`), and
/// `--confirm-release N` for a release number no honest origin would issue, or one below the
/// last your record holds.
struct SignerTrustOptions: ParsableArguments {
    @OptionGroup var rootFiles: RootFilesOption
    var roots: [String] { rootFiles.roots }
    @Option(name: .customLong("confirm-release"), help: ArgumentHelp(
        "Sign a release numbered above the current Unix time plus a day, which no honest origin issues (ReleaseNumbers), or below the last one your --record holds for the channel (that one never went live); give that exact number.", valueName: "N"
    ))
    var confirmRelease: Int?
    @Option(name: .customLong("record"), help: ArgumentHelp(
        "Your own record for the app (made at the first signature, kept with your key): the root you walked to and the last release you signed per channel. It is the root you trust when no newer --root is given, no release below the one it holds counts as signed before, and none below it (or equal with other packs) is signed unless confirmed.",
        valueName: "record.json"
    ))
    var record: String?

    /// The root the signer trusts for `app` — the newest of `--root`'s files, or the record's
    /// root when that is newer (a record holds only roots a signature was anchored at: one of
    /// your files then) — the record, and which of the two it is ("--root", "your record").
    func anchor(app: String) throws -> (root: TrustedRoot?, record: SignerRecord?, source: String) {
        let files = roots.isEmpty ? nil : try OfflineRoots.newest(roots, app: app)
        guard let record else { return (files, nil, "--root") }
        guard let held = try SignerRecord.read(record, app: app) else {
            // A record starts from your own files, never from what the host exported.
            guard files != nil else {
                throw CLIError("\(record) does not exist yet: a record starts from your own root files, so give --root root-N.json this first time; nothing was signed")
            }
            return (files, nil, "--root")
        }
        let recorded = try held.trustedRoot(path: record)
        guard let files else { return (recorded, held, "your record") }
        if let yours = files.walked[recorded.document.version] {
            guard yours == recorded.payloadSHA256 else {
                throw CLIError("\(record) holds root version \(recorded.document.version) with sha256 \(recorded.payloadSHA256), not the one your --root files hold (sha256 \(yours)); nothing was signed")
            }
            return (files, held, "--root")
        }
        return recorded.document.version > files.document.version ? (recorded, held, "your record") : (files, held, "--root")
    }
}

/// The signer's own record for one app (`--record`): the newest root their signatures walked to,
/// as signed, and per channel the highest release they signed. Written after each signature
/// (atomically, mode 0600); never read from or sent to the origin.
struct SignerRecord: Codable {
    var app: String
    /// The root's signed document (base64 of its envelope's JSON), its version and payload SHA-256.
    var root: String
    var rootVersion: Int
    var rootSHA256: String
    /// Per channel, the highest release signed.
    var signed: [String: Int]
    /// Per channel, what that release's statement binds (`packsSHA256/packCount`, and the primary
    /// language after a space when it binds one); absent in records written before it was kept.
    var digests: [String: String]?

    /// What a statement of `manifest` binds, as ``digests`` keeps it.
    static func digest(of manifest: Manifest) -> String {
        "\(ReleaseStatement.digest(of: manifest.packs))/\(manifest.packs.count)" + (ReleaseStatement.boundLanguage(of: manifest).map { " " + $0 } ?? "")
    }

    /// Refuses release `release` of `channel` (holding `manifest`) below the last one signed, or
    /// equal to it with other content, unless `confirmed` is that number: a device that took the
    /// last one refuses it as a replay. The origin issues a number again after a restore from a
    /// backup older than the signature; a lower release is also what promoting an older one after
    /// the last signature never went live looks like (its promotion refused, its rollout halted).
    func checkNotBehind(_ release: Int, manifest: Manifest, channel: String, path: String, confirmed: Int?) throws {
        guard let last = signed[channel], confirmed != release else { return }
        let ways = """
            If the origin issued this number again (restored from a backup older than your signature): stop it, raise its numbers with \
            depot restore --data DATA --floor \(last + 1), start it, publish again (a change of a pack: a publish that changes nothing keeps \
            its number) and sign that release. If release \(last) never reached devices (its promotion was refused, its rollout halted), \
            sign with --confirm-release \(release). Nothing was signed
            """
        if release < last {
            throw CLIError("release \(release) is below release \(last), which you signed for channel \(channel) (\(path)): devices that took release \(last) refuse it as a replay. \(ways)")
        }
        if release == last, let kept = digests?[channel], kept != Self.digest(of: manifest) {
            throw CLIError("release \(release) of channel \(channel) holds other packs than the release \(last) you signed (\(path)): devices that took yours refuse it. \(ways)")
        }
    }

    static func read(_ path: String, app: String) throws -> SignerRecord? {
        guard FileSystem.exists(path) else { return nil }
        let bytes: [UInt8]
        do {
            bytes = try FileSystem.readFile(path, limit: 4 << 20)
        } catch {
            throw CLIError("\(path) cannot be read: \(error)")
        }
        guard let record = try? JSONDecoder().decode(SignerRecord.self, from: Data(bytes)) else {
            throw CLIError("\(path) is not a signer's record (depot release sign --record writes one)")
        }
        guard record.app == app else { throw CLIError("\(path) is the record for app \(record.app), not \(app)") }
        return record
    }

    /// The recorded root, checked against the record's own version and SHA-256.
    func trustedRoot(path: String) throws -> TrustedRoot {
        guard let bytes = Data(base64Encoded: root), let envelope = try? Envelope.decode(Array(bytes)),
              let trusted = try? RootChain.selfSigned(envelope, app: app), trusted.document.version == rootVersion, trusted.payloadSHA256 == rootSHA256 else {
            throw CLIError("\(path): its root does not verify, or is not the version and SHA-256 it records")
        }
        return trusted
    }

    /// Records release `release` (holding `manifest`) signed for `channel` under `root` (the newest the walk reached).
    static func update(_ path: String?, app: String, channel: String, release: Int, manifest: Manifest, root: TrustedRoot) throws {
        guard let path else { return }
        var record = try read(path, app: app) ?? SignerRecord(app: app, root: "", rootVersion: 0, rootSHA256: "", signed: [:])
        if root.document.version >= record.rootVersion {
            (record.root, record.rootVersion, record.rootSHA256) = (Data(root.kept.encoded()).base64EncodedString(), root.document.version, root.payloadSHA256)
        }
        if release >= record.signed[channel] ?? 0 {
            record.signed[channel] = release
            record.digests = (record.digests ?? [:]).merging([channel: digest(of: manifest)]) { $1 }
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        try FileSystem.writeAtomically(Array(try encoder.encode(record)) + [10], to: path, mode: 0o600)
    }
}

/// `--root FILE…`: the operator's own files of the app's root, as `depot root sign --out` wrote them.
struct RootFilesOption: ParsableArguments {
    @Option(name: .customLong("root"), help: ArgumentHelp(
        "Your own file of the app's root (depot root sign --out), repeat for the chain: its newest version is what you trust. What the origin holds must carry that very document, and no later version you have no file of; else nothing is signed or printed. Without it the root comes from what depot keys export read from the origin's data folder.",
        valueName: "root.json"
    ))
    var roots: [String] = []
}

/// The operator's own root files, and how what the host shows is checked against them.
enum OfflineRoots {
    /// The newest of `paths`' root documents, each version after the lowest checked by TUF's rule
    /// (signed by the previous version's root keys and by its own); the versions must follow one another.
    static func newest(_ paths: [String], app: String) throws -> TrustedRoot {
        var documents: [(version: Int, envelope: Envelope, path: String)] = []
        for path in paths {
            let envelope = try OfflineFiles.envelope(path, what: "a root document")
            let document: RootDocument
            do {
                document = try RootChain.selfSigned(envelope, app: app).document
            } catch {
                throw CLIError("\(path): \(error)")
            }
            documents.append((document.version, envelope, path))
        }
        documents.sort { $0.version < $1.version }
        for (earlier, later) in zip(documents, documents.dropFirst()) where later.version == earlier.version {
            throw CLIError("\(earlier.path) and \(later.path) are both root version \(later.version): give each version you signed once")
        }
        for (earlier, later) in zip(documents, documents.dropFirst()) where later.version != earlier.version + 1 {
            throw CLIError("\(later.path) is root version \(later.version), and --root's files must follow one another (version \(earlier.version + 1) is missing)")
        }
        let lowest = try RootChain.selfSigned(documents[0].envelope, app: app)
        do {
            return try RootChain.walk(from: lowest, through: documents.dropFirst().map(\.envelope))
        } catch {
            throw CLIError("--root's files are not one chain: \(error)")
        }
    }

    /// The lower-case hex SHA-256 of a root envelope's payload (what devices record), or nil.
    static func digest(_ envelope: Envelope) -> String? { envelope.payloadBytes.map { Hex.encode(SHA256Hasher.hash($0)) } }

    /// Refuses when the origin's root chain (`chain`, the roots an envelope it served carries)
    /// does not hold `anchor` itself at its version: the host replaced the root you signed.
    static func check(_ chain: [Envelope], extends anchor: TrustedRoot, what: String) throws {
        let version = anchor.document.version
        let served = chain.filter { (try? RootChain.selfSigned($0, app: anchor.document.app).document.version) == version }.compactMap(digest)
        guard served.contains(anchor.payloadSHA256) else {
            let shown = served.isEmpty ? "no root version \(version)" : "root version \(version) with sha256 \(served.joined(separator: ", "))"
            throw CLIError("""
                \(what) carries \(shown), not your root version \(version) (sha256 \(anchor.payloadSHA256)): the origin does not extend the root you \
                signed (its roots/ were replaced, or it serves another app's chain); nothing was signed or written
                """)
        }
    }

    /// Why a chain that goes on past `anchor` (to `reached`) is refused.
    static func beyond(_ anchor: TrustedRoot, reached: Int, what: String) -> CLIError {
        let versions = reached == anchor.document.version + 1 ? "version \(reached)" : "versions \(anchor.document.version + 1)…\(reached)"
        return CLIError("""
            \(what) carries root \(versions), after your newest (version \(anchor.document.version)): a version you signed is trusted only from your \
            own file of it (the holder of a retired root key could have made another); give it with --root root-\(reached).json (and any in \
            between); nothing was signed or written
            """)
    }

    /// Refuses a configuration that pins a root the operator's chain does not hold (one exported
    /// from a host whose `roots/` were replaced), or one that does not walk from `anchor`.
    static func check(configuration pinned: Envelope, against anchor: TrustedRoot, config: String) throws {
        let root: TrustedRoot
        do {
            root = try RootChain.selfSigned(pinned, app: anchor.document.app)
        } catch {
            throw CLIError("\(config): its root does not verify: \(error)")
        }
        let version = root.document.version
        if let yours = anchor.walked[version] {
            guard yours == root.payloadSHA256 else {
                throw CLIError("""
                    \(config) pins root version \(version) with sha256 \(root.payloadSHA256), not your root version \(version) (sha256 \(yours)): it was exported \
                    from a host whose roots were replaced; export it again with depot keys export --root (your files), and nothing was signed
                    """)
            }
        } else if version > anchor.document.version {
            // A newer root than your files: it must follow from the newest you hold (a version you did not pass with --root).
            throw CLIError("\(config) pins root version \(version), newer than the newest root you trust (version \(anchor.document.version)): give your files of every version you signed since (--root)")
        } else {
            // An older version than your lowest file: your chain starts after it, so it proves nothing either way.
            FileHandle.standardError.write(Data("note: \(config) pins root version \(version), older than the root you trust (version \(anchor.document.version)); checked against yours instead\n".utf8))
        }
    }
}

/// The release numbers a signer signs without a second look (issue 61).
///
/// An origin numbers releases 1, 2, 3…; after a restore it starts above the backup's newest
/// release and at least at the Unix time of the restore (the release floor), so that no number
/// a device accepted before is issued again. So an honest number never exceeds the current Unix
/// time plus the releases published since the last restore — fewer than one a second. A number
/// above now + one day is one no honest origin issued, and a device that accepts it refuses
/// every later honest release as a replay until a number above it is signed: the signer refuses
/// it unless given that exact number with `--confirm-release`. Any number an honest origin
/// reaches later (a restore at a later time starts above it) releases the devices again.
enum ReleaseNumbers {
    /// The highest number signed without `--confirm-release` at `now`.
    static func ceiling(now: Date) -> Int { Int(now.timeIntervalSince1970) + 86_400 }

    /// Refuses `release` above ``ceiling(now:)`` unless `confirmed` is that number, and any at or
    /// above 2^52 (`ReleaseStatement.maximumRelease`): devices take none above it, and one there
    /// would leave no number to recover with.
    static func check(_ release: Int, confirmed: Int?, now: Date = Date()) throws {
        guard release < ReleaseStatement.maximumRelease else {
            throw CLIError("release \(release) is at or above 2^52, which no device takes and from which no later release could recover; nothing was signed")
        }
        let ceiling = ceiling(now: now)
        guard release > ceiling, confirmed != release else { return }
        throw CLIError("""
            release \(release) is above \(ceiling) (the current Unix time plus a day), a number no honest origin issues: after a restore numbers \
            start at about the Unix time, never beyond. Devices that accept it refuse every later release below it. If you set the release floor \
            this high yourself (to recover devices that recorded such a number), sign with --confirm-release \(release); nothing was signed
            """)
    }
}
