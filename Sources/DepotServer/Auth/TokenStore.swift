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
}

/// Publish tokens, stored as hashes in `tokens.json`, re-read when the file changes so that
/// `depot tokens create` takes effect on a running server.
public final class TokenStore: Sendable {
    private let path: String
    private let cache = FileStampCache<[StoredToken]>()

    public init(folder: DataFolder) { self.path = folder.tokens }

    /// Creates a token and returns it; only its hash is stored.
    public func create(app: String, role: TokenRole) throws -> (token: String, record: StoredToken) {
        let token = "dpt_" + Hex.encode(SecureRandom.bytes(24))
        let record = StoredToken(
            id: "tok-" + Hex.encode(SecureRandom.bytes(4)), sha256: Hex.encode(SHA256Hasher.hash(Array(token.utf8))),
            app: app, role: role, createdAt: Date()
        )
        var all = try load()
        all.append(record)
        try StoredJSON.write(TokenFile(tokens: all), to: path, mode: 0o600)
        return (token, record)
    }

    /// Every stored token record.
    public func list() throws -> [StoredToken] { try load() }

    /// The record of a presented token, compared in constant time against every stored hash.
    public func authenticate(_ token: String) -> StoredToken? {
        let presented = SHA256Hasher.hash(Array(token.utf8))
        var match: StoredToken?
        for record in current() {
            guard let stored = Hex.decode(record.sha256), stored.count == 32 else { continue }
            var difference: UInt8 = 0
            for i in 0..<32 { difference |= stored[i] ^ presented[i] }
            if difference == 0 { match = record }
        }
        return match
    }

    private func current() -> [StoredToken] {
        cache.value(at: path) { try StoredJSON.read(TokenFile.self, from: $0).tokens } ?? []
    }

    private func load() throws -> [StoredToken] {
        guard FileSystem.exists(path) else { return [] }
        return try StoredJSON.read(TokenFile.self, from: path).tokens
    }
}

struct TokenFile: Codable {
    var tokens: [StoredToken]
}
