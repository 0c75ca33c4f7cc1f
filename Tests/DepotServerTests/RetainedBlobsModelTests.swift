import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// The sweep's record of the retention's blobs (``RetainedBlobs``, issue 63) against the release
/// files it caches: a seeded run of publishes hours apart on two channels, rollbacks, packs
/// dropped, sweeps at later times with a retention that grows and shrinks, the clock set back,
/// restarts, a restore's floor (numbers a billion higher), release files above `head` (a publish
/// in progress), and the record removed, torn, altered, or left from another history (a restore);
/// after every sweep, checked from outside: the blobs it keeps are exactly those of every
/// release published within the retention and of every channel's live release, read whole from
/// the files. And a sweep after a sweep reads no release file (the channels' are in memory).
@Suite("Retained blobs: a seeded model")
struct RetainedBlobsModelTests {
    static let app = "com.example.retained"

    static func reference(_ store: ReleaseStore, cutoff: Date) throws -> Set<String> {
        var needed = Set<String>()
        let head = store.head(app)
        for version in ReleaseStore.versions(in: store.folder.releases(app)) where version <= head {
            let manifest = try store.load(app, version).manifest
            if manifest.publishedAt >= cutoff { for pack in manifest.allEntries { needed.formUnion(pack.blobs) } }
        }
        // Files above `head`: a publish in progress, another process's.
        for version in ReleaseStore.versions(in: store.folder.releases(app)) where version > head {
            for pack in try store.load(app, version).manifest.allEntries { needed.formUnion(pack.blobs) }
        }
        for (_, version) in store.channels(app) {
            for pack in try store.load(app, version).manifest.allEntries { needed.formUnion(pack.blobs) }
        }
        return needed
    }

    @Test("300 seeded steps, 3 seeds: the sweep keeps exactly the retention's and the channels' blobs, and a second sweep reads no release file", arguments: [UInt64(1), 2, 3])
    func sweepKeepsWhatTheFilesNeed(seed: UInt64) throws {
        let work = TemporaryDirectory("depot-retained-model")
        defer { work.remove() }
        let folder = DataFolder(work.path + "/data")
        try folder.prepare()
        let apps = AppStore(folder: folder)
        _ = try apps.create(Self.app)
        let key = try apps.packKeys(Self.app).current
        func open() -> ReleaseStore { ReleaseStore(folder: folder, apps: apps, manifestLifetime: 90 * 86_400, lineageDepth: 3) }
        var store = open()
        var random = SeededRandom(seed: seed)
        var clock = Date(timeIntervalSince1970: 1_800_000_000)
        var retention: TimeInterval = 12 * 3600
        var made = 0
        var sweeps = 0
        let path = folder.retainedBlobs(Self.app)
        for step in 0..<300 {
            let roll = random.next(100)
            let channel = random.next(3) == 0 ? "beta" : ReleaseStore.production
            var what = ""
            if roll < 45 {
                let id = "p\(random.next(5))"
                made += 1
                clock += TimeInterval(random.next(4 * 3600))
                what = "change \(id) on \(channel)"
                _ = try store.publish(Self.app, channel: channel, rolloutChange: .content, change: { packs in
                    var packs = packs.filter { $0.id != id }
                    packs.append(ReleaseCatalogModelTests.entry(id, content: made, key: key))
                    return packs
                }, at: clock)
            } else if roll < 55 {
                let head = store.head(Self.app)
                guard head > 0 else { continue }
                let earlier = random.next(head) + 1
                guard let old = try store.release(Self.app, earlier)?.manifest.packs else { continue }
                clock += TimeInterval(random.next(4 * 3600))
                what = "roll \(channel) back to release \(earlier)"
                _ = try store.publish(Self.app, channel: channel, rolloutChange: .content, change: { _ in old }, at: clock)
            } else if roll < 60 {
                let id = "p\(random.next(5))"
                clock += TimeInterval(random.next(4 * 3600))
                what = "drop \(id) on \(channel)"
                _ = try store.publish(Self.app, channel: channel, rolloutChange: .content, change: { packs in
                    packs.contains { $0.id == id } && packs.count > 1 ? packs.filter { $0.id != id } : nil
                }, at: clock)
            } else if roll < 64 {
                what = "restart"
                store = open()
            } else if roll < 67 {
                what = "retention now \(Int(retention / 3600)) h"
                retention = TimeInterval([6, 12, 24, 48][random.next(4)] * 3600)
            } else if roll < 69 {
                what = "clock set back"
                clock -= TimeInterval(random.next(6 * 3600))
            } else if roll < 71 {
                what = "record removed"
                FileSystem.remove(path)
            } else if roll < 73, let bytes = try? FileSystem.readFile(path), bytes.count > 2 {
                what = "record torn"
                try FileSystem.writeAtomically(Array(bytes.prefix(random.next(bytes.count - 1) + 1)), to: path)
            } else if roll < 75, var record = RetainedBlobs.read(path), !record.lastUsed.isEmpty {
                // Altered by hand, the trailer left as it was: a blob dropped from it.
                what = "record altered"
                let bytes = record.encoded()
                record.lastUsed.removeValue(forKey: record.lastUsed.keys.sorted()[random.next(record.lastUsed.count)])
                let altered = record.encoded()
                let trailer = bytes.suffix(from: bytes.dropLast().lastIndex(of: 10)! + 1)
                try FileSystem.writeAtomically(Array(altered.prefix(upTo: altered.dropLast().lastIndex(of: 10)! + 1)) + trailer, to: path)
            } else if roll >= 77 && roll < 79 {
                // A restore's floor: the next release is numbered a billion higher (numbers are
                // never walked one by one).
                what = "restore floor"
                try ReleaseFloor.raise(folder, toAtLeast: store.head(Self.app) + 1_000_000_000)
            } else if roll < 77, var record = RetainedBlobs.read(path) {
                // A record of another history: release `through` is not the file it read (a
                // restore of an older folder, published anew since), and it knows none of its blobs.
                what = "record of another history"
                record.digest = String(repeating: "0", count: 64)
                record.lastUsed = [:]
                try record.write(to: path)
            } else {
                clock += TimeInterval(random.next(3600))
                let cutoff = clock.addingTimeInterval(-retention)
                // Sometimes a release file above `head` (a publish in progress, made of another
                // pack): kept this pass, gone before the next.
                let head = store.head(Self.app)
                var inProgress: String?
                if random.next(4) == 0, head > 0, let live = try store.release(Self.app, head) {
                    var manifest = try live.manifest
                    made += 1
                    manifest.packs.append(ReleaseCatalogModelTests.entry("p9", content: made, key: key))
                    let envelope = try Envelope.decode(live.envelope)
                    let bytes = Envelope(payloadType: envelope.payloadType, payload: Data(manifest.encoded()).base64EncodedString(), signatures: envelope.signatures).encoded()
                    inProgress = folder.release(Self.app, head + 1 + random.next(3))
                    try FileSystem.writeAtomically(bytes, to: inProgress!)
                }
                let needed = try store.exclusively { try store.neededBlobs(retention: retention, now: clock) }
                sweeps += 1
                let expected = try Self.reference(store, cutoff: cutoff)
                #expect(needed.symmetricDifference(expected).isEmpty, "seed \(seed) step \(step): sweep keeps \(needed.subtracting(expected).count) extra, lacks \(expected.subtracting(needed).count)\(inProgress == nil ? "" : " (a file above head)")")
                if let inProgress { FileSystem.remove(inProgress) }
                // Again: no release file is read (the channels' are in memory, the record holds the rest).
                let reads = ReleaseStore.ReadCount()
                let again = try ReleaseStore.$taskReads.withValue(reads) { try store.exclusively { try store.neededBlobs(retention: retention, now: clock) } }
                let read = reads.value.load(ordering: .relaxed)
                let expectedAgain = inProgress == nil ? expected : try Self.reference(store, cutoff: cutoff)
                #expect(again.symmetricDifference(expectedAgain).isEmpty, "seed \(seed) step \(step): the second sweep")
                #expect(read == 0, "seed \(seed) step \(step): the second sweep read \(read) release files")
                continue
            }
            _ = what
        }
        #expect(sweeps >= 40, "seed \(seed): \(sweeps) sweeps")
    }

    @Test("A record is read only whole: each byte cut, or a line changed under its trailer, is refused")
    func onlyWhole() throws {
        let record = RetainedBlobs(
            through: 7, digest: String(repeating: "ab", count: 32), from: Date(timeIntervalSince1970: 1_800_000_000.25),
            lastUsed: [String(repeating: "1", count: 64): Date(timeIntervalSince1970: 1_800_000_100), String(repeating: "f", count: 64): Date(timeIntervalSince1970: 1_800_000_200.5)]
        )
        let bytes = record.encoded()
        let read = try #require(RetainedBlobs.decode(bytes))
        #expect(read.through == 7 && read.digest == record.digest && read.lastUsed.keys.sorted() == record.lastUsed.keys.sorted())
        // Dates come back never earlier than written, and within a millisecond.
        for (blob, date) in record.lastUsed {
            let back = try #require(read.lastUsed[blob])
            #expect(back >= date && back.timeIntervalSince(date) < 0.001)
        }
        for cut in 0..<bytes.count { #expect(RetainedBlobs.decode(Array(bytes.prefix(cut))) == nil, "cut at \(cut)") }
        var changed = bytes
        changed[bytes.firstIndex(of: 10)! + 1] = UInt8(ascii: "2")
        #expect(RetainedBlobs.decode(changed) == nil)
    }
}
