/// AssetDepot's version, in one place: what `depot --version` prints, what the release's tag and
/// CHANGELOG.md's newest heading say. Semantic versioning (docs/Integrating.md, "Versions and
/// compatibility"): while the major version is 0, a minor version may change the client's API
/// (said in CHANGELOG.md), a patch version never does.
public enum AssetDepotVersion {
    /// This build's version: `MAJOR.MINOR.PATCH`.
    public static let current = "0.2.0"
}
