import DepotCore
import Foundation

/// What a token may do.
public enum TokenRole: String, Codable, Sendable, CaseIterable {
    /// Uploads packs and publishes releases for one app.
    case publisher
    /// Everything a publisher does, plus administrative calls for that app.
    case admin
}

/// A stored token: never the token itself, only its SHA-256.
public struct StoredToken: Codable, Sendable, Hashable {
    /// A public id, for listing and revoking.
    public var id: String
    /// SHA-256 of the token, hex.
    public var sha256: String
    /// The app it is scoped to.
    public var app: String
    /// Its role.
    public var role: TokenRole
    /// When it was created.
    public var createdAt: Date
    /// After this instant the token is refused; nil: it does not expire.
    public var expiresAt: Date?
    /// When it was revoked; a revoked token is refused and kept for the record.
    public var revokedAt: Date?
    /// The channels it may release to, promote and roll out on; nil: every channel.
    public var channels: [String]? = nil
    /// Tokens of trusted publishing: when the JWT it was exchanged for expires (the record is
    /// kept until then, so that the JWT's exchanges are counted for as long as it can be used).
    public var jwtExpiresAt: Date? = nil
    /// The trust rule whose OIDC exchange made it (trusted publishing); removing the rule
    /// revokes it.
    public var rule: String? = nil
    /// The CI job's identity as its OIDC token said: `sub`, and the token's `jti`.
    public var subject: String? = nil
    public var jwtID: String? = nil

    /// Whether the token may act on `channel`.
    public func allows(channel: String) -> Bool { channels?.contains(channel) ?? true }
}

/// Why a presented token was refused, or the token it names.
public enum TokenCheck: Sendable, Equatable {
    case valid(StoredToken)
    case unknown
    case expired
    case revoked
}

/// Publish tokens, stored as hashes in `tokens.json` (0600), re-read when the file changes so
/// that `depot tokens create` and `revoke` take effect on a running server. Changes are made
/// under an exclusive lock, so two commands at once never lose a token.
public final class TokenStore: Sendable {
    private let path: String
    /// The stored tokens by the hex SHA-256 they are stored as, made once per version of the file.
    private let cache = FileStampCache<[String: StoredToken]>()

    public init(folder: DataFolder) { self.path = folder.tokens }

    /// Creates a token and returns it; only its hash is stored.
    public func create(app: String, role: TokenRole, expiresAt: Date? = nil) throws -> (token: String, record: StoredToken) {
        let token = "dpt_" + Hex.encode(SecureRandom.bytes(24))
        let record = StoredToken(
            id: "tok-" + Hex.encode(SecureRandom.bytes(4)), sha256: Hex.encode(SHA256Hasher.hash(Array(token.utf8))),
            app: app, role: role, createdAt: WallClock.now(), expiresAt: expiresAt, revokedAt: nil
        )
        try modify { $0.append(record) }
        return (token, record)
    }

    /// The most tokens one CI token (one `jti`) may be exchanged for, and the most unexpired
    /// tokens one rule may have: what a stolen JWT, or a flood of valid ones, can add to the file.
    static let exchangesPerJWT = 10
    static let liveTokensPerRule = 100

    /// Why ``mint(app:rule:expiresAt:subject:jwtID:now:)`` refused.
    enum MintRefusal: Error {
        case replayed
        case tooMany
    }

    /// Records a short-lived token an OIDC exchange made, after forgetting such tokens whose JWT
    /// has expired (each CI run adds one; the log keeps the record). Refuses an eleventh exchange
    /// of one JWT (`jwtID`: its `jti`, or a digest of it) and a 101st unexpired token of one rule.
    func mint(
        app: String, rule: TrustRule, expiresAt: Date, jwtExpiresAt: Date, subject: String?, jwtID: String, now: Date = WallClock.now()
    ) throws -> (token: String, record: StoredToken) {
        let token = "dpt_" + Hex.encode(SecureRandom.bytes(24))
        let record = StoredToken(
            id: "tok-" + Hex.encode(SecureRandom.bytes(4)), sha256: Hex.encode(SHA256Hasher.hash(Array(token.utf8))),
            app: app, role: rule.role, createdAt: now, expiresAt: expiresAt, revokedAt: nil, channels: rule.channels, rule: rule.id,
            subject: subject.map { String($0.prefix(256)) }, jwtID: String(jwtID.prefix(128))
        )
        var stored = record
        stored.jwtExpiresAt = jwtExpiresAt
        try modify { tokens in
            tokens.removeAll { $0.rule != nil && max($0.expiresAt ?? .distantFuture, $0.jwtExpiresAt ?? .distantPast) <= now }
            // (The jti byte for byte, as every claim is compared.)
            guard tokens.count(where: { $0.rule == rule.id && $0.jwtID?.sameBytes(stored.jwtID ?? "") == true }) < Self.exchangesPerJWT else {
                throw MintRefusal.replayed
            }
            guard tokens.count(where: { $0.rule == rule.id && $0.revokedAt == nil && ($0.expiresAt ?? .distantFuture) > now }) < Self.liveTokensPerRule else {
                throw MintRefusal.tooMany
            }
            tokens.append(stored)
        }
        return (token, stored)
    }

    /// Revokes a token by id; returns false if there is no such token.
    @discardableResult
    public func revoke(id: String) throws -> Bool {
        var found = false
        try modify { tokens in
            for index in tokens.indices where tokens[index].id == id {
                found = true
                if tokens[index].revokedAt == nil { tokens[index].revokedAt = WallClock.now() }
            }
        }
        return found
    }

    /// Removes every token of `app` (the app is being removed); returns how many there were.
    public func removeAll(app: String) throws -> Int {
        var removed = 0
        guard FileSystem.exists(path) else { return 0 }
        try modify { tokens in
            removed = tokens.count(where: { $0.app == app })
            tokens.removeAll { $0.app == app }
        }
        return removed
    }

    /// Every stored token record.
    public func list() throws -> [StoredToken] { try load() }

    /// Checks a presented token: its SHA-256 is looked up among the stored hashes. The lookup
    /// costs the same whatever the number of tokens (a wrong token is one hash and one lookup),
    /// and its timing says nothing of a token: what is compared is a digest the caller cannot
    /// steer byte by byte.
    public func check(_ token: String, now: Date = WallClock.now()) -> TokenCheck {
        let presented = Hex.encode(SHA256Hasher.hash(Array(token.utf8)))
        let stored = cache.value(at: path, load: { path in
            var byHash: [String: StoredToken] = [:]
            for record in try StoredJSON.read(TokenFile.self, from: path).tokens { byHash[record.sha256.lowercased()] = record }
            return byHash
        }) ?? [:]
        guard let match = stored[presented] else { return .unknown }
        if match.revokedAt != nil { return .revoked }
        if let expiry = match.expiresAt, expiry <= now { return .expired }
        return .valid(match)
    }

    private func load() throws -> [StoredToken] {
        guard FileSystem.exists(path) else { return [] }
        return try StoredJSON.read(TokenFile.self, from: path).tokens
    }

    /// Read, change and write tokens.json under its lock (``LockedFile``).
    private func modify(_ change: (inout [StoredToken]) throws -> Void) throws {
        try LockedFile.update(TokenFile.self, at: path, mode: 0o600) { file in
            var tokens = file?.tokens ?? []
            try change(&tokens)
            file = TokenFile(tokens: tokens)
        }
    }
}

struct TokenFile: Codable {
    var tokens: [StoredToken]
}
