import DepotCore
import Foundation

/// What a backup of an origin on object storage keeps in the bucket, and what a restore reads
/// there. A backup with `--storage s3` copies the data folder only; the blobs its releases and
/// drafts name stay in the bucket, where the writer's sweep would remove those of a release
/// that is neither live nor recent. So the backup leaves a *hold* beside them:
///
///     <prefix>holds/<takenAt>-<random>.json   {"format":1,"takenAt":…,"keepUntil":…,"blobs":[…]}
///
/// and the sweep keeps every blob an unexpired hold names (removing holds past `keepUntil`).
/// A restore reads the bucket's release numbers (its floor goes above them) and its channel
/// pointers (a writer whose folder is behind them is a drill or a stale copy: ``BucketState``).
struct BackupHold: Codable, Sendable {
    var format: Int
    var takenAt: Date
    /// Until when the blobs are kept: the backup stays restorable with its blobs until then.
    var keepUntil: Date
    var blobs: [String]

    static let prefix = "holds/"
}

/// The bucket as backups, restores and the writer's start read it.
struct BucketState: Sendable {
    let client: S3Client
    let bucket: S3BlobStore

    init(_ location: S3Location) throws {
        client = try S3Client(location)
        bucket = S3BlobStore(client: client, spool: NSTemporaryDirectory())
    }

    init(client: S3Client, bucket: S3BlobStore) { (self.client, self.bucket) = (client, bucket) }

    /// Writes a hold for `blobs` (a backup's); returns its key.
    func hold(_ blobs: Set<String>, takenAt: Date, keepUntil: Date) throws -> String {
        let stamp = Int(takenAt.timeIntervalSince1970)
        let key = BackupHold.prefix + "\(stamp)-" + Hex.encode(SecureRandom.bytes(6)) + ".json"
        let bytes = Array(try StoredJSON.compact.encode(BackupHold(format: 1, takenAt: takenAt, keepUntil: keepUntil, blobs: blobs.sorted())))
        try S3Client.check(client.call("PUT", key: key, headers: ["content-type": "application/json"], body: .bytes(bytes), payloadSHA256: Hex.encode(SHA256Hasher.hash(bytes))), "writing \(key)")
        return key
    }

    /// Every blob an unexpired hold names. Holds past their `keepUntil` are removed (with
    /// `removingExpired`). A hold that cannot be read or decoded throws: the sweep then removes
    /// nothing this pass rather than a blob a backup may need.
    func held(now: Date, removingExpired: Bool) throws -> Set<String> {
        var blobs = Set<String>()
        let objects = try bucket.list(prefix: BackupHold.prefix).filter { $0.key.hasSuffix(".json") }
        // A night's backup for years is a few thousand; more is someone else's writing.
        guard objects.count <= 5_000, objects.reduce(0, { $0 + $1.size }) <= 1 << 30 else {
            throw DepotError.conflict("backup_holds_too_many", "the bucket holds \(objects.count) backup holds: no blob was removed; remove holds no backup needs (holds/ in the bucket)")
        }
        for object in objects {
            let response = try S3Client.check(client.call("GET", key: object.key, limit: 64 << 20), "reading \(object.key)")
            let hold: BackupHold
            do { hold = try StoredJSON.decoder.decode(BackupHold.self, from: Data(response.body)) } catch {
                throw DepotError.conflict("backup_hold_unreadable", "\(object.key) in the bucket is not a backup hold this depot reads (\(error)): no blob was removed; remove the object if no backup needs it")
            }
            if hold.keepUntil < now {
                if removingExpired { _ = try? client.call("DELETE", key: object.key) }
                continue
            }
            blobs.formUnion(hold.blobs)
        }
        return blobs
    }

    /// Each app's highest release number in the bucket: its envelopes
    /// (`apps/<app>/releases/NNNNNN.json`) and signed copies (`apps/<app>/signed/<channel>/NNNNNN.json`).
    /// `listing`: the bucket's objects under `apps/`, when the caller has listed them already.
    func highestReleases(listing: [S3BlobStore.Object]? = nil) throws -> [String: Int] {
        var highest: [String: Int] = [:]
        for object in try listing ?? bucket.list(prefix: "apps/") {
            let parts = object.key.split(separator: "/", omittingEmptySubsequences: false)
            let name: Substring
            switch (parts.count, parts.count > 2 ? parts[2] : "") {
            case (4, "releases"): name = parts[3]
            case (5, "signed"): name = parts[4]
            default: continue
            }
            guard name.hasSuffix(".json"), let number = Int(name.dropLast(5)), number > 0 else { continue }
            highest[String(parts[1])] = max(highest[String(parts[1])] ?? 0, number)
        }
        return highest
    }

    /// Each app's channel pointers in the bucket: the release each channel serves there.
    func pointers(listing: [S3BlobStore.Object]? = nil) throws -> [String: [String: Int]] {
        var out: [String: [String: Int]] = [:]
        for object in try listing ?? bucket.list(prefix: "apps/") {
            let parts = object.key.split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count == 4, parts[2] == "channels", Identifier.isValidApp(String(parts[1])), Identifier.isValidChannel(String(parts[3])) else { continue }
            let body = try S3Client.check(client.call("GET", key: object.key, limit: 64), "reading \(object.key)").body
            guard let number = Int(String(decoding: body, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) else { continue }
            out[String(parts[1]), default: [:]][String(parts[3])] = number
        }
        return out
    }

    /// The apps whose bucket pointers name a release above the folder's own `head`: another
    /// writer went on after this folder's state (a restore drill started against the live
    /// bucket, or a folder restored from a backup taken before those releases). Empty when the
    /// folder is at or ahead of the bucket.
    func ahead(of folder: DataFolder, listing: [S3BlobStore.Object]? = nil) throws -> [(app: String, channel: String, bucket: Int, folder: Int)] {
        var found: [(app: String, channel: String, bucket: Int, folder: Int)] = []
        // Apps the folder does not have (removed since, or made after the backup) are not compared.
        for (app, channels) in try pointers(listing: listing).sorted(by: { $0.key < $1.key }) where FileSystem.isDirectory(folder.app(app)) {
            let head = ReleaseMirror.number(folder.head(app)) ?? 0
            for (channel, number) in channels.sorted(by: { $0.key < $1.key }) where number > head {
                found.append((app, channel, number, head))
            }
        }
        return found
    }
}

extension BucketState {
    /// A writer's start on the bucket. Refuses (`409 bucket_in_use`) while another writer's lease
    /// is fresh (``WriterLease``), and (`409 bucket_ahead`) when the bucket's pointers
    /// are ahead of the folder, unless `takeOver`: then its pushes replace them. Raises the
    /// folder's floor above every release number in the bucket (numbers above the Unix time
    /// plus a day, which no honest origin issues, are named and not taken), so that no number
    /// this writer issues is one the bucket already holds (the mirror never uploads a number it
    /// finds there: replicas would go on serving the old bytes). Returns what to log.
    func prepareWriter(_ folder: DataFolder, takeOver: Bool, interval: TimeInterval, now: Date = Date()) throws -> [String] {
        var notes: [String] = []
        if let note = try checkLease(folder, takeOver: takeOver, now: now) { notes.append(note) }
        // One listing of apps/ serves both looks (pointers and release numbers).
        let listing = try bucket.list(prefix: "apps/")
        let ahead = try ahead(of: folder, listing: listing)
        if !ahead.isEmpty {
            let shown = ahead.prefix(5).map { "\($0.app) channel \($0.channel) serves release \($0.bucket) there, the folder's head is \($0.folder)" }.joined(separator: "; ")
            guard takeOver else {
                throw DepotError.conflict("bucket_ahead", "the bucket's channel pointers are ahead of this data folder (\(shown)). Another origin writes to this bucket — a restore drill must not run as a writer against the live bucket: run it with --read-only, or against a copy of the bucket — or this folder was restored from a backup taken before those releases: start once with --take-over-bucket, and this origin's pointers replace the bucket's. Nothing was written")
            }
            notes.append("taking over the bucket: \(shown); this folder's pointers replace them")
        }
        let ceiling = Int(now.timeIntervalSince1970) + 86_400
        let highest = try highestReleases(listing: listing)
        let taken = highest.values.filter { $0 < ceiling }.max() ?? 0
        if let inflated = highest.filter({ $0.value >= ceiling }).min(by: { $0.key < $1.key }) {
            notes.append("the bucket holds release \(inflated.value) of \(inflated.key), above the Unix time plus a day, which no honest origin issues: not taken into the release floor")
        }
        let local = ReleaseFloor.highestReleases(folder).values.max() ?? 0
        if taken > local, taken >= (ReleaseFloor.read(folder) ?? 0) {
            try ReleaseFloor.raise(folder, toAtLeast: taken + 1)
            notes.append("the bucket holds release \(taken), above this folder's \(local): release numbers continue from \(taken + 1)")
        }
        try renewLease(folder, interval: interval, now: now)
        return notes
    }
}

/// The bucket's one writer: `<prefix>writer.json`, renewed at the writer's start and at every
/// maintenance pass. A writer is its data folder's `writer-id` (random, made at the first start,
/// never copied by a backup: a restored folder, a drill's included, is a new writer).
struct WriterLease: Codable, Sendable {
    var writer: String
    var host: String
    var data: String
    var seen: Date
    /// The holder's maintenance interval: the lease is fresh for twice it plus two minutes.
    var interval: TimeInterval

    static let key = "writer.json"
    static let idFile = "writer-id"

    func fresh(now: Date) -> Bool { now.timeIntervalSince(seen) < 2 * interval + 120 }
}

extension BucketState {
    /// This folder's writer id (made now if it has none).
    static func writerID(_ folder: DataFolder) throws -> String {
        let path = folder.root + "/" + WriterLease.idFile
        if let bytes = try? FileSystem.readFile(path, limit: 64) {
            let id = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            if !id.isEmpty { return id }
        }
        let id = Hex.encode(SecureRandom.bytes(16))
        try FileSystem.writeAtomically(Array((id + "\n").utf8), to: path)
        return id
    }

    /// The lease in the bucket, nil when there is none (or it cannot be decoded: a lease this
    /// depot does not read is no writer it knows of).
    func lease() throws -> WriterLease? {
        let response = try client.call("GET", key: WriterLease.key, limit: 64 << 10)
        if response.status == 404 { return nil }
        let body = try S3Client.check(response, "reading \(WriterLease.key)").body
        return try? StoredJSON.decoder.decode(WriterLease.self, from: Data(body))
    }

    /// Writes this folder's lease, seen now.
    func renewLease(_ folder: DataFolder, interval: TimeInterval, now: Date = Date()) throws {
        let lease = WriterLease(writer: try Self.writerID(folder), host: ProcessInfo.processInfo.hostName, data: folder.root, seen: now, interval: interval)
        let bytes = Array(try StoredJSON.compact.encode(lease))
        try S3Client.check(client.call("PUT", key: WriterLease.key, headers: ["content-type": "application/json"], body: .bytes(bytes), payloadSHA256: Hex.encode(SHA256Hasher.hash(bytes))), "writing \(WriterLease.key)")
    }

    /// Refuses (`409 bucket_in_use`) a writer start while another writer's lease is fresh,
    /// unless `takeOver`.
    func checkLease(_ folder: DataFolder, takeOver: Bool, now: Date) throws -> String? {
        guard let lease = try lease(), lease.writer != (try Self.writerID(folder)), lease.fresh(now: now) else { return nil }
        let age = Int(now.timeIntervalSince(lease.seen))
        guard takeOver else {
            throw DepotError.conflict("bucket_in_use", "another writer (data folder \(lease.data) on \(lease.host)) renewed its lease on this bucket \(age) s ago: a bucket has one writer. A restore drill runs with --read-only, or against a copy of the bucket; a real restore is depot restore --take-over-bucket with the old writer stopped (or wait until its lease is \(Int(2 * lease.interval + 120)) s old). Nothing was written")
        }
        return "taking over the bucket from the writer of \(lease.data) on \(lease.host), seen \(age) s ago"
    }
}
