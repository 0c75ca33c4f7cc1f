import DepotCore
import Foundation
import Synchronization

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
    /// Set once the pack is stored: the JSON answer of the publish.
    var result: String?

    var header: PackHeader {
        PackHeader(keyID: keyID, segmentSize: segmentSize, salt: Hex.decode(salt) ?? [], noncePrefix: Hex.decode(noncePrefix) ?? [])
    }

    var request: PackUploadRequest {
        PackUploadRequest(
            app: app, pack: pack, policy: policy, tags: tags, contentType: contentType, expectedPlaintextSHA256: expectedPlaintextSHA256,
            declaredLength: length, release: release, base: base, force: force, channel: channel ?? ReleaseStore.production
        )
    }
}

/// The resumable uploads in `uploads/`: created, appended to by one request at a time,
/// terminated, expired.
final class ResumableUploads: Sendable {
    let folder: DataFolder
    /// Uploads a request is working on; another request for one of them gets 409.
    private let busy = Mutex<Set<String>>([])

    init(folder: DataFolder) { self.folder = folder }

    func directory(_ id: String) -> String { folder.uploads + "/" + id + ".tus" }
    func statePath(_ id: String) -> String { directory(id) + "/state.json" }
    func containerPath(_ id: String) -> String { directory(id) + "/container" }

    static func isValidID(_ id: String) -> Bool { id.utf8.count == 32 && Hex.decode(id) != nil && id == id.lowercased() }

    /// Creates an upload: its folder, the container's header, and the state.
    func create(_ state: inout ResumableState, masterKey: [UInt8]) throws {
        state.id = Hex.encode(SecureRandom.bytes(16))
        // Claimed while half made, so that the expiry sweep leaves it alone.
        _ = claim(state.id)
        defer { release(state.id) }
        let header = state.header
        try FileSystem.createDirectory(directory(state.id), mode: 0o700)
        do {
            try FileSystem.writeAtomically(header.encoded, to: containerPath(state.id), mode: 0o600)
            state.containerLength = Int64(header.encodedSize)
            try save(state)
        } catch {
            remove(state.id)
            throw error
        }
    }

    func save(_ state: ResumableState) throws {
        try StoredJSON.write(state, to: statePath(state.id), mode: 0o600)
    }

    /// The state of an upload of `app`, or nil if there is none (or it belongs to another app).
    func load(_ id: String, app: String) -> ResumableState? {
        guard Self.isValidID(id), let state = try? StoredJSON.read(ResumableState.self, from: statePath(id)), state.app == app else {
            return nil
        }
        return state
    }

    /// Runs `body` while no other request works on upload `id`; nil if one does.
    func withExclusiveAccess<T>(_ id: String, _ body: () throws -> T) throws -> T? {
        guard claim(id) else { return nil }
        defer { release(id) }
        return try body()
    }

    /// Marks an upload busy; false if it already was.
    func claim(_ id: String) -> Bool { busy.withLock { $0.insert(id).inserted } }
    func release(_ id: String) { _ = busy.withLock { $0.remove(id) } }

    func remove(_ id: String) {
        FileSystem.remove(containerPath(id))
        FileSystem.remove(statePath(id))
        for name in FileSystem.contents(of: directory(id)) { FileSystem.remove(directory(id) + "/" + name) }
        rmdir(directory(id))
    }

    /// Removes uploads past their expiry (and any that cannot be read); returns how many.
    @discardableResult
    func removeExpired(now: Date = Date()) -> Int {
        var removed = 0
        for name in FileSystem.contents(of: folder.uploads) where name.hasSuffix(".tus") {
            let id = String(name.dropLast(4))
            let state = try? StoredJSON.read(ResumableState.self, from: statePath(id))
            guard state.map({ $0.expires < now }) ?? true else { continue }
            guard claim(id) else { continue }
            remove(id)
            release(id)
            removed += 1
        }
        return removed
    }

    /// Crash recovery: cuts each container back to what its state covers.
    func repair() {
        for name in FileSystem.contents(of: folder.uploads) where name.hasSuffix(".tus") {
            let id = String(name.dropLast(4))
            _ = FileSystem.removeTemporaryFiles(in: directory(id))
            guard let state = try? StoredJSON.read(ResumableState.self, from: statePath(id)), state.result == nil else {
                // Unreadable, or finished (the blob is stored): only the record matters.
                if !FileSystem.exists(statePath(id)) { remove(id) } else { FileSystem.remove(containerPath(id)) }
                continue
            }
            if let file = try? FileDescriptor(path: containerPath(id), flags: O_WRONLY), let size = try? file.size() {
                if size > state.containerLength { try? file.truncate(to: state.containerLength) }
                if size < state.containerLength { remove(id) }
            } else {
                remove(id)
            }
        }
    }
}

/// Seals the pending plaintext of a resumable upload for its stay on disk: AES-256-GCM under
/// HKDF(pack key, the container's salt, "assetdepot upload tail v1"), a random nonce per write,
/// the upload id as additional data.
struct UploadTailSealer {
    private let cipher: AES256GCM
    private let id: [UInt8]

    init(masterKey: [UInt8], header: PackHeader, id: String) throws {
        cipher = try AES256GCM(key: HKDF.deriveKey(
            inputKeyMaterial: masterKey, salt: header.salt, info: Array("assetdepot upload tail v1".utf8), length: 32
        ))
        self.id = Array(id.utf8)
    }

    func seal(_ plaintext: [UInt8]) throws -> String {
        guard !plaintext.isEmpty else { return "" }
        let nonce = SecureRandom.bytes(AES256GCM.nonceSize)
        var sealed = [UInt8](repeating: 0, count: plaintext.count + AES256GCM.tagSize)
        try plaintext.withUnsafeBytes { plain in
            try sealed.withUnsafeMutableBytes { try cipher.seal(plain, nonce: nonce, aad: id, into: $0) }
        }
        return Data(nonce + sealed).base64EncodedString()
    }

    func open(_ text: String) throws -> [UInt8] {
        guard !text.isEmpty else { return [] }
        guard let data = Data(base64Encoded: text), data.count >= AES256GCM.nonceSize + AES256GCM.tagSize else {
            throw DepotError(500, "upload_damaged", "the stored state of this upload is damaged; start a new upload")
        }
        let bytes = Array(data)
        let nonce = Array(bytes[0..<AES256GCM.nonceSize])
        var plain = [UInt8](repeating: 0, count: bytes.count - AES256GCM.nonceSize - AES256GCM.tagSize)
        try bytes[AES256GCM.nonceSize...].withUnsafeBytes { sealed in
            try plain.withUnsafeMutableBytes { try cipher.open(sealed, nonce: nonce, aad: id, into: $0) }
        }
        return plain
    }
}
