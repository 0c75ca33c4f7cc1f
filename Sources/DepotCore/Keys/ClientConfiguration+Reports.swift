import Foundation

extension ClientConfiguration {
    /// The ids of the pack keys this build holds, sorted, as a ``DeviceReport`` names them (never a
    /// key); nil when there are more than ``DeviceReport/maximumPackKeys`` or one is not a valid id.
    public var reportedPackKeys: [String]? {
        let ids = packKeys.keys.sorted()
        guard ids.count <= DeviceReport.maximumPackKeys, ids.allSatisfy(KeyRing.isValidKeyID) else { return nil }
        return ids
    }

    /// The ids of the manifest public keys this build pins, sorted, as a ``DeviceReport`` names
    /// them; nil when it pins none, more than ``DeviceReport/maximumManifestKeys``, or one that is
    /// not a key.
    public var reportedManifestKeys: [String]? {
        // A build that pins a root trusts the root's online keys, whichever they are: it pins no manifest key.
        guard root == nil, let keys = try? trustedKeys(), !keys.isEmpty, keys.count <= DeviceReport.maximumManifestKeys else { return nil }
        return Set(keys.map(ManifestSigningKey.keyID(for:))).sorted()
    }
}
