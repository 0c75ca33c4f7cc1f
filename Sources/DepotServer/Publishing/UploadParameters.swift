import DepotCore
import Foundation

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
    /// Managed apps: the bytes a compressed archive unpacks to, as the publisher declares them.
    var installSize: Int64? = nil
    /// Managed apps: the installation events an essential or prefetch pack applies to; nil: both.
    var installationEventTypes: [String]? = nil
    /// Managed apps: the publisher's `userInfo` object, passed on in the download manifest.
    var userInfo: [String: JSONValue]? = nil
    /// The language the pack is localized for, normalised (`fr-CA`); nil: not localized.
    var language: String? = nil
    /// The channels the uploading token may act on (trusted publishing), nil for every one:
    /// the draft it stages may then be released only on those.
    var scope: [String]? = nil

    /// Whether any value only a managed app's pack can have is given.
    var hasManagedValues: Bool { installSize != nil || installationEventTypes != nil || userInfo != nil }

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
        for tag in tags { try DisplayText.requireNoBidiControls(tag, "a tag") }
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

    /// Adds the values only a managed app's packs have: `installSize` (decimal bytes), `events`
    /// (comma-separated installation event types), `userInfo` (a JSON object, at most 16 KiB).
    mutating func parseManaged(installSize: String?, events: String?, userInfo: String?) throws {
        if let installSize {
            guard installSize.count <= 19, installSize.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let size = Int64(installSize) else {
                throw DepotError.badRequest("installSize must be the unpacked size in bytes")
            }
            self.installSize = size
        }
        if let events {
            let list = events.split(separator: ",").map(\.trimmingWhitespace)
            guard !list.isEmpty, list.allSatisfy(DownloadManifest.DownloadPolicy.allEvents.contains) else {
                throw DepotError.badRequest("events must be firstInstallation, subsequentUpdate or both, comma-separated")
            }
            guard policy != .onDemand else { throw DepotError.badRequest("an onDemand pack has no installation events") }
            installationEventTypes = DownloadManifest.DownloadPolicy.allEvents.filter(list.contains)
        }
        if let userInfo {
            guard userInfo.utf8.count <= 16_384, let value = try? JSONDecoder().decode(JSONValue.self, from: Data(userInfo.utf8)), let object = value.object else {
                throw DepotError.badRequest("userInfo must be a JSON object of at most 16 KiB")
            }
            self.userInfo = object
        }
    }

    /// Adds the pack's language (`language=fr-CA`): Apple's form (an ISO 639 code, optionally a
    /// script and a region, nothing else), and a pack id that ends with `-` and that language,
    /// as Apple names localized packs (`voice-fr-CA`): the part before is the pack's group.
    mutating func parseLanguage(_ text: String?) throws {
        guard let text, !text.isEmpty else { return }
        guard text.count <= 32, let tag = LanguageTag(text) else {
            throw DepotError.badRequest("language must be an ISO 639 language code with, optionally, a script and a region (en, fr-CA, zh-Hant): Background Assets takes nothing else")
        }
        guard PackEntry.group(of: pack, language: tag) != nil else {
            throw DepotError.badRequest("a localized pack's id ends with -\(tag) (for instance voice-\(tag)): the part before names its group, of which a device takes one language; \(pack) does not")
        }
        language = tag.description
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
