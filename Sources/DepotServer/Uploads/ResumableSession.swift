import DepotCore
import Foundation
import Logging

/// One request appending to a resumable upload, which it holds claimed until it ends: the
/// bytes are encrypted through an encryptor resumed from the stored state (a managed app's
/// Apple Archive: checked and stored as it is), and committed
/// (made durable, state saved) every 32 MiB, at the end, and when the connection drops. When
/// the last byte is in, the container is sealed, verified end to end, and stored and staged
/// (or released) through the ``Publisher``.
///
/// The periodic commits bound what a vanished client costs: libmicrohttpd (0.9.75, epoll) may
/// notice a peer that left in the middle of a large body only at the connection timeout, and
/// until then the upload stays busy (409) while HEAD already reports the last commit.
final class ResumableSession {
    static let commitInterval: Int64 = 32 << 20
    private(set) var state: ResumableState
    /// Commit every ``commitInterval`` bytes; off when the request's bytes must be verified first.
    var commitsPeriodically = true
    private let uploads: ResumableUploads
    private let publisher: Publisher
    private let expiry: TimeInterval
    private let keys: KeyRing
    private let file: FileDescriptor
    /// What the bytes go through: the encryptor, or for a managed app's archive a checked copy.
    private let transform: any PackTransform
    /// The encryptor and the sealer of its pending plaintext; nil for an archive.
    private let encrypting: (encryptor: PackEncryptor, tail: SealedTail)?
    private var received: Int64 = 0
    private var ended = false
    /// This request started the upload: its transform saw every byte, so its hashes are the pack's.
    private let fromStart: Bool

    /// Claims upload `id` of `app` and resumes it; `offset`, when given, must be where it stands.
    init(claiming id: String, app: String, at offset: Int64?, uploads: ResumableUploads, publisher: Publisher, expiry: TimeInterval) throws {
        guard uploads.claim(id) else { throw ResumableUploads.busy(id) }
        do {
            // Read again under the claim: another request may have finished in between.
            guard let current = uploads.load(id, app: app), current.result == nil, offset == nil || current.offset == offset else {
                throw DepotError.conflict("offset_mismatch", "the upload moved on; ask for its offset again")
            }
            let file = try FileDescriptor(path: uploads.containerPath(id), flags: O_WRONLY)
            // Shorter than its state says: bytes were lost (never grown back with zeros).
            guard try file.size() >= current.containerLength else {
                throw DepotError(.failure, "upload_damaged", "upload \(id) lost bytes it had recorded; start a new upload")
            }
            try file.truncate(to: current.containerLength)
            try file.seek(to: current.containerLength)
            // Written back as it goes, so each commit's fsync has little left to wait for.
            var behind = WriteBehind(from: current.containerLength)
            let sink: (UnsafeRawBufferPointer) throws -> Void = { bytes in
                try file.write(bytes)
                behind.wrote(bytes.count, to: file)
            }
            if current.isArchive {
                // The first bytes already stored, to recognise the archive by.
                var prefix = [UInt8](repeating: 0, count: Int(min(4, current.containerLength)))
                if !prefix.isEmpty {
                    let reader = try FileDescriptor.openForReading(uploads.containerPath(id))
                    defer { try? reader.close() }
                    _ = try prefix.withUnsafeMutableBytes { try reader.read(into: $0, at: 0) }
                }
                fromStart = current.offset == 0
                (transform, encrypting, keys) = (ArchiveWriter(prefix: prefix, hashing: fromStart, sink: sink), nil, try KeyRing([String: [UInt8]]()))
            } else {
                let keys = try publisher.apps.packKeys(app).ring
                guard let master = keys[current.keyID] else {
                    throw DepotError.conflict("key_missing", "the pack key of this upload is gone; start a new upload")
                }
                let sealer = try SealedTail(masterKey: master, header: current.header, id: id)
                let pending: [UInt8]
                do {
                    pending = try sealer.open(current.tail)
                } catch {
                    throw DepotError(.failure, "upload_damaged", "\(error)")
                }
                fromStart = current.offset == 0 && current.sealedSegments == 0 && pending.isEmpty
                    && current.containerLength == Int64(current.header.encodedSize)
                let encryptor = fromStart
                    ? try PackEncryptor(continuingAfterHeader: current.header, masterKey: master, sink: sink)
                    : try PackEncryptor(
                        resuming: current.header, masterKey: master, sealedSegments: current.sealedSegments, pending: pending, sink: sink
                    )
                (transform, encrypting, self.keys) = (encryptor, (encryptor, sealer), keys)
            }
            (state, self.file) = (current, file)
            (self.uploads, self.publisher, self.expiry) = (uploads, publisher, expiry)
        } catch {
            uploads.release(id)
            throw error
        }
    }

    /// Whether the bytes received so far take the upload to its length.
    var reachesEnd: Bool { state.offset + received == state.length }

    /// Encrypts the next chunk of the body.
    func append(_ chunk: UnsafeRawBufferPointer) throws {
        received += Int64(chunk.count)
        guard state.offset + received <= state.length else {
            throw DepotError.badRequest("the body goes past Upload-Length \(state.length); the request was discarded")
        }
        try transform.update(chunk)
        // (Never the last bytes: those are recorded only with the verified pack, in ``finish(lateSHA256:)``.)
        if commitsPeriodically && received >= Self.commitInterval && !reachesEnd { try commit() }
    }

    /// The request's body is complete: commits it and, when the upload is complete, stores and
    /// stages (or releases) the pack. A pack refused then removes the upload. Ends the session.
    /// `lateSHA256` is the plaintext SHA-256 sent after the body (a `Depot-Content-SHA256`
    /// trailer): checked like the `sha256` metadata when this request completes the upload.
    ///
    /// The request that completes an upload records its last bytes only together with the
    /// verified, checked pack (`finishing`), in one durable record written before the container
    /// moves into the blob store: a crash before it leaves the previous offset (the last bytes
    /// were never acknowledged), a crash after it leaves what start-up stages
    /// (``ResumableUploads/finishAfterCrash(_:publisher:expiry:now:)``).
    @discardableResult
    func finish(lateSHA256: String? = nil) throws -> ResumableState {
        defer { end() }
        if let finishing = state.finishing, state.offset == state.length, received == 0 {
            // Verified and checked before (the object store was down, or a crash came): stored now.
            return try store(finishing, parameters: state.parameters)
        }
        guard reachesEnd else {
            do {
                try commit()
            } catch {
                // Not committed: the bytes go, so a full disk gets its space back at once.
                try? file.truncate(to: state.containerLength)
                throw error
            }
            return state
        }
        do {
            // One request from the first byte: the encryptor's own hashes. Otherwise (the upload
            // spanned requests or restarts) one pass over the finished container gives them.
            let inline = fromStart ? try transform.finish() : nil
            if !fromStart { try encrypting?.encryptor.sealFinal() }
            try file.sync()
            let container = uploads.containerPath(state.id)
            let expected = state.isArchive ? state.length : state.header.containerSize(plaintextSize: state.length)
            let summary = try inline.map { summary throws -> PackSummary in
                guard summary.size == expected, summary.plaintextSize == state.length else { throw PackError.sizeMismatch(expected: expected, actual: summary.size) }
                return summary
            } ?? (state.isArchive
                ? ArchiveWriter.summary(ofFile: container)
                : PackDecryptor.verify(FileDescriptor.openForReading(container), keyRing: keys, expectedSize: expected))
            var parameters = state.parameters
            if let late = lateSHA256 {
                if let early = parameters.expectedPlaintextSHA256, early != late {
                    throw DepotError.badRequest("the Depot-Content-SHA256 trailer differs from the sha256 metadata")
                }
                parameters.expectedPlaintextSHA256 = late
            }
            let installSize = try publisher.check(container: container, summary: summary, keys: keys, for: parameters)
            // The last bytes and the verified pack in one record, durable before the container moves.
            var next = state
            next.offset = state.length
            next.sealedSegments = encrypting?.encryptor.sealedSegments ?? 0
            next.containerLength = try file.size()
            next.tail = ""
            next.expires = WallClock.now().addingTimeInterval(expiry)
            next.expectedPlaintextSHA256 = parameters.expectedPlaintextSHA256
            next.finishing = ResumableState.Finishing(summary: summary, installSize: installSize)
            try uploads.save(next)
            (state, received) = (next, 0)
        } catch {
            // The record was written (its rename done) though the call failed after it: the
            // container is the one it names, and stays whole for the next try.
            if uploads.load(state.id, app: state.app)?.finishing != nil { throw error }
            // Refused (a checksum, a damaged zip) or failed: nothing of this request is recorded;
            // a refused pack removes the upload, a failure cuts the container back to the last commit.
            if error is SystemError || DepotError.storage(error).kind == .unavailable {
                try? file.truncate(to: state.containerLength)
            } else {
                uploads.remove(state.id)
            }
            throw error
        }
        return try store(state.finishing!, parameters: state.parameters)
    }

    /// Stores the verified container and stages (or releases) its pack; records the result.
    private func store(_ finishing: ResumableState.Finishing, parameters: UploadParameters) throws -> ResumableState {
        do {
            state.publishResult = try publisher.store(
                container: uploads.containerPath(state.id), summary: finishing.summary, installSize: finishing.installSize, for: parameters
            )
            state.finishing = nil
            try uploads.save(state)
        } catch {
            // Refused (a release's base moved on, an allowance): the upload goes, as a refused
            // publish does. Any other failure (the object store down or refusing, a disk error,
            // the result not saved after the pack was staged) keeps the verified record: a PATCH
            // with no body, or the next start, finishes it.
            if ResumableSession.isRefusal(error) { uploads.remove(state.id) }
            throw error
        }
        publisher.logger.info("upload complete", metadata: ["app": .string(state.app), "pack": .string(state.pack), "upload": .string(state.id)])
        return state
    }

    /// Whether a publish failed because it was refused (the client's to fix), not because the
    /// origin or its store failed.
    static func isRefusal(_ error: any Error) -> Bool {
        guard let error = error as? DepotError else { return false }
        return [.invalid, .conflict, .unprocessable, .tooLarge, .forbidden].contains(error.kind)
    }

    /// The request ended early: keeps what arrived when `keepReceived` (a dropped connection),
    /// drops it otherwise (a checksum that does not match). Ends the session.
    func abandon(keepReceived: Bool) {
        guard !ended else { return }
        // (Not the last bytes: the request that sends them again verifies the pack.)
        if keepReceived && !reachesEnd { try? commit() }
        // Whatever is not committed goes now, so a failed request (a full disk) gives its space back.
        try? file.truncate(to: state.containerLength)
        end()
    }

    /// The upload can never succeed (a managed app's upload that is no Apple Archive): removes
    /// it whole. Ends the session.
    func discard() {
        guard !ended else { return }
        try? file.close()
        uploads.remove(state.id)
        ended = true
        uploads.release(state.id)
    }

    /// Makes the received bytes durable and records the new offset; nothing changes if it fails.
    private func commit() throws {
        try file.sync()
        var next = state
        next.offset += received
        next.sealedSegments = encrypting?.encryptor.sealedSegments ?? 0
        next.containerLength = try file.size()
        next.tail = try encrypting.map { try $0.tail.seal($0.encryptor.pendingPlaintext) } ?? ""
        next.expires = WallClock.now().addingTimeInterval(expiry)
        try uploads.save(next)
        state = next
        received = 0
    }

    private func end() {
        guard !ended else { return }
        ended = true
        try? file.close()
        uploads.release(state.id)
    }
}
