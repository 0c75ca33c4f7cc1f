import DepotCore

/// One pack arriving in one piece (`PUT …/packs/{pack}`): encrypted chunk by chunk as it
/// arrives, into a temporary file in `uploads/`; at the end stored as a blob and staged (or
/// released) through the ``Publisher``. Nothing is kept if anything fails.
final class PackIngest {
    private let parameters: UploadParameters
    private let publisher: Publisher
    private let keys: KeyRing
    private let path: String
    private let file: FileDescriptor
    private let encryptor: PackEncryptor
    private var received: Int64 = 0
    private var ended = false

    init(_ parameters: UploadParameters, publisher: Publisher) throws {
        self.parameters = parameters
        self.publisher = publisher
        let keys = try publisher.apps.packKeys(parameters.app)
        self.keys = keys.ring
        (path, file) = try publisher.folder.scratchFile()
        let file = self.file
        do {
            var behind = WriteBehind()
            encryptor = try PackEncryptor(
                header: PackHeader(keyID: keys.current), masterKey: keys.ring[keys.current]!,
                sink: { bytes in
                    try file.write(bytes)
                    behind.wrote(bytes.count, to: file)
                }
            )
        } catch {
            FileSystem.remove(path)
            throw error
        }
    }

    /// Encrypts the next chunk; refuses a pack past the size limit.
    func append(_ chunk: UnsafeRawBufferPointer) throws {
        received += Int64(chunk.count)
        guard received <= publisher.maximumPackSize else { throw DepotError.tooLarge(publisher.maximumPackSize) }
        try encryptor.update(chunk)
    }

    /// The last byte arrived: seals, stores and stages (or releases) the pack.
    func finish() throws -> PublishResult {
        defer { abort() }
        let summary = try encryptor.finish()
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
