import Foundation

/// The list of packs an app should have: what a signed envelope carries. See <doc:ManifestFormat>.
public struct Manifest: Codable, Hashable, Sendable {
    /// The schema this code writes.
    public static let currentSchemaVersion = 1

    /// Always 1 for now.
    public var schemaVersion: Int
    /// The app id.
    public var app: String
    /// Strictly increasing per app.
    public var version: Int
    /// When the server signed it (ISO 8601, UTC).
    public var publishedAt: Date
    /// After this instant clients refuse it (protection against a frozen origin).
    public var expiresAt: Date
    /// The packs, sorted by id.
    public var packs: [PackEntry]
    /// The channel this manifest was signed for (`production`, `beta`, …): a client checks it
    /// against the channel it asked for, so that one channel's envelope cannot stand in for
    /// another's. Absent in manifests signed before channels were named, which clients take as
    /// production's (see <doc:ManifestFormat>).
    public var channel: String?
    /// The app's primary language (a ``LanguageTag``): what a device whose languages none of a
    /// group of localized packs speaks takes instead. Absent when no pack is localized.
    public var primaryLanguage: String?
    /// A release offered to a fraction of the channel's devices first: its entries beside the
    /// current ones, each device choosing (``resolved(installID:candidateFloor:)``, <doc:Rollouts>). Absent
    /// when none runs; a client that predates rollouts ignores it and follows ``packs``.
    public var rollout: Rollout?

    public init(
        app: String, version: Int, publishedAt: Date, expiresAt: Date, packs: [PackEntry], channel: String? = nil, primaryLanguage: String? = nil,
        rollout: Rollout? = nil
    ) {
        self.schemaVersion = Self.currentSchemaVersion
        self.rollout = rollout
        self.channel = channel
        self.primaryLanguage = primaryLanguage
        self.app = app
        self.version = version
        self.publishedAt = publishedAt
        self.expiresAt = expiresAt
        self.packs = packs.sorted { $0.id < $1.id }
    }

    /// The primary language, parsed.
    public var primaryLanguageTag: LanguageTag? { primaryLanguage.flatMap(LanguageTag.init) }

    /// The pack with this id.
    public subscript(pack id: String) -> PackEntry? { packs.first { $0.id == id } }

    /// Canonical JSON: sorted keys, ISO 8601 dates, no escaped slashes.
    public func encoded() -> [UInt8] {
        Array(try! Manifest.encoder.encode(self))
    }

    /// Parses manifest JSON and checks what a device turns into file names and sizes
    /// (``problem``): a manifest that fails is refused as a whole.
    public static func decode(_ bytes: [UInt8]) throws -> Manifest {
        try bytes.withUnsafeBytes { try decode(buffer: $0) }
    }

    /// ``decode(_:)`` from memory it does not copy. The packs are decoded one at a time (each
    /// from its own bytes, found by ``JSONScanner``), the rest from a copy of the text without
    /// them: a manifest of 10,000 packs is never held as one JSON tree beside its result.
    ///
    /// `consumed` is told, as the packs are decoded in order, the offset before which the text
    /// is no longer read (its owner may give those pages back).
    static func decode(buffer: UnsafeRawBufferPointer, consumed: (Int) -> Void = { _ in }) throws -> Manifest {
        func data(_ range: Range<Int>) -> Data {
            Data(bytesNoCopy: UnsafeMutableRawPointer(mutating: buffer.baseAddress! + range.lowerBound), count: range.count, deallocator: .none)
        }
        let scanner = JSONScanner(buffer)
        var manifest: Manifest
        if buffer.count > 0, let packs = scanner.member("packs"), let elements = scanner.elements(of: packs) {
            var head: [UInt8] = []
            head.reserveCapacity(buffer.count - packs.count + 2)
            head += buffer[..<packs.lowerBound]
            head += Array("[]".utf8)
            head += buffer[packs.upperBound...]
            manifest = try decoder.decode(Manifest.self, from: Data(head))
            var entries: [PackEntry] = []
            entries.reserveCapacity(elements.count)
            // Values most packs repeat are kept once (a String shares its storage when copied).
            var shared: [String: String] = [:]
            var sharedTags: [[String]: [String]] = [:]
            func once(_ value: String) -> String {
                if let known = shared[value] { return known }
                if shared.count < 256 { shared[value] = value }
                return value
            }
            for element in elements {
                consumed(element.lowerBound)
                var entry = try decoder.decode(PackEntry.self, from: data(element))
                (entry.contentType, entry.keyID) = (once(entry.contentType), once(entry.keyID))
                if let known = sharedTags[entry.tags] { entry.tags = known } else if sharedTags.count < 256 { sharedTags[entry.tags] = entry.tags }
                entries.append(entry)
            }
            manifest.packs = entries
        } else {
            // No packs array the scanner can read: an escaped or repeated top-level key, or not
            // a manifest at all. Refused either way (never read one way here, another elsewhere).
            _ = try decoder.decode(Manifest.self, from: Data(buffer))
            throw ManifestError(description: "the manifest's members cannot be read unambiguously (an escaped or repeated key)")
        }
        if let problem = manifest.problem { throw ManifestError(description: problem) }
        return manifest
    }

    /// What makes this manifest unusable, or nil: the signer is trusted for content, not for
    /// paths, so every value a device turns into a file name or a size is checked — the app id
    /// and pack ids (``Identifier``; ids unique), each SHA-256 (64 lower-case hex digits, which
    /// name downloads and patches on disk), revisions and sizes (not negative, sizes at most
    /// 1 TiB; a patch's base before its revision), and each URL (absolute http or https).
    public var problem: String? {
        guard Identifier.isValidApp(app) else { return "the app id \"\(app.prefix(140))\" is not valid" }
        var seen = Set<String>()
        for pack in packs {
            if let problem = Self.problem(of: pack) { return problem }
            guard seen.insert(pack.id).inserted else { return "pack \(pack.id) is listed twice" }
        }
        if let rollout {
            if let problem = rollout.problem { return problem }
            for pack in rollout.packs {
                if let problem = Self.problem(of: pack) { return "the rollout's " + problem }
            }
        }
        return nil
    }

    /// What makes one entry unusable, or nil.
    static func problem(of pack: PackEntry) -> String? {
        guard Identifier.isValidPack(pack.id) else { return "the pack id \"\(pack.id.prefix(80))\" is not valid" }
        guard pack.revision >= 0, (0...Self.sizeLimit).contains(pack.size), (0...Self.sizeLimit).contains(pack.installSize) else {
            return "pack \(pack.id) has a negative revision, or a size that is negative or over 1 TiB"
        }
        guard Self.isDownloadURL(pack.url) else { return "pack \(pack.id) has a URL that is not http(s)" }
        guard Self.isDigest(pack.sha256), Self.isDigest(pack.plaintextSHA256) else { return "pack \(pack.id) has a SHA-256 that is not 64 lower-case hex digits" }
        for patch in pack.patches ?? [] {
            guard patch.fromRevision >= 0, patch.fromRevision < pack.revision, (0...Self.sizeLimit).contains(patch.size), Self.isDownloadURL(patch.url),
                  Self.isDigest(patch.sha256), Self.isDigest(patch.fromPlaintextSHA256) else {
                return "pack \(pack.id) has a patch from revision \(patch.fromRevision) that is not valid"
            }
        }
        return nil
    }

    /// The largest size a pack, its install or a patch may state: 1 TiB (sums of thousands of
    /// them stay far from overflowing).
    static let sizeLimit: Int64 = 1 << 40

    /// An absolute http or https URL with a host.
    static func isDownloadURL(_ text: String) -> Bool {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), scheme == "https" || scheme == "http" else { return false }
        return url.host?.isEmpty == false
    }

    /// 64 lower-case hex digits.
    static func isDigest(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }
    }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }()

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }()
}

/// One pack in a manifest.
/// A patch download: the delta from an earlier revision of a pack to the entry's revision,
/// encrypted as a pack container under the pack's key. A device takes it only when its installed
/// copy is exactly `fromRevision` with `fromPlaintextSHA256`.
public struct PackPatch: Codable, Hashable, Sendable {
    /// The revision the delta starts from.
    public var fromRevision: Int
    /// SHA-256 of that revision's plaintext, lower-case hex.
    public var fromPlaintextSHA256: String
    /// Absolute URL of the patch's container.
    public var url: String
    /// Container size in bytes, exact.
    public var size: Int64
    /// SHA-256 of the container, lower-case hex.
    public var sha256: String

    public init(fromRevision: Int, fromPlaintextSHA256: String, url: String, size: Int64, sha256: String) {
        (self.fromRevision, self.fromPlaintextSHA256, self.url, self.size, self.sha256) = (fromRevision, fromPlaintextSHA256, url, size, sha256)
    }
}

extension PackEntry {
    /// Every blob the entry names: its container and its patches'.
    public var blobs: [String] { [sha256] + (patches ?? []).map(\.sha256) }

    /// The patch from an installed copy of `revision` with plaintext `plaintextSHA256`, if any.
    public func patch(from revision: Int, plaintextSHA256: String) -> PackPatch? {
        patches?.first { $0.fromRevision == revision && $0.fromPlaintextSHA256 == plaintextSHA256 }
    }
}

public struct PackEntry: Codable, Hashable, Sendable {
    /// When the system downloads a pack, in Background Assets terms.
    public enum Policy: String, Codable, Hashable, Sendable, CaseIterable {
        /// Downloaded at install and update, before first launch.
        case essential
        /// Downloaded in the background after install.
        case prefetch
        /// Downloaded only when the app asks for it.
        case onDemand
    }

    /// The pack id: 1–64 of `A-Z a-z 0-9 . -`.
    public var id: String
    /// Increases whenever the pack's content changes.
    public var revision: Int
    /// Absolute URL of the container, on the public URL.
    public var url: String
    /// Container size in bytes, exact.
    public var size: Int64
    /// SHA-256 of the container, lower-case hex.
    public var sha256: String
    /// Bytes on disk once installed (plaintext, or unpacked for a zip).
    public var installSize: Int64
    /// SHA-256 of the plaintext, lower-case hex.
    public var plaintextSHA256: String
    /// When it is downloaded.
    public var policy: Policy
    /// Free-form tags for on-demand selection.
    public var tags: [String]
    /// The master key id the container is encrypted under.
    public var keyID: String
    /// The plaintext's media type.
    public var contentType: String
    /// Managed apps: the installation events an essential or prefetch pack applies to
    /// (`firstInstallation`, `subsequentUpdate`); nil: both.
    public var installationEventTypes: [String]?
    /// Managed apps: the publisher's `userInfo`, passed on in the download manifest.
    public var userInfo: [String: JSONValue]?
    /// Unmanaged apps: deltas (the "Delta" format) from recent earlier revisions to this one, each
    /// encrypted as a pack container under this pack's key; absent until the origin has made
    /// them (a manifest without them is complete). Signed with the rest.
    public var patches: [PackPatch]?
    /// The language the pack is localized for (a normalised ``LanguageTag``: `fr-CA`); nil: not
    /// localized, every device takes it. A localized pack's id ends with `-` and its language
    /// (`voice-fr-CA`); a device takes one pack of each group (<doc:Languages>).
    public var language: String?

    public init(
        id: String, revision: Int, url: String, size: Int64, sha256: String, installSize: Int64,
        plaintextSHA256: String, policy: Policy, tags: [String], keyID: String, contentType: String,
        installationEventTypes: [String]? = nil, userInfo: [String: JSONValue]? = nil, patches: [PackPatch]? = nil, language: String? = nil
    ) {
        self.patches = patches
        self.language = language
        self.installationEventTypes = installationEventTypes
        self.userInfo = userInfo
        self.id = id
        self.revision = revision
        self.url = url
        self.size = size
        self.sha256 = sha256
        self.installSize = installSize
        self.plaintextSHA256 = plaintextSHA256
        self.policy = policy
        self.tags = tags
        self.keyID = keyID
        self.contentType = contentType
    }
}

/// A manifest that decodes but cannot be used (``Manifest/problem``).
public struct ManifestError: Error, Hashable, Sendable, CustomStringConvertible {
    public let description: String
}
