import ArgumentParser
import DepotCore
import DepotHTTP
import DepotServer
import Foundation
import Synchronization
import Logging

struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the origin.",
        discussion: """
            Every option can also come from the environment variable named in its help (the flag wins). \
            A data folder that does not exist yet is created with a dev app, its keys and two tokens, \
            which are printed (--bootstrap dev, for trying it out); with --bootstrap none (the packaged \
            unit's), it is created empty, as `depot init` does. Started by root on a data folder another user \
            owns (as every depot command), it runs as that user, so ports below 1024 and files only root reads are out of its reach. SIGTERM or SIGINT stops accepting connections, lets requests in flight \
            finish for up to --drain-timeout seconds, then exits 0. The access log goes to stderr.
            """
    )

    @OptionGroup var data: DataOptions

    @Option(help: ArgumentHelp("What a data folder that does not exist yet gets: dev, the app com.example.dev with a publisher and an admin token that never expire, printed (for trying it out); none, nothing but its folders and signing key, as `depot init` (for production) (env DEPOT_BOOTSTRAP).", valueName: "dev|none"))
    var bootstrap: String = Environment.string("DEPOT_BOOTSTRAP", "dev")

    @Option(help: "HOST:PORT to listen on; port 0 picks a free port (env DEPOT_LISTEN).")
    var listen: String = Environment.string("DEPOT_LISTEN", "127.0.0.1:8080")

    @Option(name: .customLong("public-url"), help: "Base URL that manifests put in front of blob paths: your CDN or edge (env DEPOT_PUBLIC_URL). Default: http://HOST:PORT.")
    var publicURL: String = Environment.string("DEPOT_PUBLIC_URL", "")

    @Option(name: .customLong("public-dir"), help: "Folder served at / (env DEPOT_PUBLIC_DIR). Default: ./Public, else PREFIX/share/assetdepot/Public beside PREFIX/bin/depot (the package's /usr/share/assetdepot/Public), else the Public folder of the source tree depot was built in.")
    var publicDir: String = Environment.string("DEPOT_PUBLIC_DIR", "")

    @Option(help: "Server threads (env DEPOT_THREADS).")
    var threads: Int = Environment.int("DEPOT_THREADS", 4)

    @Option(name: .customLong("max-pack-size"), help: "Largest pack accepted, in bytes (env DEPOT_MAX_PACK_SIZE).")
    var maxPackSize: Int64 = Environment.int("DEPOT_MAX_PACK_SIZE", Int64(16) << 30)

    @Option(name: .customLong("connection-limit"), help: "Most connections open at once (env DEPOT_CONNECTION_LIMIT).")
    var connectionLimit: Int = Environment.int("DEPOT_CONNECTION_LIMIT", 1024)

    @Option(name: .customLong("per-ip-limit"), help: "Most connections from one IP address, 0 for no limit; keep 0 behind a CDN or edge (env DEPOT_PER_IP_LIMIT).")
    var perIPLimit: Int = Environment.int("DEPOT_PER_IP_LIMIT", 0)

    @Option(name: .customLong("trusted-proxy"), help: ArgumentHelp("An edge (an address or CIDR network, repeatable) whose X-Forwarded-For names the client: the right-most address in it that is not itself a trusted proxy becomes the request's client address, for per-address rate limits and the access log. Requests from any other peer are their peer, whatever they send. The edge must append the address it sees (nginx: proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for) (env DEPOT_TRUSTED_PROXIES, separated by commas).", valueName: "cidr"))
    var trustedProxy: [String] = Environment.list("DEPOT_TRUSTED_PROXIES")

    @Option(help: "Seconds of inactivity before a connection is closed (env DEPOT_TIMEOUT).")
    var timeout: Int = Environment.int("DEPOT_TIMEOUT", 30)

    @Option(name: .customLong("connection-memory"), help: "Bytes of buffer per connection; bounds request headers (env DEPOT_CONNECTION_MEMORY).")
    var connectionMemory: Int = Environment.int("DEPOT_CONNECTION_MEMORY", 8 << 10)

    @Option(name: .customLong("blob-cache-memory"), help: "Bytes of memory for ready answers of hot blobs: blobs of up to 16 KiB kept in memory, about 1 KiB per kept answer and 5 KiB per server thread for a larger kept blob; 0 opens the blob's file for every request (env DEPOT_BLOB_CACHE_MEMORY).")
    var blobCacheMemory: Int = Environment.int("DEPOT_BLOB_CACHE_MEMORY", 8 << 20)

    @Option(name: .customLong("blob-cache-files"), help: "Larger hot blobs kept open with their ready answers, each with a descriptor per server thread (also bounded by the open-file limit); 0 keeps none (env DEPOT_BLOB_CACHE_FILES).")
    var blobCacheFiles: Int = Environment.int("DEPOT_BLOB_CACHE_FILES", 256)

    @Flag(name: .customLong("turbo"), inversion: .prefixedNo, help: "libmicrohttpd's turbo mode: reads, writes and accepts tried before polling for readiness (env DEPOT_TURBO=0 to turn off).")
    var turbo: Bool = Environment.int("DEPOT_TURBO", 1) != 0

    @Option(name: .customLong("manifest-max-age"), help: "max-age, in seconds, of the live manifest (env DEPOT_MANIFEST_MAX_AGE).")
    var manifestMaxAge: Int = Environment.int("DEPOT_MANIFEST_MAX_AGE", 60)

    @Option(name: .customLong("manifest-lifetime-days"), help: "How long a signed manifest stays valid (env DEPOT_MANIFEST_LIFETIME_DAYS).")
    var manifestLifetimeDays: Int = Environment.int("DEPOT_MANIFEST_LIFETIME_DAYS", 90)

    @Option(name: .customLong("refresh-interval"), help: "Seconds between checks for live manifests to re-sign near expiry (a signing key or root change is seen within seconds) (env DEPOT_REFRESH_INTERVAL).")
    var refreshInterval: Int = Environment.int("DEPOT_REFRESH_INTERVAL", 3600)

    @Option(name: .customLong("retention-days"), help: "Every --refresh-interval, blobs no live release, draft or release of the last this many days needs are removed, so releases that recent stay restorable by rollback (env DEPOT_RETENTION_DAYS).")
    var retentionDays: Int = Environment.int("DEPOT_RETENTION_DAYS", 30)

    @Option(name: .customLong("grace-seconds"), help: "Never remove a blob younger than this: it covers the moment between a blob being stored and staged (env DEPOT_GRACE_SECONDS).")
    var graceSeconds: Int = Environment.int("DEPOT_GRACE_SECONDS", 3600)

    @Option(name: .customLong("upload-expiry-hours"), help: "Hours a resumable upload may sit untouched before it is removed (env DEPOT_UPLOAD_EXPIRY_HOURS).")
    var uploadExpiryHours: Int = Environment.int("DEPOT_UPLOAD_EXPIRY_HOURS", 24)

    @Option(name: .customLong("drain-timeout"), help: "Seconds that requests in flight may take to finish after SIGTERM (env DEPOT_DRAIN_TIMEOUT).")
    var drainTimeout: Int = Environment.int("DEPOT_DRAIN_TIMEOUT", 30)

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical (env DEPOT_LOG_LEVEL).")
    var logLevel: String = Environment.string("DEPOT_LOG_LEVEL", "info")

    @OptionGroup var store: ObjectStoreOptions

    @Flag(name: .customLong("read-only"), inversion: .prefixedNo, help: "With --storage s3: a replica that serves the releases and blobs the writing origin put in the bucket, with no keys and no tokens; every write gets 403 (env DEPOT_READ_ONLY=1).")
    var readOnly = Environment.string("DEPOT_READ_ONLY") == "1"

    @Flag(name: .customLong("take-over-bucket"), help: "With --storage s3: this writer's folder is behind the bucket's channel pointers (restored from an older backup) and its pointers replace them; without it, such a start is refused, as a restore drill against the live bucket is.")
    var takeOverBucket = false

    @Option(name: .customLong("replica-interval"), help: "With --read-only: seconds between looks for new releases in the bucket (env DEPOT_REPLICA_INTERVAL).")
    var replicaInterval: Int = Environment.int("DEPOT_REPLICA_INTERVAL", 10)
    @Option(name: .customLong("report-rate-per-address"), help: "Device reports accepted per second from one client address, burst twice that (env DEPOT_REPORT_RATE_PER_ADDRESS; an edge or a NAT speaks for many devices).")
    var reportRatePerAddress: Int = Environment.int("DEPOT_REPORT_RATE_PER_ADDRESS", 200)
    @Option(name: .customLong("report-rate-total"), help: "Device reports accepted per second in all, burst twice that (env DEPOT_REPORT_RATE_TOTAL).")
    var reportRateTotal: Int = Environment.int("DEPOT_REPORT_RATE_TOTAL", 2000)
    @Option(name: .customLong("attest-rate-per-address"), help: "App Attest requests (challenges and attestations) accepted per second from one client address, burst twice that (env DEPOT_ATTEST_RATE_PER_ADDRESS).")
    var attestRatePerAddress: Int = Environment.int("DEPOT_ATTEST_RATE_PER_ADDRESS", 10)
    @Option(name: .customLong("attest-rate-total"), help: "App Attest requests accepted per second in all, burst twice that (env DEPOT_ATTEST_RATE_TOTAL).")
    var attestRateTotal: Int = Environment.int("DEPOT_ATTEST_RATE_TOTAL", 200)

    @Option(name: .customLong("max-channels"), help: "Most channels an app may have besides production; creating one more is refused with 409 too_many_channels (env DEPOT_MAX_CHANNELS).")
    var maxChannels: Int = Environment.int("DEPOT_MAX_CHANNELS", ReleaseStore.defaultMaximumChannels)

    @Option(name: .customLong("manifest-memory"), help: "MiB of live signed manifests kept in memory, over every app and channel; past it a channel's live manifest is sent from its file (the page cache keeps what is asked often) (env DEPOT_MANIFEST_MEMORY).")
    var manifestMemory: Int = Environment.int("DEPOT_MANIFEST_MEMORY", ReleaseStore.defaultManifestMemory >> 20)

    @Option(name: .customLong("patch-depth"), help: "How many earlier revisions of a changed pack get a patch (a delta download) to the new one, made in the background after each release; 0 turns patches off (env DEPOT_PATCH_DEPTH).")
    var patchDepth: Int = Environment.int("DEPOT_PATCH_DEPTH", 3)

    @Option(name: .customLong("patch-scratch-limit"), help: "The most scratch space one patch may use in bytes, unpacked zip trees included; a patch that needs more is skipped and devices download the whole pack (env DEPOT_PATCH_SCRATCH_LIMIT). Default: four times --max-pack-size, at least 4 GiB.")
    var patchScratchLimitOption: Int64?
    /// The flag, else the environment (read here: a default from the environment would show in the help as one).
    var patchScratchLimit: Int64? { patchScratchLimitOption ?? Environment.optionalInt("DEPOT_PATCH_SCRATCH_LIMIT") }

    @Option(name: .customLong("patch-disk-reserve"), help: "The percentage of the data volume patch making always leaves free, checked before and while a patch is made (env DEPOT_PATCH_DISK_RESERVE).")
    var patchDiskReserve: Int = Environment.int("DEPOT_PATCH_DISK_RESERVE", 25)

    @Option(name: .customLong("patch-share"), help: "The percentage of its time patch making may work (CPU and disk), 5–100: after each pack it rests in proportion (env DEPOT_PATCH_SHARE).")
    var patchShare: Int = Environment.int("DEPOT_PATCH_SHARE", 50)

    @Option(name: .customLong("metrics-token-file"), help: "A file holding the token a Prometheus scraper sends (Authorization: Bearer) to read /metrics; without it /metrics answers 404, as metrics name every app (env DEPOT_METRICS_TOKEN_FILE).")
    var metricsTokenFile: String = Environment.string("DEPOT_METRICS_TOKEN_FILE", "")

    func validate() throws {
        _ = try parseListen()
        guard (1...256).contains(threads) else { throw ValidationError("--threads must be 1–256") }
        guard connectionLimit >= 1, perIPLimit >= 0, timeout >= 1, connectionMemory >= 4096 else {
            throw ValidationError("--connection-limit and --timeout must be at least 1, --connection-memory at least 4096")
        }
        guard blobCacheMemory >= 0, blobCacheFiles >= 0 else { throw ValidationError("--blob-cache-memory and --blob-cache-files must not be negative") }
        guard manifestMaxAge >= 0, manifestLifetimeDays >= 1, drainTimeout >= 0, maxPackSize >= 0, refreshInterval >= 1, uploadExpiryHours >= 1,
              retentionDays >= 0, graceSeconds >= 1 else {
            throw ValidationError("sizes and durations must not be negative")
        }
        guard Logger.Level(rawValue: logLevel) != nil else { throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical") }
        if !publicURL.isEmpty, URL(string: publicURL)?.scheme == nil { throw ValidationError("--public-url must be an absolute URL") }
        if readOnly && store.storage != "s3" { throw ValidationError("--read-only serves a bucket: give --storage s3 and its options") }
        if readOnly, let endpoint = URL(string: store.s3Endpoint), endpoint.scheme == "http", !Self.isLoopback(endpoint.host ?? "") {
            // A replica takes each app's settings (app.json, unsigned) from the bucket: over plain
            // http on a network, whoever sits on the path could rewrite them.
            throw ValidationError("--read-only reads unsigned app settings from the bucket: give an https:// --s3-endpoint (http only on loopback)")
        }
        guard replicaInterval >= 1 else { throw ValidationError("--replica-interval must be at least 1") }
        guard reportRatePerAddress >= 1, reportRateTotal >= 1 else { throw ValidationError("--report-rate-per-address and --report-rate-total must be at least 1") }
        guard attestRatePerAddress >= 1, attestRateTotal >= 1 else { throw ValidationError("--attest-rate-per-address and --attest-rate-total must be at least 1") }
        guard maxChannels >= 1 else { throw ValidationError("--max-channels must be at least 1") }
        guard (0...16).contains(patchDepth) else { throw ValidationError("--patch-depth must be 0–16") }
        guard (5...100).contains(patchShare) else { throw ValidationError("--patch-share must be 5–100") }
        guard (0...1 << 20).contains(manifestMemory) else { throw ValidationError("--manifest-memory takes 0 to 1048576 MiB") }
        guard bootstrap == "dev" || bootstrap == "none" else { throw ValidationError("--bootstrap must be dev or none") }
        guard (patchScratchLimit ?? 1) >= 1, (0...90).contains(patchDiskReserve) else { throw ValidationError("--patch-scratch-limit must be at least 1, --patch-disk-reserve must be 0–90") }
        _ = try trustedProxies()
    }

    /// `--trusted-proxy`, parsed.
    func trustedProxies() throws -> TrustedProxies {
        TrustedProxies(try trustedProxy.map { text in
            guard let network = IPNetwork(text) else {
                throw ValidationError("--trusted-proxy \(text): give an IP address or a CIDR network (127.0.0.1, 10.0.0.0/8, 2001:db8::/32)")
            }
            // Every peer trusted would let every client name itself (and pass the per-address limits).
            guard network.prefixLength >= (network.description.contains(":") ? 16 : 8) else {
                throw ValidationError("--trusted-proxy \(text): a network this wide trusts whoever connects; name your edges' addresses (at most a /8, or a /16 for IPv6)")
            }
            return network
        })
    }

    /// 127.0.0.0/8, ::1 or localhost: a link no one else can sit on.
    static func isLoopback(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if bare == "localhost" || bare == "::1" { return true }
        let parts = bare.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    /// The metrics token, read from its file (a file keeps it out of `ps` and the environment).
    func metricsToken() throws -> String? {
        guard !metricsTokenFile.isEmpty else { return nil }
        let text = String(decoding: try FileSystem.readFile(metricsTokenFile, limit: 4096), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.count >= 16, text.utf8.allSatisfy({ $0 > 32 && $0 < 127 }) else {
            throw ValidationError("--metrics-token-file must hold one token of at least 16 printable characters (openssl rand -hex 32 > FILE)")
        }
        return text
    }

    func parseListen() throws -> (String, UInt16) {
        guard let colon = listen.lastIndex(of: ":"), let port = UInt16(listen[listen.index(after: colon)...]) else {
            throw ValidationError("--listen must be HOST:PORT")
        }
        var host = String(listen[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host, port)
    }

    func run() throws {
        let (host, port) = try parseListen()
        let level = Logger.Level(rawValue: logLevel)!
        LoggingSystem.bootstrap { label in BufferedLogHandler(label: label, logLevel: level) }
        // A replica holds no keys or tokens: nothing to bootstrap.
        let bootstrap = readOnly || self.bootstrap == "none" ? nil : try Bootstrap.ifNeeded(dataPath: data.data)
        let stop = StopSignal()
        let files = Self.raiseOpenFileLimit()
        // A connection takes a socket, an upload or a download a file besides.
        if files < 2 * connectionLimit + 64 {
            print("warning: \(files) open files allowed (ulimit -n); --connection-limit \(connectionLimit) may need \(2 * connectionLimit + 64) (systemd: LimitNOFILE=)")
        }

        var http = HTTPServerConfiguration(
            host: host, port: port, threads: threads, connectionLimit: connectionLimit, perIPConnectionLimit: perIPLimit,
            connectionTimeout: timeout, connectionMemoryLimit: connectionMemory, turbo: turbo
        )
        http.trustedProxies = try trustedProxies()
        let dashboard = publicDir.isEmpty ? Self.defaultPublicDirectory() : publicDir
        var configuration = OriginConfiguration(
            dataPath: data.data, publicURL: publicURL.isEmpty ? nil : publicURL,
            publicDirectory: dashboard,
            maximumPackSize: maxPackSize, manifestLifetime: TimeInterval(manifestLifetimeDays) * 86_400, manifestMaxAge: manifestMaxAge,
            http: http, logger: Logger(label: "assetdepot")
        )
        configuration.refreshInterval = TimeInterval(refreshInterval)
        configuration.uploadExpiry = TimeInterval(uploadExpiryHours) * 3600
        configuration.blobRetention = TimeInterval(retentionDays) * 86_400
        configuration.blobGrace = TimeInterval(graceSeconds)
        configuration.objectStore = try store.objectStore()
        configuration.readOnly = readOnly
        configuration.takeOverBucket = takeOverBucket
        configuration.replicaInterval = TimeInterval(replicaInterval)
        configuration.reportRatePerAddress = Double(reportRatePerAddress)
        configuration.reportRateTotal = Double(reportRateTotal)
        configuration.attestRatePerAddress = Double(attestRatePerAddress)
        configuration.attestRateTotal = Double(attestRateTotal)
        // Apple's App Attestation root; a debug build (tests) takes a test CA's from DEPOT_APP_ATTEST_TEST_ANCHOR.
        configuration.appAttestAnchor = AppAttestVerifier.anchorFromEnvironment()
        configuration.patchDepth = patchDepth
        configuration.maximumChannels = maxChannels
        configuration.manifestMemory = manifestMemory << 20
        configuration.patchLimits = PatchLimits(
            scratchBytes: patchScratchLimit ?? 4 * max(maxPackSize, 1 << 30), reserve: Double(patchDiskReserve) / 100, share: Double(patchShare) / 100
        )
        configuration.metricsToken = try metricsToken()
        // Access lines straight into the log handler's buffer (the handler every logger here has,
        // bootstrapped above): the same line as an info message of the logger, without a log
        // event per request.
        let label = configuration.logger.label
        configuration.accessLogSink = { line in BufferedLogHandler.Sink.shared.append(level: .info, label: label, message: line, metadata: [:]) }
        // Kept descriptors (one per server thread for each kept blob) leave room for every
        // connection's socket and the file it sends or writes.
        configuration.blobCache = BlobCacheLimits(
            memoryBytes: blobCacheMemory, files: max(0, min(blobCacheFiles, (files - 2 * connectionLimit - 64) / threads))
        )
        let server = try DepotServer(configuration: configuration)
        print("AssetDepot listening on \(host.contains(":") ? "[\(host)]" : host):\(server.port), data \(data.data), public URL \(server.publicURL)")
        if let store = configuration.objectStore {
            print("blobs\(readOnly ? " and releases" : "") in bucket \(store.bucket)\(store.prefix.isEmpty ? "" : " under \(store.prefix)") at \(store.endpoint.absoluteString)"
                + ", keys from \(store.credentials.source)"
                + (readOnly ? "; a read-only replica, looking for new releases every \(replicaInterval) s" : ""))
        }
        if !http.trustedProxies.isEmpty {
            print("client addresses from X-Forwarded-For of \(http.trustedProxies.networks.map(\.description).joined(separator: ", "))")
        }
        // Without its folder the dashboard answers 404 at /: said once here rather than found later.
        if let dashboard, !FileSystem.exists(dashboard + "/index.html") {
            print("warning: no dashboard: \(dashboard)/index.html does not exist; give --public-dir (env DEPOT_PUBLIC_DIR) the dashboard's folder (Public/ of the source tree, /usr/share/assetdepot/Public of the package)")
        } else if dashboard == nil {
            print("warning: no dashboard: none of \(Self.publicDirectoryCandidates().joined(separator: ", ")) holds an index.html, so / answers 404; give --public-dir (env DEPOT_PUBLIC_DIR) the dashboard's folder (Public/ of the source tree, /usr/share/assetdepot/Public of the package)")
        }
        if let clock = WallClock.file {
            print("warning: DEPOT_CLOCK_FILE is set: this origin's calendar (release dates, retention, report days, rollouts) is the time \(clock) holds; it is for tests only")
        }
        if !server.publicURL.hasPrefix("https://") {
            print("warning: the public URL \(server.publicURL) is not https: fine for development, but devices (Background Assets) download only over https; put a TLS edge in front and pass --public-url https://… (Deploy/README.md)")
        }
        if let restored = server.restored { print("\(data.data): \(restored.description)") }
        if let bootstrap { print(bootstrap.instructions(server: server.publicURL, dataPath: data.data, depot: CommandLine.executablePath)) }
        let apps = readOnly ? [] : AppStore(folder: DataFolder(data.data)).list()
        if !readOnly && apps.isEmpty {
            print("no apps yet: create one as this user (\(String(cString: getpwuid(getuid())?.pointee.pw_name ?? strdup("?")))): depot apps create APP --data \(data.data), then a token: depot tokens create --data \(data.data) --app APP --role admin --expires 7d --out FILE")
        }
        // The start and the stop in the log itself (stderr, the journal), with what is running.
        let log = configuration.logger
        log.notice("started depot \(AssetDepotVersion.current) (pid \(getpid()), uid \(getuid())) on \(host.contains(":") ? "[\(host)]" : host):\(server.port), data \(data.data) (format \((try? DataFolder(data.data).currentFormat()) ?? DataFolder.baseFormat)), \(apps.count) apps")
        BufferedLogHandler.Sink.shared.flush()
        fflush(nil)
        let received = stop.wait()
        print("stopping (signal \(received)): draining requests for up to \(drainTimeout) s")
        log.notice("stopping on signal \(received): draining requests for up to \(drainTimeout) s")
        fflush(nil)
        let cut = server.shutdown(gracePeriod: .seconds(drainTimeout))
        log.notice("stopped depot \(AssetDepotVersion.current) (pid \(getpid()))\(cut == 0 ? "" : "; \(cut) requests were cut off at the drain deadline")")
        BufferedLogHandler.Sink.shared.flush()
        print(cut == 0 ? "stopped" : "stopped; \(cut) requests were cut off at the deadline")
    }
}
