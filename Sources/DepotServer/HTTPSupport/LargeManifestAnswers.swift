import DepotCore
import DepotHTTP
import Foundation
import Synchronization

/// The `200` answers of large live envelopes (a manifest of thousands of packs is megabytes),
/// made once per channel and release and sent by `sendfile` from an unlinked file that holds
/// the envelope's bytes: the kernel hands the file's pages to the socket, where sending from
/// memory copied every byte of every answer on the serving thread (a flood of a 7 MB manifest
/// held the threads in those copies, and another app's downloads fell to 0.3× their rate, where
/// nginx sending a file of that size kept them at 1.0×). Smaller envelopes are sent from memory
/// (``LiveManifest/body``), as are conditional and ranged requests, and the envelopes of channels
/// past the first ``limit`` that needed an answer (each holds a descriptor per server thread).
final class LargeManifestAnswers: Sendable {
    /// Envelopes this large or larger are answered from a file (as blobs are: `sendfile`
    /// measured faster than a copy from memory from 16 KiB on).
    static let threshold = 16 << 10
    /// Answers kept at most (each holds a descriptor per server thread: 64 at 4 threads); a
    /// channel past them is sent from memory (never made and dropped in turn: a flood cycling
    /// through channels would make a file per request).
    static let limit = 16

    private let folder: DataFolder
    /// One answer per app, channel and gating: the live one (a new release replaces it).
    private let kept = Mutex<[String: (etag: String, answer: PreparedResponse)]>([:])

    init(folder: DataFolder) { self.folder = folder }

    /// The answer of `live`, served on the channel `key` names, with `headers`; nil when it is
    /// small, or when its file cannot be made (the caller sends it from memory).
    func answer(_ live: LiveManifest, key: String, headers: @autoclosure () -> HTTPHeaders, threads: Int) -> PreparedResponse? {
        // One past the memory budget is sent from its own file already.
        guard let body = live.body, body.count >= Self.threshold else { return nil }
        let (hit, full) = kept.withLock { ($0[key], $0.count >= Self.limit) }
        if let hit, hit.etag == live.etag { return hit.answer }
        if hit == nil && full { return nil }
        guard let made = make(live, headers: headers(), threads: threads) else { return nil }
        let keptIt = kept.withLock { kept -> Bool in
            // A new release of a channel replaces its answer; a new channel needs room.
            guard kept[key] != nil || kept.count < Self.limit else { return false }
            kept[key] = (live.etag, made)
            return true
        }
        return keptIt ? made : nil
    }

    /// An unlinked file in `uploads/` (start-up removes one a crash left named) with the bytes.
    private func make(_ live: LiveManifest, headers: HTTPHeaders, threads: Int) -> PreparedResponse? {
        let path = folder.uploads + "/" + Hex.encode(SecureRandom.bytes(12)) + ".manifest"
        // Read and written: libmicrohttpd reads it by `sendfile`.
        guard let file = try? FileDescriptor(path: path, flags: O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode: 0o600) else { return nil }
        FileSystem.remove(path)
        guard let bytes = live.body?.bytes else { return nil }
        guard (try? file.write(bytes)) != nil else { return nil }
        // The response owns the descriptor from here (and closes it if it cannot be made).
        return PreparedResponse(headers: headers, body: .file(descriptor: file.release(), length: Int64(bytes.count)), threads: threads)
    }
}
