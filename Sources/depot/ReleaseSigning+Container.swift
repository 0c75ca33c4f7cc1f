import DepotClient
import DepotCore
import Foundation

/// Checks a changed pack of the release against the signer's own file of it: the file's SHA-256
/// and size are the ones the release states, and the container the release names — what devices
/// download and decrypt, without hashing the plaintext again — downloaded and decrypted with the
/// configuration's pack keys, holds exactly the file. Streamed: the container goes to a temporary
/// file (removed afterwards) and is decrypted a segment at a time, its plaintext hashed, not kept.
struct ContainerCheck: Sendable {
    /// The pack keys of the signer's configuration.
    let keyRing: KeyRing
    /// Download credentials, and how to reach the pack URLs.
    let headers: [String: String]
    let options: TransportOptions
    /// The release being signed, for messages.
    let release: Int

    /// What the check found, for the pack's line; or why the pack is refused.
    func vouch(_ entry: PackEntry, file path: String) async -> Result<String, CLIError> {
        guard !FileSystem.isDirectory(path), let size = FileSystem.fileSize(path) else { return .failure(CLIError("\(path) is not a file")) }
        let sha256: String
        do { sha256 = try SHA256Hasher.hexDigest(ofFile: path) } catch { return .failure(CLIError("reading \(path) failed: \(error)")) }
        // A managed app's Apple Archive is served as published: the container is the file itself.
        if entry.keyID.isEmpty {
            // Its plaintext fields are its container's: a statement binding others would let a
            // patch lead to other bytes than the ones checked here.
            guard entry.plaintextSHA256 == entry.sha256, entry.installSize == entry.size else {
                return .failure(CLIError("release \(release) states an Apple Archive whose plaintext (sha256 \(entry.plaintextSHA256), \(entry.installSize) bytes) is not its container (sha256 \(entry.sha256), \(entry.size) bytes): an archive is served as published"))
            }
            guard sha256 == entry.sha256, size == entry.size else {
                return .failure(CLIError("\(path) is sha256 \(sha256), \(size) bytes; release \(release) states sha256 \(entry.sha256), \(entry.size) bytes"))
            }
            return .success("sha256 \(sha256), \(size) bytes; an Apple Archive, served as published")
        }
        // A zip's installSize is what it unpacks to, not the file's size: the file's size is
        // compared with the container's plaintext below.
        let zip = ZipPack.isZip(contentType: entry.contentType)
        guard sha256 == entry.plaintextSHA256, zip || size == entry.installSize else {
            let stated = "plaintext sha256 \(entry.plaintextSHA256)" + (zip ? "" : ", \(entry.installSize) bytes")
            return .failure(CLIError("\(path) is sha256 \(sha256), \(size) bytes; release \(release) states \(stated): its plaintext is not your file"))
        }
        let summary: PackSummary
        switch await decrypted(entry) {
        case .failure(let why): return .failure(why)
        case .success(let found): summary = found
        }
        guard summary.plaintextSHA256 == sha256, summary.plaintextSize == size else {
            return .failure(CLIError("""
                its container (\(entry.url)) decrypts to plaintext sha256 \(summary.plaintextSHA256), \(summary.plaintextSize) bytes, \
                not to \(path) (sha256 \(sha256), \(size) bytes), whatever release \(release) states: devices would install the container's bytes
                """))
        }
        return .success("plaintext sha256 \(sha256), \(size) bytes; container checked")
    }

    /// The container of `entry`, downloaded and decrypted: its size and SHA-256 checked against
    /// the entry's, every segment authenticated, its plaintext's SHA-256 and size measured.
    func decrypted(_ entry: PackEntry) async -> Result<PackSummary, CLIError> {
        guard let url = URL(string: entry.url), url.scheme == "http" || url.scheme == "https" else {
            return .failure(CLIError("its URL \(entry.url) is not an http(s) URL"))
        }
        let temporary = FileSystem.temporaryPath(besides: FileManager.default.temporaryDirectory.path + "/depot-sign-" + entry.id)
        defer {
            FileSystem.remove(temporary)
            FileSystem.remove(temporary + ".etag")
        }
        let item = DownloadItem(id: entry.id, url: url, size: entry.size, sha256: entry.sha256, path: temporary)
        if case .failure(let error)? = await Downloader(concurrency: 1, headers: headers, options: options).download([item])[entry.id] {
            return .failure(CLIError("downloading its container from \(entry.url) failed: \(error)"))
        }
        let summary: PackSummary
        do {
            summary = try PackDecryptor.process(try FileDescriptor.openForReading(temporary), keyRing: keyRing, expectedSize: entry.size) { _ in }
        } catch let error as PackError where error.kind == .unknownKeyID {
            return .failure(CLIError("its container (\(entry.url)) is encrypted under a pack key your configuration does not hold (\(error)): export it again (depot keys export)"))
        } catch {
            return .failure(CLIError("its container (\(entry.url)) does not decrypt with your configuration's pack keys: \(error)"))
        }
        guard summary.sha256 == entry.sha256 else {
            return .failure(CLIError("its container (\(entry.url)) is sha256 \(summary.sha256); release \(release) states \(entry.sha256)"))
        }
        return .success(summary)
    }
}
