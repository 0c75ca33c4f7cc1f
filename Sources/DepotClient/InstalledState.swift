import DepotCore
import Foundation

/// What is installed in a destination folder: `DEST/.depot/state.json`.
public struct InstalledState: Codable, Hashable, Sendable {
    /// One installed pack.
    public struct Pack: Codable, Hashable, Sendable {
        public var revision: Int
        /// SHA-256 of the container it came from.
        public var sha256: String
        public var plaintextSHA256: String
        public var installSize: Int64
        public var installedAt: Date
        /// A zip pack installed as a folder of its entries.
        public var unpacked: Bool
        /// A patch onto this copy failed (the file changed on disk since it was recorded, or
        /// the patch was bad): its next revision comes whole.
        public var patchFailed: Bool?
        /// What was switched in (``InstalledCopy``): files, bytes and inode, checked by `stat` at
        /// each plan. Absent in records written before copies were measured.
        public var files: Int?
        public var bytes: Int64?
        public var inode: UInt64?

        public init(revision: Int, sha256: String, plaintextSHA256: String, installSize: Int64, installedAt: Date, unpacked: Bool = false) {
            self.revision = revision
            self.sha256 = sha256
            self.plaintextSHA256 = plaintextSHA256
            self.installSize = installSize
            self.installedAt = installedAt
            self.unpacked = unpacked
        }

        /// The record of `entry` installed now.
        public init(_ entry: PackEntry, installedAt: Date, unpacked: Bool) {
            self.init(
                revision: entry.revision, sha256: entry.sha256, plaintextSHA256: entry.plaintextSHA256, installSize: entry.installSize,
                installedAt: installedAt, unpacked: unpacked
            )
        }

        /// The record of `entry` installed now as `copy` (measured before it was switched in).
        public init(_ entry: PackEntry, installedAt: Date, copy: InstalledCopy) {
            self.init(entry, installedAt: installedAt, unpacked: copy.unpacked)
            (files, bytes, inode) = (copy.files, copy.bytes, copy.inode)
        }

        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            revision = try c.decode(Int.self, forKey: .revision)
            sha256 = try c.decode(String.self, forKey: .sha256)
            plaintextSHA256 = try c.decode(String.self, forKey: .plaintextSHA256)
            installSize = try c.decode(Int64.self, forKey: .installSize)
            installedAt = try c.decode(Date.self, forKey: .installedAt)
            unpacked = try c.decodeIfPresent(Bool.self, forKey: .unpacked) ?? false
            patchFailed = try c.decodeIfPresent(Bool.self, forKey: .patchFailed)
            files = try c.decodeIfPresent(Int.self, forKey: .files)
            bytes = try c.decodeIfPresent(Int64.self, forKey: .bytes)
            inode = try c.decodeIfPresent(UInt64.self, forKey: .inode)
        }
    }

    /// A copy being switched in: saved, under the lock, before the staged copy is exchanged into
    /// `packs/<pack>`, and settled into ``packs`` after it, in the same hold of the lock
    /// (``StateStore``), so that the switch and its record are one step as any reader sees them,
    /// whenever a process is killed. While it is listed, `record` is the pack's record exactly
    /// when the copy at `packs/<pack>` is the staged one (its inode: a rename and an exchange keep
    /// it); otherwise ``packs`` stands. One left by a killed process is settled, completed or
    /// dropped by the next process that changes the state.
    public struct Switch: Codable, Hashable, Sendable {
        /// The pack.
        public var pack: String
        /// Its record once the staged copy is at `packs/<pack>` (with the staged copy's inode).
        public var record: Pack
        /// The staged copy's name in `packs/`: a `.tmp-` name that carries its owner's process id.
        public var staged: String
        /// The inode of the copy it replaces (at `packs/<pack>` when it began), or nil if none.
        public var replacing: UInt64?
        /// The SHA-256 of the record it replaces, or nil if none: a switch is completed only over
        /// that record.
        public var replacingSHA256: String?
        /// When it began.
        public var since: Date
    }

    /// The app.
    public var app: String
    /// The highest manifest version accepted from the production channel.
    public var manifestVersion: Int
    /// The highest version accepted per other channel (the rollback floors).
    public var channelFloors: [String: Int]
    /// The ETag of the last manifest accepted per channel, for `If-None-Match`.
    public var manifestETags: [String: String]
    /// Installed packs by id; each lives at `DEST/packs/<id>`.
    public var packs: [String: Pack]
    /// 128 random bits (hex), made once by ``StateStore/installID(app:)``: where this device
    /// falls in a rollout's sample (`Rollout`). It never leaves the device: no report, request
    /// or log carries it (so it is not public: an app that dumps its state does not leak it).
    package var installID: String?
    /// With a root of trust: the newest root accepted and each protected channel's highest
    /// signed release (`TrustRecord`); nil before the first such manifest.
    public var trust: TrustRecord?
    /// Switches begun and not yet settled (``Switch``); nil when none (so a state without one
    /// reads as a former build wrote it).
    public internal(set) var switches: [Switch]?

    public init(app: String, manifestVersion: Int = 0, packs: [String: Pack] = [:]) {
        self.app = app
        self.manifestVersion = manifestVersion
        self.channelFloors = [:]
        self.manifestETags = [:]
        self.packs = packs
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        app = try c.decode(String.self, forKey: .app)
        manifestVersion = try c.decode(Int.self, forKey: .manifestVersion)
        channelFloors = try c.decodeIfPresent([String: Int].self, forKey: .channelFloors) ?? [:]
        manifestETags = try c.decodeIfPresent([String: String].self, forKey: .manifestETags) ?? [:]
        packs = try c.decode([String: Pack].self, forKey: .packs)
        installID = try c.decodeIfPresent(String.self, forKey: .installID)
        trust = try c.decodeIfPresent(TrustRecord.self, forKey: .trust)
        switches = try c.decodeIfPresent([Switch].self, forKey: .switches)
    }

    /// The highest version accepted on a channel: nothing lower is accepted again.
    public func floor(channel: String) -> Int {
        channel == ManifestSource.production ? manifestVersion : channelFloors[channel] ?? 0
    }

    /// Raises a channel's floor (never lowers it).
    public mutating func raiseFloor(channel: String, to version: Int) {
        if channel == ManifestSource.production {
            manifestVersion = max(manifestVersion, version)
        } else {
            channelFloors[channel] = max(channelFloors[channel] ?? 0, version)
        }
    }

    /// Why this state would not take `accepted` on `channel`, or nil: a version below the
    /// channel's floor, or with a root of trust an older root or signed release (a newer signed
    /// release may come with a lower version: `ManifestTrust.refusal`).
    public func refusal(_ accepted: ManifestSource.Accepted, channel: String) -> ClientError? {
        let floor = floor(channel: channel)
        guard let trusted = accepted.trusted else {
            return accepted.manifest.version >= floor ? nil : ClientError.rollback(offered: accepted.manifest.version, floor: floor)
        }
        guard let why = ManifestTrust.refusal(trusted, versionFloor: floor, record: trust, channel: channel) else { return nil }
        return accepted.manifest.version < floor && trusted.signedRelease == nil
            ? ClientError.rollback(offered: accepted.manifest.version, floor: floor) : ClientError.manifest(why)
    }

    /// Records `accepted` (after ``refusal(_:channel:)`` found nothing): the channel's floor
    /// becomes its version (lower only when a newer signed release lifts a pushed floor), and the
    /// root and signed release are remembered.
    ///
    /// `installID`: this device's install id, given when the manifest has a rollout; on a
    /// protected channel the candidate it takes is remembered (`TrustRecord.candidates`).
    public mutating func record(_ accepted: ManifestSource.Accepted, channel: String, installID: String? = nil) {
        let version = accepted.manifest.version
        if let trusted = accepted.trusted {
            if version < floor(channel: channel) {
                if channel == ManifestSource.production { manifestVersion = version } else { channelFloors[channel] = version }
            }
            var record = ManifestTrust.recording(trusted, in: trust, channel: channel)
            if trusted.signedRelease != nil, let rollout = accepted.manifest.rollout, let installID,
               rollout.release > record.candidates?[channel] ?? 0, rollout.takesCandidate(installID: installID) {
                record.candidates = (record.candidates ?? [:]).merging([channel: rollout.release]) { $1 }
            }
            trust = record
        }
        raiseFloor(channel: channel, to: version)
    }

    /// On a protected channel, the newest rollout candidate this device chose: an older one is
    /// not taken (`Manifest.resolve(installID:candidateFloor:)`).
    public func candidateFloor(channel: String) -> Int? { trust?.candidates?[channel] }
}
