import DepotCore
import Foundation

/// Checks a downloaded container against its manifest entry, decrypts it and moves the
/// plaintext into place atomically; the previous revision stays until the new one is complete.
public struct Installer: Sendable {
    /// The key ring injected into the app.
    public let keyRing: KeyRing

    public init(keyRing: KeyRing) { self.keyRing = keyRing }

    /// Verifies size and SHA-256 of `file`, then decrypts it to `destination`.
    public func install(_ entry: PackEntry, from file: String, to destination: String) throws {
        guard let size = FileSystem.fileSize(file), size == entry.size else {
            throw ClientError.integrity(entry.id, "expected \(entry.size) bytes, received \(FileSystem.fileSize(file) ?? 0)")
        }
        let digest: String
        do {
            digest = try SHA256Hasher.hexDigest(ofFile: file)
        } catch {
            throw ClientError.install(entry.id, error)
        }
        guard digest == entry.sha256 else { throw ClientError.integrity(entry.id, "SHA-256 is \(digest), the manifest says \(entry.sha256)") }
        let summary: PackSummary
        do {
            summary = try PackDecryptor.decrypt(file: file, to: destination, keyRing: keyRing, expectedSize: entry.size)
        } catch let error as PackError {
            throw ClientError.integrity(entry.id, error.description)
        } catch {
            throw ClientError.install(entry.id, error)
        }
        guard summary.plaintextSHA256 == entry.plaintextSHA256 else {
            throw ClientError.integrity(entry.id, "decrypted content does not match the manifest's plaintext SHA-256")
        }
    }
}
