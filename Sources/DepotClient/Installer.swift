import DepotCore
import Foundation

/// Checks a downloaded container against its manifest entry, decrypts it (and unpacks it, for
/// a zip) beside the installed copy, then switches the two in one atomic step: the previous
/// revision stays whole until the new one is complete, and a failure at any step — a tampered
/// pack, a full disk — leaves it untouched.
public struct Installer: Sendable {
    /// The key ring injected into the app.
    public let keyRing: KeyRing

    public init(keyRing: KeyRing) { self.keyRing = keyRing }

    /// Verifies `file` and installs its plaintext at `destination`: a file, or a folder of the
    /// archive's entries when the pack is `application/zip`. Returns whether it was unpacked.
    ///
    /// One pass reads the container: it is decrypted segment by segment (each authenticated)
    /// while its SHA-256 is computed, and nothing replaces the installed copy unless that
    /// SHA-256 is the manifest's and the size was exact. (The plaintext is not hashed again: a
    /// container with the signed SHA-256 whose segments all authenticate has one plaintext, the
    /// one the origin hashed when it encrypted it.)
    @discardableResult
    public func install(_ entry: PackEntry, from file: String, to destination: String) throws -> Bool {
        guard let size = FileSystem.fileSize(file), size == entry.size else {
            throw ClientError.sizeMismatch(entry.id, expected: entry.size, got: FileSystem.fileSize(file) ?? 0)
        }
        let source: FileDescriptor
        do { source = try FileDescriptor.openForReading(file) } catch { throw ClientError.install(entry.id, error) }
        // A zip's plaintext waits beside the container, named so that a killed run's is found
        // and removed (``removeLeftovers(in:maximumAge:now:)``).
        let scratch = FileSystem.directory(of: file) + "/.tmp-" + FileSystem.lastComponent(of: file) + "-p\(getpid())-" + Hex.encode(SecureRandom.bytes(6)) + ".plain"
        return try install(entry, from: source, scratch: scratch, to: destination)
    }

    /// Installs from any source of the container's bytes (a download still being written, read
    /// as it grows); `scratch` is where a zip's plaintext waits to be unpacked.
    func install(_ entry: PackEntry, from source: some RandomAccessSource, scratch: String, to destination: String) throws -> Bool {
        let folder = FileSystem.directory(of: destination)
        // The process id in the name lets a later run tell a killed install's leftovers from a
        // tree another process is still writing (``removeLeftovers(in:)``).
        let staged = folder + "/.tmp-" + FileSystem.lastComponent(of: destination) + "-p\(getpid())-" + Hex.encode(SecureRandom.bytes(6))
        let unpack = ZipPack.isZip(contentType: entry.contentType)
        let plaintext = unpack ? scratch : staged
        defer {
            if unpack { FileSystem.remove(plaintext) }
            Self.removeTree(staged)
        }
        do {
            // The container's SHA-256 is the signed manifest's, and each segment authenticated:
            // those bytes decrypt to one plaintext only, the one the origin hashed when it
            // encrypted it, so the plaintext is not hashed a second time.
            let summary = try PackDecryptor.decrypt(source, to: plaintext, keyRing: keyRing, expectedSize: entry.size, hashingPlaintext: false)
            guard summary.sha256 == entry.sha256 else {
                throw ClientError.integrity(entry.id, "SHA-256 is \(summary.sha256), the manifest says \(entry.sha256)")
            }
            if unpack {
                try ZipPack.extract(plaintext, into: staged)
                try FileSystem.syncDirectory(staged)
            }
            try Self.switchInto(destination, from: staged)
        } catch let error as PackError where error.kind == .unknownKeyID {
            throw ClientError(.integrity, "pack \(entry.id) cannot be decrypted: the app's key ring has no key \"\(entry.keyID)\" (the origin's pack key was rotated after this configuration was exported): export the configuration again with `depot keys export` and ship it in the app")
        } catch let error as PackError {
            throw ClientError.integrity(entry.id, "its content does not match the manifest's SHA-256: \(error.description)")
        } catch let error as ZipPackError {
            if error == .noSpace { throw ClientError.noSpace(folder) }
            throw ClientError.integrity(entry.id, error.description)
        } catch {
            throw Self.failure(error, pack: entry.id, folder: folder)
        }
        return unpack
    }

    /// Installs `entry` by applying a patch to the installed copy at `destination`: the patch
    /// container (`file`, exactly `patch.size` bytes) is checked and decrypted, the delta applied
    /// to the installed file into a new copy beside it, and the new copy switched in only if its
    /// plaintext is the manifest's (size and SHA-256). The installed copy is read, never
    /// changed; any failure leaves it as it was, and the caller falls back to the whole pack.
    public func installPatch(_ entry: PackEntry, patch: PackPatch, from file: String, to destination: String) throws {
        guard FileSystem.fileSize(file) == patch.size else {
            throw ClientError.sizeMismatch(entry.id, expected: patch.size, got: FileSystem.fileSize(file) ?? 0)
        }
        let folder = FileSystem.directory(of: destination)
        let owner = "-p\(getpid())-" + Hex.encode(SecureRandom.bytes(6))
        let delta = FileSystem.directory(of: file) + "/.tmp-" + FileSystem.lastComponent(of: file) + owner + ".delta"
        let staged = folder + "/.tmp-" + FileSystem.lastComponent(of: destination) + owner
        defer {
            FileSystem.remove(delta)
            FileSystem.remove(staged)
        }
        do {
            let summary = try PackDecryptor.decrypt(file: file, to: delta, keyRing: keyRing, expectedSize: patch.size, hashingPlaintext: false)
            guard summary.sha256 == patch.sha256 else {
                throw ClientError.integrity(entry.id, "the patch's SHA-256 is \(summary.sha256), the manifest says \(patch.sha256)")
            }
            if ZipPack.isZip(contentType: entry.contentType) {
                // An unpacked zip: the new tree built beside the installed one, every file checked.
                defer { Self.removeTree(staged) }
                try TreePatch.apply(patch: delta, base: destination, into: staged)
                try Self.switchInto(destination, from: staged)
                return
            }
            let output = try FileDescriptor(path: staged, flags: O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
            var behind = WriteBehind()
            let header = try DeltaDecoder.apply(patch: FileDescriptor.openForReading(delta), base: FileDescriptor.openForReading(destination)) { bytes in
                try output.write(bytes)
                behind.wrote(bytes.count, to: output)
            }
            guard Hex.encode(header.targetSHA256) == entry.plaintextSHA256, header.targetSize == entry.installSize,
                  Hex.encode(header.baseSHA256) == patch.fromPlaintextSHA256 else {
                throw ClientError.integrity(entry.id, "the patch does not lead from revision \(patch.fromRevision) to the manifest's revision \(entry.revision)")
            }
            try output.sync()
            try output.close()
            try Self.switchInto(destination, from: staged)
        } catch let error as DeltaError {
            throw ClientError.integrity(entry.id, "the patch cannot be applied to the installed copy: \(error.description)")
        } catch let error as PackError {
            throw ClientError.integrity(entry.id, "the patch's container does not verify: \(error.description)")
        } catch {
            throw Self.failure(error, pack: entry.id, folder: folder)
        }
    }

    /// Puts `staged` at `destination` in one step: a rename, or an atomic exchange
    /// (``System/exchange(_:_:)``) when something is there, after which the old copy is removed.
    static func switchInto(_ destination: String, from staged: String) throws {
        if FileSystem.exists(destination) || (try? FileManager.default.destinationOfSymbolicLink(atPath: destination)) != nil {
            if try !System.exchange(staged, destination) {
                // No atomic exchange here (Linux before 3.15): move the old copy aside first. A
                // crash in between leaves no installed copy, which the next sync downloads again.
                let aside = staged + ".old"
                try FileSystem.durableRename(destination, to: aside)
                try FileSystem.durableRename(staged, to: destination)
                try FileSystem.durableRename(aside, to: staged)
            }
            try FileSystem.syncDirectory(FileSystem.directory(of: destination))
            removeTree(staged)
        } else {
            try FileSystem.durableRename(staged, to: destination)
        }
    }

    /// Removes what killed installs left in `folder` (staged `.tmp-*` trees and files, named
    /// with their process's id): those of processes that no longer run, and any older than
    /// `maximumAge` (on a device another process's id cannot always be checked). Returns how many.
    @discardableResult
    public static func removeLeftovers(in folder: String, maximumAge: TimeInterval = 3600, now: Date = Date()) -> Int {
        var removed = 0
        for name in FileSystem.contents(of: folder) where name.hasPrefix(".tmp-") {
            let path = folder + "/" + name
            let owner = name.split(separator: "-").first { $0.hasPrefix("p") && Int32($0.dropFirst()) != nil }.flatMap { Int32($0.dropFirst()) }
            // A name without an owner (a copy another process may be writing now) goes by age only.
            let gone = owner.map { $0 != getpid() && kill($0, 0) != 0 && System.errno == ESRCH } ?? false
            let modified = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date
            let old = modified.map { now.timeIntervalSince($0) > maximumAge } ?? false
            if gone || old {
                removeTree(path)
                removed += 1
            }
        }
        return removed
    }

    /// Removes an installed copy: a file or a folder tree.
    /// The common end of an install's failures: a full disk, an error already in the client's
    /// words, or anything else as an install failure of `pack`.
    static func failure(_ error: any Error, pack: String, folder: String) -> ClientError {
        if let error = error as? SystemError, error.isNoSpace { return .noSpace(folder) }
        return error as? ClientError ?? .install(pack, error)
    }

    public static func removeTree(_ path: String) {
        if FileSystem.isDirectory(path) {
            try? FileManager.default.removeItem(atPath: path)
        } else {
            FileSystem.remove(path)
        }
    }
}
