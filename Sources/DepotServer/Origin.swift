import DepotCore
import DepotHTTP
import Foundation
import Logging
import Synchronization

/// The origin's request handler: routes, authentication and publishing over the data folder.
final class Origin: HTTPHandler {
    let configuration: OriginConfiguration
    let folder: DataFolder
    let apps: AppStore
    let blobs: BlobStore
    let releases: ReleaseStore
    let tokens: TokenStore
    let uploads: ResumableUploads
    let staticFiles: StaticFiles?
    let metrics = OriginMetrics()
    let logger: Logger
    private let settingsCache = FileStampCache<AppSettings>()
    /// The data folder's lock, as a raw descriptor (-1 once released).
    private let folderLock: Mutex<Int32>
    private let publicURLValue = Mutex("")
    private let inFlightProvider = Mutex<(@Sendable () -> Int)?>(nil)

    init(configuration: OriginConfiguration) throws {
        self.configuration = configuration
        logger = configuration.logger
        folder = DataFolder(configuration.dataPath)
        folderLock = Mutex(try folder.lockExclusively().release())
        try folder.prepare()
        apps = AppStore(folder: folder)
        blobs = BlobStore(folder: folder)
        releases = ReleaseStore(folder: folder, apps: apps, manifestLifetime: configuration.manifestLifetime)
        tokens = TokenStore(folder: folder)
        uploads = ResumableUploads(folder: folder)
        uploads.repair()
        staticFiles = configuration.publicDirectory.map(StaticFiles.init(root:))
        _ = try apps.signingKeys()
        try releases.removeUnpublishedReleases()
    }

    /// Releases the data folder for another process (at stop).
    func releaseFolderLock() {
        let fd = folderLock.withLock { value -> Int32 in
            defer { value = -1 }
            return value
        }
        if fd >= 0 { close(fd) }
    }

    deinit { releaseFolderLock() }

    /// The base of every URL a manifest carries, without a trailing slash.
    var publicURL: String {
        get { publicURLValue.withLock { $0 } }
        set { publicURLValue.withLock { $0 = newValue.hasSuffix("/") ? String(newValue.dropLast()) : newValue } }
    }

    /// Where `/metrics` reads the number of requests in flight.
    func setInFlightProvider(_ provider: @escaping @Sendable () -> Int) {
        inFlightProvider.withLock { $0 = provider }
    }

    /// An app's settings, re-read only when app.json changes.
    func settings(_ app: String) -> AppSettings? {
        guard Identifier.isValidApp(app) else { return nil }
        return settingsCache.value(at: folder.appSettings(app)) { try StoredJSON.read(AppSettings.self, from: $0) }
    }

    func handle(_ request: HTTPRequest) -> HTTPDisposition {
        do {
            return try route(request)
        } catch let error as DepotError {
            return .respond(error.response)
        } catch {
            return .respond(DepotError.storage(error).response)
        }
    }

    func completed(_ record: HTTPExchangeRecord) {
        metrics.record(record)
        // The access log: never a header, so never a token or credentials.
        logger.info("access", metadata: [
            "method": .string(record.method), "path": .string(record.path), "status": .stringConvertible(record.status),
            "bytes": .stringConvertible(record.bodyBytes), "duration_ms": .string(Self.milliseconds(record.duration)),
            "route": .string(record.route), "client": .string(record.clientAddress ?? "-"),
            "complete": .stringConvertible(record.completedNormally),
        ])
    }

    private static func milliseconds(_ duration: Duration) -> String {
        let ms = Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
        return String(format: "%.3f", ms)
    }

    private func route(_ request: HTTPRequest) throws -> HTTPDisposition {
        let s = request.pathSegments
        if s.count == 1 && s[0] == "healthz" {
            try allow(request, "GET, HEAD")
            var response = HTTPResponse.bytes(Array("{\"status\":\"ok\"}\n".utf8), contentType: "application/json")
            response.headers.add("Cache-Control", "no-store")
            response.route = "healthz"
            return .respond(response)
        }
        if s.count == 1 && s[0] == "metrics" {
            try allow(request, "GET, HEAD")
            let inFlight = inFlightProvider.withLock { $0 }?() ?? 0
            var response = HTTPResponse.bytes(metrics.render(inFlightRequests: inFlight), contentType: "text/plain; version=0.0.4; charset=utf-8")
            response.headers.add("Cache-Control", "no-store")
            response.route = "metrics"
            return .respond(response)
        }
        guard s.first == "v1" else {
            try allow(request, "GET, HEAD")
            guard let staticFiles, let response = staticFiles.response(for: s, request: request) else { throw DepotError.notFound("\(request.path)") }
            return .respond(response)
        }
        guard s.count >= 4, s[1] == "apps" else { throw DepotError.notFound("route \(request.path)") }
        let app = s[2]
        guard Identifier.isValidApp(app) else { throw DepotError.invalidID("app id") }
        switch (s[3], s.count) {
        case ("manifest", 4):
            try allow(request, "GET, HEAD")
            return .respond(try manifest(app, request))
        case ("releases", 4):
            try allow(request, "GET, HEAD, POST")
            return .respond(request.method == "POST" ? try publishRelease(app, request) : try releaseList(app, request))
        case ("staging", 4):
            try allow(request, "GET")
            return .respond(try stagingView(app, request))
        case ("releases", 5):
            try allow(request, "GET, HEAD")
            return .respond(try release(app, s[4], request))
        case ("blobs", 5):
            try allow(request, "GET, HEAD")
            return .respond(try blob(app, s[4], request))
        case ("info-plist", 4):
            try allow(request, "GET, HEAD")
            return .respond(try infoPlist(app, request))
        case ("packs", 5):
            try allow(request, "PUT, DELETE")
            return request.method == "DELETE" ? .respond(try removePack(app, s[4], request)) : try upload(app, s[4], request)
        case ("uploads", 4), ("uploads", 5):
            return try resumable(app, s.count == 5 ? s[4] : nil, request)
        case ("channels", 4):
            try allow(request, "GET, HEAD")
            return .respond(try channelList(app, request))
        case ("channels", 5):
            try allow(request, "POST, DELETE")
            return .respond(request.method == "POST" ? try promote(app, s[4], request) : try removeChannel(app, s[4], request))
        case ("channels", 6) where s[5] == "manifest":
            try allow(request, "GET, HEAD")
            guard Identifier.isValidChannel(s[4]) else { throw DepotError.invalidID("channel") }
            return .respond(try manifest(app, channel: s[4], request))
        case ("rollback", 4):
            try allow(request, "POST")
            return .respond(try rollback(app, request))
        default:
            throw DepotError.notFound("route \(request.path)")
        }
    }

    private func allow(_ request: HTTPRequest, _ methods: String) throws {
        guard methods.split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == request.method }) else {
            throw DepotError.methodNotAllowed(methods)
        }
    }

    /// The app's settings, or 404.
    func requireApp(_ app: String) throws -> AppSettings {
        guard let settings = settings(app) else { throw DepotError.notFound("app \(app)") }
        return settings
    }

    /// Checks the app's download credentials, when it has them; returns whether it does.
    func requireDownloadAccess(_ settings: AppSettings, _ request: HTTPRequest) throws -> Bool {
        guard let credentials = settings.downloadCredentials else { return false }
        guard credentials.accepts(request.headers["Authorization"]) else { throw DepotError.downloadCredentials(settings.id) }
        return true
    }

    /// Checks a publish token for this app; `admin` requires the admin role.
    func authorize(_ request: HTTPRequest, app: String, admin: Bool = false) throws {
        guard let header = request.headers["Authorization"] else { throw DepotError.missingToken }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { throw DepotError.missingToken }
        let token: StoredToken
        switch tokens.check(String(parts[1]).trimmingCharacters(in: .whitespaces)) {
        case .valid(let record): token = record
        case .unknown: throw DepotError.badToken
        case .expired: throw DepotError(401, "token_expired", "the bearer token has expired")
        case .revoked: throw DepotError(401, "token_revoked", "the bearer token was revoked")
        }
        guard token.app == app else { throw DepotError.forbidden("this token is scoped to another app") }
        guard token.role == .publisher || token.role == .admin else { throw DepotError.forbidden("this token cannot publish") }
        if admin && token.role != .admin { throw DepotError.forbidden("this call needs an admin token of the app") }
    }
}
