import DepotCore
import Foundation

/// A copy verified and staged beside its destination under a `.tmp-` name this process owns,
/// waiting to be switched in (with its record: ``StateStore/switchIn(_:as:app:now:)``).
struct StagedCopy: Sendable {
    /// Where it waits.
    let path: String
    /// What it is, measured: what its record says.
    let copy: InstalledCopy
}

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
        let staged = try stage(entry, from: file, besides: destination)
        return try Self.switchInto(destination, staged: staged, pack: entry.id).unpacked
    }

    /// Checks and decrypts (and unpacks) `file` into a copy staged beside `destination`, for a
    /// caller that records what it switches in (``StateStore/switchIn(_:as:app:now:)``).
    func stage(_ entry: PackEntry, from file: String, besides destination: String) throws -> StagedCopy {
        let source: FileDescriptor
        do { source = try FileDescriptor.openForReading(file) } catch {
            throw Self.gone(error) ? ClientError.purged(entry.id, file) : ClientError.install(entry.id, error)
        }
        // Sized through the open descriptor: once open, a purge cannot take the bytes away.
        guard let size = try? source.size(), size == entry.size else {
            throw ClientError.sizeMismatch(entry.id, expected: entry.size, got: (try? source.size()) ?? 0)
        }
        // A zip's plaintext waits beside the container, named with this process as its owner so
        // that a killed run's is found and removed (``removeLeftovers(in:maximumAge:now:)``).
        let scratch = FileSystem.temporaryPath(besides: file, suffix: ".plain")
        return try stage(entry, from: source, scratch: scratch, besides: destination)
    }

    /// Stages from any source of the container's bytes (a download still being written, read
    /// as it grows); `scratch` is where a zip's plaintext waits to be unpacked. Returns the staged
    /// copy, measured (the state records it: ``InstalledCopy``); nothing is left on a failure.
    func stage(_ entry: PackEntry, from source: some RandomAccessSource, scratch: String, besides destination: String) throws -> StagedCopy {
        let folder = FileSystem.directory(of: destination)
        // The process id in the name lets a later run tell a killed install's leftovers from a
        // tree another process is still writing (``removeLeftovers(in:maximumAge:now:)``).
        let staged = FileSystem.temporaryPath(besides: destination)
        let unpack = ZipPack.isZip(contentType: entry.contentType)
        let plaintext = unpack ? scratch : staged
        var whole = false
        defer {
            if unpack { FileSystem.remove(plaintext) }
            if !whole { Self.removeTree(staged) }
        }
        do {
            // The container's SHA-256 is the signed manifest's, and each segment authenticated:
            // those bytes decrypt to one plaintext only, the one the origin hashed when it
            // encrypted it, so the plaintext is not hashed a second time.
            // Every file of the install is synced in order and the drive flushed once, when the
            // staged copy is whole (``SyncLevel``): one `F_FULLFSYNC` per install, not per file.
            let summary = try PackDecryptor.decrypt(source, to: plaintext, keyRing: keyRing, expectedSize: entry.size, hashingPlaintext: false, sync: .ordered)
            guard summary.sha256 == entry.sha256 else {
                throw ClientError.integrity(entry.id, "SHA-256 is \(summary.sha256), the manifest says \(entry.sha256)")
            }
            guard unpack else {
                guard let copy = InstalledCopy.measure(staged), !copy.unpacked else {
                    throw ClientError.install(entry.id, SystemError(call: "stat", errno: ENOENT, path: staged))
                }
                try Self.check(copy, against: entry)
                try FileDescriptor.openForReading(staged).sync(.full)
                whole = true
                return StagedCopy(path: staged, copy: copy)
            }
            let tree = try StagedTree(staged)
            // What the manifest says it unpacks to is all it may write: a hostile archive whose
            // entries inflate past their declared sizes stops there, not when the disk is full.
            let declared = entry.installSize
            // (Its files and folders synced in order, the drive flushed once at its root.)
            try ZipPack.extract(plaintext, into: staged) { written, _ in
                written > declared ? "it unpacks to more than the manifest's installSize of \(declared) bytes" : nil
            }
            let copy = try tree.measured(pack: entry.id)
            try Self.check(copy, against: entry)
            whole = true
            return StagedCopy(path: staged, copy: copy)
        } catch let error as PackError where error.kind == .unknownKeyID {
            let held = keyRing.keys.keys.sorted()
            throw ClientError(.integrity, """
                pack \(entry.id) cannot be decrypted: it is encrypted under pack key "\(entry.keyID)", which this build does not hold \
                (it holds \(held.isEmpty ? "none" : held.joined(separator: ", "))): this build's keys were retired: \
                ship a build with the current configuration (`depot keys export`)
                """)
        } catch let error as PackError {
            throw ClientError.integrity(entry.id, "its content does not match the manifest's SHA-256: \(error.description)")
        } catch let error as ZipPackError {
            if error == .noSpace { throw ClientError.noSpace(folder) }
            throw ClientError.integrity(entry.id, error.description)
        } catch {
            throw Self.failure(error, pack: entry.id, folder: folder)
        }
    }

    /// Installs `entry` by applying a patch to the installed copy at `destination`: the patch
    /// container (`file`, exactly `patch.size` bytes) is checked and decrypted, the delta applied
    /// to the installed file into a new copy beside it, and the new copy switched in only if its
    /// plaintext is the manifest's (size and SHA-256). The installed copy is read, never
    /// changed; any failure leaves it as it was, and the caller falls back to the whole pack.
    /// A base that cannot be read whole (purged, truncated) is an integrity failure: the next
    /// plan asks for the whole pack.
    public func installPatch(_ entry: PackEntry, patch: PackPatch, from file: String, to destination: String) throws {
        let staged = try stagePatch(entry, patch: patch, from: file, onto: destination)
        _ = try Self.switchInto(destination, staged: staged, pack: entry.id)
    }

    /// ``installPatch(_:patch:from:to:)`` up to the switch: the new copy staged beside the
    /// installed one, for a caller that records what it switches in.
    func stagePatch(_ entry: PackEntry, patch: PackPatch, from file: String, onto destination: String) throws -> StagedCopy {
        let container: FileDescriptor
        do { container = try FileDescriptor.openForReading(file) } catch {
            throw Self.gone(error) ? ClientError.purged(entry.id, file) : ClientError.install(entry.id, error)
        }
        guard let size = try? container.size(), size == patch.size else {
            throw ClientError.sizeMismatch(entry.id, expected: patch.size, got: (try? container.size()) ?? 0)
        }
        let folder = FileSystem.directory(of: destination)
        let delta = FileSystem.temporaryPath(besides: file, suffix: ".delta")
        let staged = FileSystem.temporaryPath(besides: destination)
        var whole = false
        defer {
            FileSystem.remove(delta)
            if !whole { Self.removeTree(staged) }
        }
        do {
            // A scratch file: ordered, committed with the new copy's one drive flush.
            let summary = try PackDecryptor.decrypt(container, to: delta, keyRing: keyRing, expectedSize: patch.size, hashingPlaintext: false, sync: .ordered)
            guard summary.sha256 == patch.sha256 else {
                throw ClientError.integrity(entry.id, "the patch's SHA-256 is \(summary.sha256), the manifest says \(patch.sha256)")
            }
            if ZipPack.isZip(contentType: entry.contentType) {
                // An unpacked zip: the new tree built beside the installed one, every file checked,
                // never more bytes than the manifest's install size.
                let tree = try StagedTree(staged)
                try TreePatch.apply(patch: delta, base: destination, into: staged, limit: entry.installSize)
                let copy = try tree.measured(pack: entry.id)
                try Self.check(copy, against: entry)
                whole = true
                return StagedCopy(path: staged, copy: copy)
            }
            let base: FileDescriptor
            do { base = try FileDescriptor.openForReading(destination) } catch {
                throw ClientError.integrity(entry.id, "the installed copy, the patch's base, cannot be read: \(error)")
            }
            let output = try FileDescriptor(path: staged, flags: O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
            var behind = WriteBehind()
            // The header is checked against the manifest before a byte is written.
            try DeltaDecoder.apply(patch: FileDescriptor.openForReading(delta), base: base, accepting: { header in
                guard Hex.encode(header.targetSHA256) == entry.plaintextSHA256, header.targetSize == entry.installSize,
                      Hex.encode(header.baseSHA256) == patch.fromPlaintextSHA256 else {
                    throw ClientError.integrity(entry.id, "the patch does not lead from revision \(patch.fromRevision) to the manifest's revision \(entry.revision)")
                }
            }) { bytes in
                try output.write(bytes)
                behind.wrote(bytes.count, to: output)
            }
            try output.sync(.full)  // the install's one drive flush
            try output.close()
            guard let copy = InstalledCopy.measure(staged), !copy.unpacked else {
                throw ClientError.install(entry.id, SystemError(call: "stat", errno: ENOENT, path: staged))
            }
            whole = true
            return StagedCopy(path: staged, copy: copy)
        } catch let error as DeltaError {
            throw ClientError.integrity(entry.id, "the patch cannot be applied to the installed copy: \(error.description)")
        } catch let error as PackError {
            throw ClientError.integrity(entry.id, "the patch's container does not verify: \(error.description)")
        } catch {
            throw Self.failure(error, pack: entry.id, folder: folder)
        }
    }

    /// What is about to be switched in holds the manifest's install size (a file's plaintext; a
    /// tree's files added up, as the origin counts a zip's): a staging tree that lost files to
    /// anything at all is never recorded as whole.
    static func check(_ copy: InstalledCopy, against entry: PackEntry) throws {
        guard copy.bytes == entry.installSize else {
            throw ClientError.integrity(entry.id, "what would be installed has \(copy.bytes) bytes, the manifest says \(entry.installSize)")
        }
    }

    /// Switches a staged copy in with no record (the public ``install(_:from:to:)``): the old
    /// copy, at the staged path after the switch, is removed; so is the staged one if the switch
    /// failed. Returns what was switched in.
    static func switchInto(_ destination: String, staged: StagedCopy, pack: String) throws -> InstalledCopy {
        defer { removeTree(staged.path) }
        do {
            try switchInto(destination, from: staged.path)
        } catch {
            throw failure(error, pack: pack, folder: FileSystem.directory(of: destination))
        }
        return staged.copy
    }

    /// Puts `staged` at `destination` in one step: a rename, or an atomic exchange
    /// (``System/exchange(_:_:)``) when something is there, after which the old copy is at
    /// `staged` for the caller to remove (once its record changed: ``StateStore/switchIn(_:as:app:now:)``).
    /// The staged copy was flushed to the medium before; the folder's syncs here are ordered
    /// after it, and the state's record, written after this with a full sync, commits them.
    static func switchInto(_ destination: String, from staged: String) throws {
        guard FileSystem.exists(destination) || (try? FileManager.default.destinationOfSymbolicLink(atPath: destination)) != nil else {
            try FileSystem.durableRename(staged, to: destination, .ordered)
            return
        }
        if try !System.exchange(staged, destination) {
            // No atomic exchange here (Linux before 3.15): move the old copy aside first. A
            // crash in between leaves no installed copy; the next process that changes the state
            // completes the switch (``StateStore``'s switches).
            // The three renames are made durable together, by the folder's sync below: one that
            // fails then finds the copy in place, which the caller's record follows.
            let aside = staged + ".old"
            try FileSystem.rename(destination, to: aside)
            do {
                try FileSystem.rename(staged, to: destination)
            } catch {
                try? FileSystem.rename(aside, to: destination)
                throw error
            }
            try FileSystem.rename(aside, to: staged)
        }
        try FileSystem.syncDirectory(FileSystem.directory(of: destination), .ordered)
    }

    /// Removes what killed installs left in `folder`: staged `.tmp-*` trees and files, each
    /// named with its owner's process id and launch token (`FileSystem.temporaryName(for:)`).
    /// This process's own stay (a step of it may be using them). One whose owner provably no
    /// longer runs goes. Since a pid is reused (another app's process answers `kill(pid, 0)` with
    /// `EPERM`, a later one of this app with success; this pid with another launch token is an
    /// earlier process's — or, in containers sharing a folder, another namespace's), one whose
    /// owner seems alive goes once unchanged for `ownedMaximumAge` (a day: an install step writes its tree
    /// within minutes; one suspended for a day in the middle of an install finds its tree gone,
    /// fails that pack and plans it again). A name without an owner (written by a build before
    /// owners were recorded) goes after `maximumAge`. Returns how many.
    @discardableResult
    public static func removeLeftovers(in folder: String, maximumAge: TimeInterval = 3600, ownedMaximumAge: TimeInterval = 86_400, now: Date = Date()) -> Int {
        var removed = 0
        for name in FileSystem.contents(of: folder) where name.hasPrefix(".tmp-") && !FileSystem.isThisProcessTemporary(name) {
            let path = folder + "/" + name
            let owner = FileSystem.temporaryOwner(name)
            if let owner, owner != System.processID, System.processIsGone(owner) {
                FileSystem.discardTree(path)
                removed += 1
                continue
            }
            let modified = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date
            if let modified, now.timeIntervalSince(modified) > (owner == nil ? maximumAge : ownedMaximumAge) {
                FileSystem.discardTree(path)
                removed += 1
            }
        }
        return removed
    }

    /// Whether an error is "no such file": what a delivered file the system purged gives.
    static func gone(_ error: any Error) -> Bool { (error as? SystemError)?.errno == ENOENT }

    /// The common end of an install's failures: a full disk, an error already in the client's
    /// words, or anything else as an install failure of `pack`.
    static func failure(_ error: any Error, pack: String, folder: String) -> ClientError {
        if let error = error as? SystemError, error.isNoSpace { return .noSpace(folder) }
        return error as? ClientError ?? .install(pack, error)
    }

    /// Removes an installed copy: a file or a folder tree (a link removed, never followed).
    public static func removeTree(_ path: String) {
        FileSystem.removeTree(path)
    }
}
