import Foundation

/// How one install step went on one device: what an app that opts in sends to
/// `POST /v1/apps/{app}/reports` (see <doc:Rollouts>). It names no device, no install id and no
/// person: the channel and release planned with, per pack its revision, what happened and the
/// bytes downloaded, and the ids of the keys the build holds (never a key: see <doc:PackKeys>).
/// The origin adds it to daily counts and keeps nothing else.
public struct DeviceReport: Codable, Hashable, Sendable {
    /// What happened to one pack.
    public enum Outcome: String, Codable, Hashable, Sendable, CaseIterable {
        /// Downloaded whole and installed.
        case installed
        /// Installed by applying a patch to the installed revision.
        case patched
        /// Could not be installed (``PackResult/error`` says which kind of failure); the
        /// previous revision stays.
        case failed
        /// Left for a later event: over the download allowance.
        case deferred
    }

    /// One pack's result.
    public struct PackResult: Codable, Hashable, Sendable {
        public var id: String
        /// The revision planned (the candidate's when the device took a rollout's).
        public var revision: Int
        public var outcome: Outcome
        /// For ``Outcome/failed``: the client's error kind (``errorKinds``).
        public var error: String?
        /// Container bytes transferred for this pack.
        public var bytes: Int64

        public init(id: String, revision: Int, outcome: Outcome, error: String? = nil, bytes: Int64 = 0) {
            (self.id, self.revision, self.outcome, self.error, self.bytes) = (id, revision, outcome, error, bytes)
        }
    }

    /// The channel followed.
    public var channel: String
    /// The manifest version (release) planned with.
    public var release: Int
    /// The packs the step did something with (at most ``maximumPacks``).
    public var packs: [PackResult]
    /// The ids of the pack keys the build holds, sorted (at most ``maximumPackKeys``): the
    /// origin counts reports by key ring, so that the operator sees how many builds lack a key
    /// before retiring the one they use. Nil in reports of builds from before it was sent.
    public var packKeys: [String]?
    /// The ids (`ed25519:…`, ``ManifestSigningKey/keyID(for:)``) of the manifest public keys the
    /// build pins, sorted (at most ``maximumManifestKeys``); nil for a build that pins none.
    public var manifestKeys: [String]?

    public init(channel: String, release: Int, packs: [PackResult], packKeys: [String]? = nil, manifestKeys: [String]? = nil) {
        (self.channel, self.release, self.packs) = (channel, release, packs.sorted { $0.id < $1.id })
        (self.packKeys, self.manifestKeys) = (packKeys?.sorted(), manifestKeys?.sorted())
    }

    /// The most packs one report lists.
    public static let maximumPacks = 256
    /// The most pack key ids one report names.
    public static let maximumPackKeys = 32
    /// The most manifest key ids one report names.
    public static let maximumManifestKeys = 8
    /// The largest report body the origin reads, in bytes.
    public static let maximumBytes = 32 * 1024
    /// The failure kinds a report may name (the client's `ClientError.Kind`s); anything else
    /// counts as `other`.
    public static let errorKinds: Set<String> = [
        "http", "transport", "manifest", "rollback", "expired", "wrongApp", "integrity", "install", "state", "cancelled", "tooLarge", "noSpace",
        "wrongChannel", "tls", "domain", "other",
    ]

    /// `name` if it is one of ``errorKinds``, else `other`: what a client reports for an error
    /// kind an older origin may not know.
    public static func errorKind(_ name: String) -> String { errorKinds.contains(name) ? name : "other" }

    /// Failures of the device rather than of what was published (cancelled, a full disk, an
    /// unusable state folder, a delivered file the system purged before it was installed): not
    /// reported, so that a rollout's figures show the content's.
    public static func isDeviceCondition(_ name: String) -> Bool { ["cancelled", "noSpace", "state", "purged"].contains(name) }

    /// What makes the report unusable, or nil (the origin answers 400 with it).
    public var problem: String? {
        guard Identifier.isValidChannel(channel) else { return "the channel is not valid" }
        guard release > 0 else { return "the release is not a positive number" }
        guard !packs.isEmpty else { return "the report lists no pack" }
        guard packs.count <= Self.maximumPacks else { return "the report lists more than \(Self.maximumPacks) packs" }
        var seen = Set<String>()
        for pack in packs {
            guard Identifier.isValidPack(pack.id), seen.insert(pack.id).inserted else { return "a pack id is not valid or is listed twice" }
            guard pack.revision >= 0, (0...(1 << 40)).contains(pack.bytes) else { return "pack \(pack.id) has a negative revision or byte count" }
            if let error = pack.error {
                guard pack.outcome == .failed, Self.errorKinds.contains(error) else { return "pack \(pack.id) names an unknown error kind" }
            }
        }
        if let packKeys {
            guard packKeys.count <= Self.maximumPackKeys else { return "the report names more than \(Self.maximumPackKeys) pack keys" }
            guard packKeys.allSatisfy(KeyRing.isValidKeyID) else { return "a pack key id is not valid (1–64 of A-Z a-z 0-9 . -)" }
            guard Set(packKeys).count == packKeys.count else { return "a pack key id is listed twice" }
        }
        if let manifestKeys {
            guard manifestKeys.count <= Self.maximumManifestKeys else { return "the report names more than \(Self.maximumManifestKeys) manifest keys" }
            guard manifestKeys.allSatisfy(Self.isManifestKeyID) else { return "a manifest key id is not one (ed25519: and 16 lowercase hex digits)" }
            guard Set(manifestKeys).count == manifestKeys.count else { return "a manifest key id is listed twice" }
        }
        return nil
    }

    /// Whether `id` has the form of a manifest key's id: `ed25519:` and 16 lowercase hex digits.
    static func isManifestKeyID(_ id: String) -> Bool {
        let utf8 = Array(id.utf8)
        return utf8.count == 24 && id.hasPrefix("ed25519:") && utf8[8...].allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    /// Canonical JSON.
    public func encoded() -> [UInt8] { Array(try! Manifest.encoder.encode(self)) }

    /// Parses a report (at most ``maximumBytes``) and checks it (``problem``).
    public static func decode(_ bytes: [UInt8]) throws -> DeviceReport {
        guard bytes.count <= maximumBytes else { throw ManifestError(description: "a report is at most \(maximumBytes) bytes") }
        let report: DeviceReport
        do {
            report = try Manifest.decoder.decode(DeviceReport.self, from: Data(bytes))
        } catch {
            throw ManifestError(description: "the report is not JSON of the report's shape")
        }
        if let problem = report.problem { throw ManifestError(description: problem) }
        return report
    }
}
