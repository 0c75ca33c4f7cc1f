import DepotHTTP
import Foundation
import Logging

/// Everything `depot serve` can set.
public struct OriginConfiguration: Sendable {
    /// The data folder.
    public var dataPath: String
    /// The base URL that manifests put in front of blob paths (the CDN's or edge's URL).
    /// Nil: `http://HOST:PORT` of the listening socket.
    public var publicURL: String?
    /// The folder served at `/` (the dashboard). Nil: no static files.
    public var publicDirectory: String?
    /// The largest pack accepted, in plaintext bytes.
    public var maximumPackSize: Int64
    /// How long a signed manifest stays valid.
    public var manifestLifetime: TimeInterval
    /// `max-age` of the live manifest, in seconds.
    public var manifestMaxAge: Int
    /// How often the origin looks for live manifests to re-sign, and sweeps unneeded blobs.
    public var refreshInterval: TimeInterval = 3600
    /// Blobs of releases published within this window are kept (they stay restorable by rollback).
    public var blobRetention: TimeInterval = 30 * 86_400
    /// A blob younger than this is never swept (it may be about to be staged).
    public var blobGrace: TimeInterval = 3600
    /// A resumable upload untouched for this long expires and is removed.
    public var uploadExpiry: TimeInterval = 86_400
    /// The listener.
    public var http: HTTPServerConfiguration
    /// Blobs in an S3 bucket instead of the data folder's `blobs/` (nil: the data folder). The
    /// origin then also keeps its signed releases and channel pointers there for replicas.
    public var objectStore: S3Location?
    /// The token a scraper sends to read `/metrics` (`Authorization: Bearer …`); nil: `/metrics`
    /// answers 404. Metrics name every app that publishes, so they are not public.
    public var metricsToken: String?
    /// A read-only replica of `objectStore`'s bucket: serves what the writer put there, holds no
    /// keys or tokens, refuses every write with 403.
    public var readOnly = false
    /// With object storage, a writer whose folder is behind the bucket's pointers (restored
    /// from an older backup) replaces them; without it, such a start is refused (`bucket_ahead`).
    public var takeOverBucket = false
    /// How often a replica looks for new releases in the bucket, in seconds.
    public var replicaInterval: TimeInterval = 10
    /// How many earlier revisions of a changed pack get a patch to the new one (0: no patches).
    public var patchDepth = 3
    /// What one patch may take of the data volume; nil: scratch space of four times the largest
    /// pack, and a quarter of the volume always left free.
    public var patchLimits: PatchLimits?
    /// The most channels an app may have besides production: a publisher cannot grow an app's
    /// channels (and what each costs: a pointer, a manifest kept in memory) without bound.
    public var maximumChannels = ReleaseStore.defaultMaximumChannels
    /// The live envelopes' bytes kept in memory in all; past it they are sent from their files.
    public var manifestMemory = ReleaseStore.defaultManifestMemory
    /// Device reports (`POST …/reports`) accepted per second from one client address (with a
    /// burst of twice as many): generous, since an edge or a carrier's NAT speaks for many devices.
    public var reportRatePerAddress: Double = 200
    /// Device reports accepted per second in all (burst: twice as many).
    public var reportRateTotal: Double = 2000
    /// App Attest: the anchor attestation chains must end at (DER). Nil: Apple's App Attestation
    /// root, pinned in the source (``AppAttestVerifier/appleRoot``); a test CA's root in tests
    /// only (`depot serve` takes one from `DEPOT_APP_ATTEST_TEST_ANCHOR` in debug builds only).
    public var appAttestAnchor: [UInt8]?
    /// How long an attestation challenge stays usable.
    public var attestChallengeLifetime: Duration = .seconds(300)
    /// Attestation challenges outstanding at most per client address, and in all.
    public var attestChallengesPerAddress = 16
    public var attestChallengesTotal = 65_536
    /// Attestation requests (challenges and attestations) accepted per second from one client
    /// address, and in all (bursts of twice as many).
    public var attestRatePerAddress: Double = 10
    public var attestRateTotal: Double = 200
    /// The answers of hot blobs kept ready (a data folder's blobs only): memory for small ones,
    /// open descriptors for larger ones. ``BlobCacheLimits/none`` opens the file per request.
    public var blobCache = BlobCacheLimits()
    /// Where the access log and server events go.
    public var logger: Logger
    /// Where access-log lines go, when not through `logger` as info messages (the line as
    /// `logger` would carry it; `logger`'s level still decides whether it is written).
    public var accessLogSink: (@Sendable (String) -> Void)?

    public init(
        dataPath: String, publicURL: String? = nil, publicDirectory: String? = nil,
        maximumPackSize: Int64 = 16 << 30, manifestLifetime: TimeInterval = 90 * 86_400, manifestMaxAge: Int = 60,
        http: HTTPServerConfiguration = HTTPServerConfiguration(), logger: Logger = Logger(label: "assetdepot")
    ) {
        self.dataPath = dataPath
        self.publicURL = publicURL
        self.publicDirectory = publicDirectory
        self.maximumPackSize = maximumPackSize
        self.manifestLifetime = manifestLifetime
        self.manifestMaxAge = manifestMaxAge
        self.http = http
        self.logger = logger
    }
}
