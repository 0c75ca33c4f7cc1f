import DepotCore

/// One pack arriving in one piece (`PUT …/packs/{pack}`): encrypted chunk by chunk as it
/// arrives (a managed app's Apple Archive: checked and copied), into a temporary file in
/// `uploads/`; at the end stored as a blob and staged (or released) through the ``Publisher``.
/// Nothing is kept if anything fails.
final class PackIngest {
    private let parameters: UploadParameters
    private let publisher: Publisher
    private let keys: KeyRing
    private let path: String
    private let file: FileDescriptor
    private let transform: any PackTransform
    private var received: Int64 = 0
    private var ended = false

    init(_ parameters: UploadParameters, publisher: Publisher) throws {
        self.parameters = parameters
        self.publisher = publisher
        let managed = try publisher.checkMode(parameters)
        let keys: (ring: KeyRing, current: String) = managed ? (try KeyRing([String: [UInt8]]()), "") : try publisher.apps.packKeys(parameters.app)
        self.keys = keys.ring
        (path, file) = try publisher.folder.scratchFile()
        let file = self.file
        do {
            var behind = WriteBehind()
            let sink: (UnsafeRawBufferPointer) throws -> Void = { bytes in
                try file.write(bytes)
                behind.wrote(bytes.count, to: file)
            }
            transform = try managed
                ? ArchiveWriter(sink: sink)
                : PackEncryptor(header: PackHeader(keyID: keys.current), masterKey: keys.ring[keys.current]!, sink: sink)
        } catch {
            FileSystem.remove(path)
            throw error
        }
    }

    /// Encrypts the next chunk; refuses a pack past the size limit.
    func append(_ chunk: UnsafeRawBufferPointer) throws {
        received += Int64(chunk.count)
        guard received <= publisher.maximumPackSize else { throw DepotError.tooLarge(publisher.maximumPackSize) }
        try transform.update(chunk)
    }

    /// The last byte arrived: seals, stores and stages (or releases) the pack.
    func finish() throws -> PublishResult {
        defer { abort() }
        let summary = try transform.finish()
        try file.close()
        return try publisher.store(container: path, summary: summary, keys: keys, for: parameters)
    }

    /// Drops what was received (idempotent; after a successful finish the file is a blob).
    func abort() {
        guard !ended else { return }
        ended = true
        try? file.close()
        FileSystem.remove(path)
    }
}
