import Foundation

/// What the app's release keys sign for a protected channel (see <doc:RootOfTrust>): for one
/// release of the app on one channel, every pack a device installs, by the fields it installs by
/// (``BoundPack``), bound by the SHA-256 of their canonical text (``digest(of:)``): a statement is
/// a few hundred bytes whatever the number of packs, so that a manifest of 10,000 packs carrying
/// two is verified in a Background Assets extension's memory. The origin's online key only
/// vouches that the manifest is fresh; a device on a protected channel installs nothing a
/// statement does not bind.
public struct ReleaseStatement: Codable, Hashable, Sendable {
    /// The payload type of a release statement's envelope.
    public static let payloadType = "application/vnd.assetdepot.release+json"

    /// Always `release`.
    public var type: String
    /// The app id.
    public var app: String
    /// The channel it is signed for.
    public var channel: String
    /// The origin's release number whose packs these are: the release's identity (a device never
    /// accepts a lower one on the channel again).
    public var release: Int
    /// When the first signer signed it.
    public var signedAt: Date
    /// How many packs it binds.
    public var packCount: Int
    /// Lower-case hex SHA-256 of the packs' canonical text (``digest(of:)``).
    public var packsSHA256: String
    /// The app's primary language, when the packs include a localized one: a device that speaks
    /// none of a group's languages keeps the primary language's pack, so the manifest must carry
    /// exactly this (``ReleaseBinding``). Absent for releases without localized packs and in
    /// statements signed by AssetDepot 0.1.0 (devices then take the manifest's, as before).
    public var primaryLanguage: String?

    public init(app: String, channel: String, release: Int, signedAt: Date, packs: [PackEntry], primaryLanguage: String? = nil) {
        type = "release"
        (self.app, self.channel, self.release, self.signedAt) = (app, channel, release, signedAt)
        packCount = packs.count
        packsSHA256 = Self.digest(of: packs)
        self.primaryLanguage = primaryLanguage
    }

    /// The statement of `manifest`'s packs (release `release` for `channel`), binding its primary
    /// language when any of them is localized.
    public init(app: String, channel: String, release: Int, signedAt: Date, manifest: Manifest) {
        self.init(app: app, channel: channel, release: release, signedAt: signedAt, packs: manifest.packs, primaryLanguage: Self.boundLanguage(of: manifest))
    }

    /// The primary language a statement of `manifest` binds: the manifest's, when a pack is localized.
    public static func boundLanguage(of manifest: Manifest) -> String? {
        manifest.packs.contains { $0.language != nil } ? manifest.primaryLanguage : nil
    }

    /// Whether `manifest` carries the primary language this statement binds (any, when it binds none).
    public func agreesOnLanguage(_ manifest: Manifest) -> Bool { primaryLanguage == nil || primaryLanguage == manifest.primaryLanguage }

    /// The bound form of a pack list, sorted by id.
    public static func bound(_ packs: [PackEntry]) -> [BoundPack] { packs.map(BoundPack.init).sorted { $0.id < $1.id } }

    /// SHA-256 (lower-case hex) of the packs' canonical text: per pack, sorted by id, one line of
    /// `id`, `revision`, `sha256`, `size`, `plaintextSHA256`, `installSize`, then `language` and
    /// `contentType` each as its UTF-8 byte count, a colon and its bytes (`-` for no language),
    /// separated by tabs and ended by a line feed. Ids, hex digests and decimal numbers hold no tab
    /// or line feed (a manifest with any other id is refused), and the two free texts are
    /// length-prefixed, so no two pack lists have the same text.
    ///
    /// Hashed as it is produced (the packs of a decoded manifest are in id order already: no copy
    /// is made of them), so that a manifest of 10,000 packs is checked in an extension's memory.
    public static func digest(of packs: [PackEntry]) -> String {
        let hasher = SHA256Hasher()
        let sorted = zip(packs, packs.dropFirst()).allSatisfy { $0.id < $1.id }
        if sorted {
            for pack in packs { hasher.update(Array(BoundPack.canonicalLine(pack).utf8)) }
        } else {
            for pack in packs.sorted(by: { $0.id < $1.id }) { hasher.update(Array(BoundPack.canonicalLine(pack).utf8)) }
        }
        return Hex.encode(hasher.finalize())
    }

    /// Whether the statement binds exactly `packs`.
    public func binds(_ packs: [PackEntry]) -> Bool { packs.count == packCount && Self.digest(of: packs) == packsSHA256 }

    /// Canonical JSON.
    public func encoded() -> [UInt8] { Array(try! Manifest.encoder.encode(self)) }

    /// The highest release number a statement may carry (2^52): far above any an origin issues
    /// (after a restore numbers start at about the Unix time), and below the largest a device
    /// could record, so that whatever number a device accepted, a release can be signed above it
    /// (ReleaseNumbers in the CLI refuses to sign a number no honest origin issues).
    public static let maximumRelease = Int(clamping: Int64(1) << 52)  // (Int.max where Int is 32 bits: watchOS's arm64_32)

    /// Parses a statement's JSON.
    public static func decode(_ bytes: [UInt8]) throws(TrustError) -> ReleaseStatement {
        guard let statement = try? Manifest.decoder.decode(ReleaseStatement.self, from: Data(bytes)), statement.type == "release",
              Identifier.isValidApp(statement.app), Identifier.isValidChannel(statement.channel), (1...maximumRelease).contains(statement.release), statement.packCount >= 0,
              Manifest.isDigest(statement.packsSHA256), statement.primaryLanguage.map({ LanguageTag($0) != nil }) ?? true else {
            throw TrustError("a release statement is not valid JSON of its form")
        }
        return statement
    }

    /// Signs the statement with the given release keys.
    public func signed(with keys: [any Ed25519Signer]) throws -> Envelope {
        try Envelope.sign(payload: encoded(), type: Self.payloadType, with: keys)
    }

    /// The statement in `envelope`, when signed by the release threshold of `root`'s release keys.
    public static func verified(_ envelope: Envelope, root: RootDocument) throws(TrustError) -> ReleaseStatement {
        let bytes = try envelope.payload(
            ofType: payloadType, signedBy: root.releasePublicKeys(), threshold: root.releaseThreshold,
            what: "a release statement", keysName: "root version \(root.version)'s release keys"
        )
        let statement = try decode(bytes)
        guard statement.app == root.app else { throw TrustError("release \(statement.release)'s statement is app \(statement.app)'s, not \(root.app)'s") }
        return statement
    }
}

/// A pack as a release statement binds it: the fields a device installs by, and how (its media
/// type: a zip is unpacked). Not the URL (any
/// mirror may serve the bytes), not patches (a patched copy is checked against the plaintext's
/// SHA-256 and size), nor tags, policy or `userInfo` (when, not what).
public struct BoundPack: Codable, Hashable, Sendable {
    public var id: String
    public var revision: Int
    /// SHA-256 of the container, lower-case hex, and its size.
    public var sha256: String
    public var size: Int64
    /// SHA-256 of the plaintext, lower-case hex, and its installed size.
    public var plaintextSHA256: String
    public var installSize: Int64
    /// The language of a localized pack.
    public var language: String?

    public init(_ entry: PackEntry) {
        (id, revision, sha256, size) = (entry.id, entry.revision, entry.sha256, entry.size)
        (plaintextSHA256, installSize, language, contentType) = (entry.plaintextSHA256, entry.installSize, entry.language, entry.contentType)
    }

    /// The pack's media type (a zip is unpacked, other types installed as one file).
    public var contentType: String

    /// A pack's line in the canonical text (``ReleaseStatement/digest(of:)``).
    static func canonicalLine(_ pack: PackEntry) -> String {
        let language = pack.language.map { "\($0.utf8.count):\($0)" } ?? "-"
        return "\(pack.id)\t\(pack.revision)\t\(pack.sha256)\t\(pack.size)\t\(pack.plaintextSHA256)\t\(pack.installSize)\t"
            + "\(language)\t\(pack.contentType.utf8.count):\(pack.contentType)\n"
    }
}

/// The check a device on a protected channel makes: the manifest's packs, and a running
/// rollout's candidate, are each bound by a release statement the app's release keys signed for
/// this app and channel.
public enum ReleaseBinding {
    /// The most statements read from one manifest envelope.
    public static let statementLimit = 8

    /// The release number of the statement binding `manifest`'s packs (with a rollout, its
    /// candidate is checked too, and must be a later release); throws when none binds them.
    public static func check(_ manifest: Manifest, statements: [Envelope], root: RootDocument, channel: String) throws(TrustError) -> Int {
        try binding(manifest, statements: statements, root: root, channel: channel).release
    }

    /// The statement binding `manifest`'s packs, checked as ``check(_:statements:root:channel:)`` checks it.
    public static func binding(_ manifest: Manifest, statements: [Envelope], root: RootDocument, channel: String) throws(TrustError) -> ReleaseStatement {
        guard !statements.isEmpty else {
            throw TrustError("channel \(channel) is protected, and the manifest carries no release signed by the app's release keys")
        }
        guard statements.count <= statementLimit else { throw TrustError("the manifest carries more than \(statementLimit) release statements") }
        var verified: [ReleaseStatement] = []
        var refusals: [String] = []
        for envelope in statements {
            do throws(TrustError) {
                let statement = try ReleaseStatement.verified(envelope, root: root)
                guard statement.channel == channel else {
                    refusals.append("release \(statement.release)'s statement is signed for channel \(statement.channel), not \(channel)")
                    continue
                }
                verified.append(statement)
            } catch {
                refusals.append(error.description)
            }
        }
        // A statement binding the packs with another primary language does not bind this manifest:
        // which localized pack a device keeps would be the online key's choice.
        for statement in verified where !statement.agreesOnLanguage(manifest) {
            refusals.append("release \(statement.release)'s statement binds primary language \(statement.primaryLanguage ?? "-"), and the manifest carries \(manifest.primaryLanguage ?? "none")")
        }
        verified.removeAll { !$0.agreesOnLanguage(manifest) }
        let main = ReleaseStatement.digest(of: manifest.packs)
        guard let bound = verified.filter({ $0.packsSHA256 == main && $0.packCount == manifest.packs.count }).max(by: { $0.release < $1.release }) else {
            let why = refusals.isEmpty ? "no signed release of channel \(channel) holds exactly the manifest's packs" : refusals.joined(separator: "; ")
            throw TrustError("the manifest's packs are not a release signed for channel \(channel): \(why)")
        }
        if let rollout = manifest.rollout {
            let candidate = manifest.choosing(candidate: true).packs
            let digest = ReleaseStatement.digest(of: candidate)
            guard verified.contains(where: { $0.release == rollout.release && $0.packCount == candidate.count && $0.packsSHA256 == digest }) else {
                let why = refusals.isEmpty ? "" : ": " + refusals.joined(separator: "; ")
                throw TrustError("the rollout's candidate (release \(rollout.release)) is not a release signed for channel \(channel)\(why)")
            }
            guard rollout.release > bound.release else {
                throw TrustError("the rollout's candidate (release \(rollout.release)) is not later than the release it replaces (\(bound.release))")
            }
        }
        return bound
    }
}
