extension OriginCrashLab {
    /// What a run was told: the acknowledgements to find after the restart.
    enum Ack {
        case released(release: Int, pack: String, sha256: String)
        case staged(pack: String, sha256: String?)
        /// An upload acknowledged at `offset`: there at that offset or later; if at its end, its pack live.
        case offset(location: String, offset: Int, length: Int, pack: String, plaintextSHA256: String)
        /// A pack live with these plaintext bytes.
        case live(pack: String, plaintextSHA256: String)
        /// Never live with these plaintext bytes (a refused upload's).
        case notLive(pack: String, plaintextSHA256: String)
        /// The channel serves the release acknowledged, or one a later step of the sequence set (done, not yet answered).
        case channel(String, releases: [Int])
        case tokenWorks(String)
        case tokenRefused(String)
        /// The rollout is in the state acknowledged, or one a later step set.
        case rollout(states: [String])
        /// A key id the app's exported configuration must hold.
        case keyExported(String)
        /// At least this many manifest keys in the exported configuration (a signing key added).
        case signingKeys(Int)
        /// A trust rule `depot apps trust --list` shows.
        case ruleListed(String)
        /// A device pinning the exported root finds `channel` serving `release`'s signed statement.
        case signed(channel: String, release: Int)
        /// The app's current pack key (`depot keys list`).
        case packKeyCurrent(String)
        /// A root version `depot root show` lists, which the exported configuration pins.
        case rootAdded(Int)
        /// An App Attest key (base64) `depot attest list` shows, which the origin knows.
        case attestedKey(String)
        /// An App Attest key `depot attest list` shows revoked.
        case keyRevoked(String)
        /// An attested report sent (answered or not): its exact bytes and headers, to replay.
        case attestedReport(body: [UInt8], headers: [String])
    }
}
