import DepotCore
import Foundation

/// A resumable (tus 1.0) upload as stored in `uploads/<id>.tus/state.json`, beside the
/// container being written (`uploads/<id>.tus/container`).
///
/// The container holds only sealed segments; the plaintext of the trailing partial segment is
/// kept in `tail`, itself sealed with AES-256-GCM under a key derived from the app's pack key,
/// so no plaintext ever reaches the disk. The state is replaced atomically after each request,
/// and `containerLength` says how much of the container it covers: bytes past it (a request cut
/// by a crash) are cut off when the upload is next touched.
struct ResumableState: Codable, Sendable {
    var id: String
    var app: String
    var pack: String
    var policy: PackEntry.Policy
    var tags: [String]
    var contentType: String
    var expectedPlaintextSHA256: String?
    var release: Bool
    var base: Int?
    var force: Bool
    /// The channel a release goes to; nil for production.
    var channel: String?
    /// The raw `Upload-Metadata`, echoed by HEAD.
    var metadata: String?
    /// Plaintext bytes announced (`Upload-Length`) and received so far (`Upload-Offset`).
    var length: Int64
    var offset: Int64
    /// The container's header fields.
    var keyID: String
    var salt: String
    var noncePrefix: String
    var segmentSize: UInt32
    var sealedSegments: UInt32
    var containerLength: Int64
    /// Nonce ‖ ciphertext ‖ tag of the pending plaintext, base64; empty when none is pending.
    var tail: String
    var created: Date
    var expires: Date
    /// Set once the pack is stored: what the publish did, as JSON (a string, the format
    /// state files have always had).
    var result: String?
    /// A managed app's Apple Archive, stored as uploaded: the container is the archive itself
    /// (no header, no segments, no tail). Nil in state files made before managed apps: false.
    var archive: Bool? = nil
    /// Managed apps: the declared unpacked size, installation events and `userInfo`.
    var installSize: Int64? = nil
    var installationEventTypes: [String]? = nil
    var userInfo: [String: JSONValue]? = nil
    /// The pack's language (normalised), if localized.
    var language: String? = nil
    /// Set, durably, just before the finished container moves into the blob store, and cleared
    /// with the result: start-up finds a move half done by it (the container gone, the blob there)
    /// and stages what it names instead of deleting acknowledged bytes.
    var finishing: Finishing? = nil
    /// The channels the creating token may act on (``UploadParameters/scope``).
    var scope: [String]? = nil

    /// The verified pack whose container is being stored.
    struct Finishing: Codable, Sendable {
        var summary: PackSummary
        var installSize: Int64
    }

    var isArchive: Bool { archive ?? false }

    /// What the publish did, once the pack is stored.
    var publishResult: PublishResult? {
        get { result.flatMap { try? StoredJSON.decoder.decode(PublishResult.self, from: Data($0.utf8)) } }
        set { result = newValue.flatMap { try? String(decoding: StoredJSON.encoder.encode($0), as: UTF8.self) } }
    }

    var header: PackHeader {
        PackHeader(keyID: keyID, segmentSize: segmentSize, salt: Hex.decode(salt) ?? [], noncePrefix: Hex.decode(noncePrefix) ?? [])
    }

    var parameters: UploadParameters {
        UploadParameters(
            app: app, pack: pack, policy: policy, tags: tags, contentType: contentType, expectedPlaintextSHA256: expectedPlaintextSHA256,
            release: release, base: base, force: force, channel: channel ?? ReleaseStore.production, installSize: installSize,
            installationEventTypes: installationEventTypes, userInfo: userInfo, language: language, scope: scope
        )
    }
}

extension ResumableState {
    /// A new upload of `length` plaintext bytes into a container with `header` (or, for an
    /// `archive`, into a file of its own bytes; the header's fields are then unused).
    init(
        id: String, parameters p: UploadParameters, metadata: String?, length: Int64, header: PackHeader, archive: Bool = false, expires: Date,
        now: Date = WallClock.now()
    ) {
        self.init(
            id: id, app: p.app, pack: p.pack, policy: p.policy, tags: p.tags, contentType: p.contentType,
            expectedPlaintextSHA256: p.expectedPlaintextSHA256, release: p.release, base: p.base, force: p.force,
            channel: p.channel == ReleaseStore.production ? nil : p.channel, metadata: metadata, length: length, offset: 0,
            keyID: header.keyID, salt: Hex.encode(header.salt), noncePrefix: Hex.encode(header.noncePrefix), segmentSize: header.segmentSize,
            sealedSegments: 0, containerLength: archive ? 0 : Int64(header.encodedSize), tail: "", created: now, expires: expires, result: nil,
            archive: archive ? true : nil, installSize: p.installSize, installationEventTypes: p.installationEventTypes, userInfo: p.userInfo,
            language: p.language
        )
        scope = p.scope
    }
}
