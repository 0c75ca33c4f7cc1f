import DepotCore

/// What a publisher asks for along with a pack's bytes, from a `PUT`'s query and headers or
/// a tus upload's metadata: parsed and checked here, by the same rules for both.
struct UploadParameters: Sendable {
    var app: String
    var pack: String
    var policy: PackEntry.Policy
    var tags: [String]
    var contentType: String
    /// The plaintext SHA-256 the publisher vouches for; the upload is refused if it differs.
    var expectedPlaintextSHA256: String?
    /// Publish the staged changes at once (`release=true`).
    var release: Bool
    /// The live version the publisher saw (`base=N`): 409 if another publish came first.
    var base: Int?
    /// Publish even past the recorded allowances (`force=true`).
    var force: Bool
    /// The channel a release goes to.
    var channel: String

    /// Checks each value. `checksumName` says where the checksum came from, for the error message.
    static func parse(
        app: String, pack: String?, policy: String?, tags: [String], sha256: String?, checksumName: String, contentType: String?,
        release: Bool, base: String?, force: Bool, channel: String?
    ) throws -> UploadParameters {
        guard let pack else { throw DepotError.badRequest("Upload-Metadata must name the pack: pack <base64 id>") }
        guard Identifier.isValidPack(pack) else { throw DepotError.invalidID("pack id") }
        guard let policy = PackEntry.Policy(rawValue: policy ?? "prefetch") else {
            throw DepotError.badRequest("policy must be essential, prefetch or onDemand")
        }
        guard tags.allSatisfy({ !$0.isEmpty && $0.count <= 64 }), tags.count <= 32 else {
            throw DepotError.badRequest("tags are 1–64 characters, at most 32")
        }
        var expected: String?
        if let sha256 {
            guard let name = Hex.sha256(from: sha256) else { throw DepotError.badRequest("\(checksumName) must be 64 hex digits") }
            expected = name
        }
        return UploadParameters(
            app: app, pack: pack, policy: policy, tags: Array(Set(tags)).sorted(), contentType: contentType ?? "application/octet-stream",
            expectedPlaintextSHA256: expected, release: release, base: try Self.base(base), force: force, channel: try Self.channel(channel)
        )
    }

    /// A channel name, production when none is given.
    static func channel(_ text: String?) throws -> String {
        guard let text else { return ReleaseStore.production }
        guard Identifier.isValidChannel(text) else { throw DepotError.invalidID("channel") }
        return text
    }

    /// The live release number a publisher saw, when given.
    static func base(_ text: String?) throws -> Int? {
        guard let text else { return nil }
        guard text.count <= 9, let base = Int(text), base >= 0 else { throw DepotError.badRequest("base must be the live release number") }
        return base
    }
}
