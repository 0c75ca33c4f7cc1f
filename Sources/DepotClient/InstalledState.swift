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

        public init(revision: Int, sha256: String, plaintextSHA256: String, installSize: Int64, installedAt: Date) {
            self.revision = revision
            self.sha256 = sha256
            self.plaintextSHA256 = plaintextSHA256
            self.installSize = installSize
            self.installedAt = installedAt
        }
    }

    /// The app.
    public var app: String
    /// The highest manifest version accepted (the rollback floor).
    public var manifestVersion: Int
    /// Installed packs by id; each lives at `DEST/packs/<id>`.
    public var packs: [String: Pack]

    public init(app: String, manifestVersion: Int = 0, packs: [String: Pack] = [:]) {
        self.app = app
        self.manifestVersion = manifestVersion
        self.packs = packs
    }
}
