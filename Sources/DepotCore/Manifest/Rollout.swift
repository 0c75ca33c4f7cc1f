/// A release offered to a fraction of a channel's devices first, carried in the channel's signed
/// manifest (``Manifest/rollout``): every device fetches the same manifest from the one
/// `BAManifestURL` (which a CDN caches), so each device chooses for itself, from an install id
/// it keeps and never sends (see <doc:Rollouts>).
///
/// A device takes the candidate when ``bucket(installID:)`` is below ``fraction``: the first
/// 8 bytes of SHA-256(salt ‖ install id), read as a big-endian fraction of 2⁶⁴. The salt is the
/// rollout's own, so raising the fraction keeps every device that was in, and another rollout
/// draws another sample.
public struct Rollout: Codable, Hashable, Sendable {
    /// The candidate release (its number on the origin).
    public var release: Int
    /// The share of devices that take the candidate, 0 (halted: nobody) to 1 (everybody).
    public var fraction: Double
    /// 16 random bytes, lower-case hex: the rollout's sample of devices.
    public var salt: String
    /// The candidate's entries of the packs it changes or adds (each with its revision, size,
    /// SHA-256, URL and patches).
    public var packs: [PackEntry]
    /// Packs the candidate drops, by id.
    public var removed: [String]

    public init(release: Int, fraction: Double, salt: String, packs: [PackEntry], removed: [String] = []) {
        self.release = release
        self.fraction = fraction
        self.salt = salt
        self.packs = packs.sorted { $0.id < $1.id }
        self.removed = removed.sorted()
    }

    /// A new salt: 16 random bytes, hex.
    public static func newSalt() -> String { Hex.encode(SecureRandom.bytes(16)) }

    /// A new install id: 128 random bits, hex. Made once per device state, never sent anywhere.
    public static func newInstallID() -> String { Hex.encode(SecureRandom.bytes(16)) }

    /// Where this device falls in the rollout's sample: the first 8 bytes of SHA-256(salt ‖
    /// install id) (the bytes the hex strings stand for), big-endian.
    public func bucket(installID: String) -> UInt64 {
        let digest = SHA256Hasher.hash((Hex.decode(salt) ?? Array(salt.utf8)) + (Hex.decode(installID) ?? Array(installID.utf8)))
        return digest.prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// Whether the device with `installID` takes the candidate: its bucket is below
    /// `fraction × 2⁶⁴` (so a higher fraction keeps every device a lower one took).
    public func takesCandidate(installID: String) -> Bool {
        guard fraction > 0 else { return false }
        guard fraction < 1 else { return true }
        return bucket(installID: installID) < UInt64(fraction * 18_446_744_073_709_551_616.0)
    }

    /// What makes the rollout unusable, or nil: a fraction outside 0…1, a salt that is not 32
    /// hex digits, a candidate pack listed twice or also removed.
    var problem: String? {
        guard fraction.isFinite, (0...1).contains(fraction) else { return "the rollout's fraction is not between 0 and 1" }
        guard salt.utf8.count == 32, Hex.decode(salt) != nil else { return "the rollout's salt is not 32 hex digits" }
        guard release > 0 else { return "the rollout's release is not a positive number" }
        var seen = Set<String>()
        for pack in packs where !seen.insert(pack.id).inserted { return "the rollout lists pack \(pack.id) twice" }
        for id in removed {
            guard Identifier.isValidPack(id), !seen.contains(id) else { return "the rollout both removes and changes pack \(id.prefix(80))" }
        }
        return nil
    }
}

extension Manifest {
    /// The manifest as a device with `installID` follows it: with a rollout, the candidate's
    /// entries in place of the current ones (and its removals) when the device takes it;
    /// without one, itself. The result carries no rollout.
    ///
    /// `candidateFloor`: the newest candidate this device chose before on a protected channel
    /// (``TrustRecord/candidates``); an older one is not taken.
    public func resolved(installID: String, candidateFloor: Int? = nil) -> Manifest {
        guard let rollout else { return self }
        return choosing(candidate: rollout.release >= candidateFloor ?? 0 && rollout.takesCandidate(installID: installID))
    }

    /// ``resolved(installID:candidateFloor:)`` in place (a manifest of thousands of packs is not copied): what an
    /// extension, with its tight memory limit, calls. `installID` is asked only when there is a rollout.
    public mutating func resolve(installID: () throws -> String, candidateFloor: Int? = nil) rethrows {
        guard let rollout else { return }
        self.rollout = nil
        guard rollout.release >= candidateFloor ?? 0, rollout.takesCandidate(installID: try installID()) else { return }
        let replaced = Set(rollout.packs.map(\.id)).union(rollout.removed)
        packs.removeAll { replaced.contains($0.id) }
        packs.append(contentsOf: rollout.packs)
        packs.sort { $0.id < $1.id }
    }

    /// The manifest a device follows when it takes the candidate (`true`) or not; without a
    /// rollout, itself either way. What the allowance guard and the Info.plist keys check both of.
    public func choosing(candidate: Bool) -> Manifest {
        var chosen = self
        chosen.rollout = nil
        guard candidate, let rollout else { return chosen }
        let replaced = Set(rollout.packs.map(\.id)).union(rollout.removed)
        chosen.packs = (packs.filter { !replaced.contains($0.id) } + rollout.packs).sorted { $0.id < $1.id }
        return chosen
    }

    /// Every entry the manifest names: its packs and a rollout's candidates (the blobs a
    /// channel's devices may download).
    public var allEntries: [PackEntry] { packs + (rollout?.packs ?? []) }
}
