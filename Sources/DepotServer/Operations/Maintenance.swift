import DepotCore
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Re-signs manifests, sweeps unneeded blobs and expired resumable uploads at start-up and then every `refreshInterval`,
/// on a thread of its own.
final class ManifestRefresher: Sendable {
    /// Passes finished (tests wait for the first).
    let passes = Atomic<Int>(0)
    private let stopped = Mutex(false)
    private let wake = DispatchSemaphore(value: 0)

    init(origin: Origin, configuration: OriginConfiguration) {
        if !origin.readOnly { origin.releases.lookAtTrust() }
        Thread.detachNewThread { [self] in
            repeat {
                if origin.readOnly, let mirror = origin.mirror {
                    // A replica only follows the bucket: no signing, no collection.
                    do {
                        for app in try mirror.pull(into: origin.releases) {
                            origin.publisher.logger.notice("picked up a release from the bucket", metadata: ["app": .string(app)])
                        }
                    } catch {
                        origin.publisher.logger.warning("could not read releases from the object store: \(error)")
                    }
                    continue
                }
                let cpu = PatchMaker.threadCPUSeconds()
                defer {
                    origin.metrics.backgroundWork("maintenance", seconds: PatchMaker.threadCPUSeconds() - cpu)
                    origin.metrics.backgroundPass("maintenance")
                    passes.add(1, ordering: .releasing)
                }
                do {
                    for app in try origin.releases.refreshExpiring() {
                        origin.publisher.logger.notice("re-signed the live manifest", metadata: ["app": .string(app)])
                    }
                    // Each app's listings' facts read here, off the serving threads, before a
                    // request would (once per process: then kept up to date by every change).
                    origin.releases.warmHistory()
                    var swept: (blobs: [String], bytes: Int64) = ([], 0)
                    do {
                        swept = try origin.garbage.collect(retention: configuration.blobRetention, grace: configuration.blobGrace)
                    } catch let error as DepotError where error.code == "backup_running" {
                        origin.publisher.logger.notice("skipped removing unneeded blobs: a backup (depot backup) is copying the data folder")
                    } catch {
                        // (Backup holds that cannot be read, the store down.) Nothing removed; the
                        // rest of the pass (expired uploads, the push, the lease) still runs.
                        origin.publisher.logger.warning("skipped removing unneeded blobs: \(error)")
                    }
                    let expired = origin.uploads.removeExpired()
                    if expired > 0 { origin.publisher.logger.notice("removed expired resumable uploads", metadata: ["count": .stringConvertible(expired)]) }
                    if !swept.blobs.isEmpty {
                        origin.publisher.logger.notice("removed unneeded blobs", metadata: ["count": .stringConvertible(swept.blobs.count), "bytes": .stringConvertible(swept.bytes)])
                    }
                    // Whatever a push after a change missed (the store was down, a CLI changed settings).
                    try origin.mirror?.pushAll()
                    if !origin.readOnly { try origin.mirror?.renewLease(interval: configuration.refreshInterval) }
                    // The pass decoded every release (the sweep's needs); what it freed goes back to
                    // the system instead of staying in this thread's heap as resident memory.
                    MemoryTrim.afterLargeWork()
                } catch {
                    origin.publisher.logger.error("maintenance failed: \(error)")
                }
            } while waitForNextPass(origin, interval: origin.readOnly ? configuration.replicaInterval : configuration.refreshInterval)
        }
    }

    /// Waits `interval` (false: stopped meanwhile). Every second of it, the writer signs again
    /// the live manifests of apps whose roots or signing keys an admin command changed (`depot
    /// root add`, `depot keys rotate-signing`), so that devices see a new root or key within seconds.
    private func waitForNextPass(_ origin: Origin, interval: TimeInterval) -> Bool {
        let end = DispatchTime.now() + interval
        while true {
            let slice = min(end, DispatchTime.now() + 1)
            guard wake.wait(timeout: slice) == .timedOut, !stopped.withLock({ $0 }) else { return false }
            if DispatchTime.now() >= end { return true }
            guard !origin.readOnly else { continue }
            do {
                for app in try origin.releases.refreshChangedTrust() {
                    origin.publisher.logger.notice("re-signed the live manifest: the app's roots or the signing keys changed", metadata: ["app": .string(app)])
                }
            } catch {
                origin.publisher.logger.error("re-signing after a change of roots or keys failed: \(error)")
            }
        }
    }

    func stop() {
        let wasRunning = stopped.withLock { value -> Bool in
            defer { value = true }
            return !value
        }
        if wasRunning { wake.signal() }
    }
}

/// Writes the device reports counted every second, on a thread of its own, until stopped.
final class ReportWriter: Sendable {
    private let stopped = Mutex(false)
    private let wake = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)

    /// Runs `pass` every `interval` seconds, and at once when poked.
    init(interval: Double = 1, _ pass: @escaping @Sendable () -> Void) {
        Thread.detachNewThread { [self] in
            while true {
                _ = wake.wait(timeout: .now() + interval)
                if stopped.withLock({ $0 }) { break }
                pass()
            }
            done.signal()
        }
    }

    /// Runs a pass now (the report queue is filling up).
    func poke() { wake.signal() }

    /// Stops the thread and waits for a pass in progress.
    func stop() {
        let wasRunning = stopped.withLock { value -> Bool in
            defer { value = true }
            return !value
        }
        if wasRunning {
            wake.signal()
            done.wait()
        }
    }
}

/// Maintenance of a data folder that no server is using (it holds the folder's lock meanwhile).
public struct OfflineMaintenance {
    private let lock: FileDescriptor
    private let garbage: GarbageCollector
    private let uploads: ResumableUploads
    private let folder: DataFolder

    /// Takes the folder's lock; fails with `data_folder_busy` while a server runs on it.
    public init(dataPath: String) throws {
        let folder = DataFolder(dataPath)
        guard folder.exists else { throw DepotError.notFound("a data folder at \(dataPath)") }
        lock = try folder.lockExclusively()
        let releases = ReleaseStore(folder: folder, apps: AppStore(folder: folder), manifestLifetime: 90 * 86_400)
        let uploads = ResumableUploads(folder: folder)
        garbage = GarbageCollector(releases: releases, blobs: FileBlobStore(folder: folder), finishing: { uploads.finishingBlobs() })
        self.uploads = uploads
        self.folder = folder
    }

    /// Removes what interrupted writes left (as the origin does at start-up): temporary files in
    /// every folder written, envelopes re-signed for a channel included. Returns how many.
    public func removeLeftovers() -> Int {
        _ = lock
        return folder.cleanTemporaryFiles()
    }

    /// Removes resumable uploads past their expiry; returns how many.
    public func removeExpiredUploads() -> Int { uploads.removeExpired() }

    /// Removes (or lists, with `dryRun`) blobs no live release, recent release or draft needs.
    public func collectGarbage(retention: TimeInterval, grace: TimeInterval, dryRun: Bool) throws -> (blobs: [String], bytes: Int64) {
        _ = lock
        return try garbage.collect(retention: retention, grace: grace, dryRun: dryRun)
    }
}

/// Hands freed heap memory back to the system after work that allocated much and kept little
/// (glibc keeps it otherwise, per thread arena, as resident memory), and sets the allocator so
/// that large buffers are never kept at all.
enum MemoryTrim {
    static func afterLargeWork() {
        #if canImport(Glibc)
        // Glibc's module map leaves out malloc.h: looked up by name (nil on another C library).
        typealias Trim = @convention(c) (Int) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return }
        _ = unsafeBitCast(symbol, to: Trim.self)(0)
        #endif
    }

    /// The threshold above which an allocation is a mapping of its own, returned to the system
    /// when freed (glibc's `M_MMAP_THRESHOLD`).
    static let mappedAbove = 256 << 10

    /// Called once at start-up. Glibc raises its mmap threshold each time a mapped block is freed
    /// (up to 32 MiB), after which the read-ahead and patch buffers (hundreds of KiB to MiBs,
    /// freed at once) are carved from the thread arenas and stay resident: a soak showed 77 MiB
    /// of arenas holding 20 MiB in use, and one `malloc_trim` took the origin from 102 to 75 MiB.
    /// A fixed threshold turns that adjustment off. A threshold the operator set in the
    /// environment (`MALLOC_MMAP_THRESHOLD_`, or `glibc.malloc.mmap_threshold` in
    /// `GLIBC_TUNABLES`) is left alone.
    static func configureAllocator() {
        #if canImport(Glibc)
        guard getenv("MALLOC_MMAP_THRESHOLD_") == nil, getenv("GLIBC_TUNABLES").map({ String(cString: $0).contains("mmap_threshold") }) != true else { return }
        typealias Option = @convention(c) (Int32, Int32) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return }
        // M_MMAP_THRESHOLD (-3).
        _ = unsafeBitCast(symbol, to: Option.self)(-3, Int32(mappedAbove))
        #endif
    }
}
