/// Why a pack container could not be read or did not authenticate.
///
/// Each kind of damage has its own error, so a log says what happened to the file.
public struct PackError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The kinds of damage, for matching in tests and callers.
    public enum Kind: Hashable, Sendable {
        case headerTruncated, badMagic, unsupportedVersion, unsupportedAlgorithm, invalidSegmentSize, invalidKeyID
        case unknownKeyID, truncated, trailingData, segmentOutOfOrder, segmentCorrupted, keyMismatch
        case sizeMismatch, tailDamaged
    }

    /// What went wrong.
    public let kind: Kind
    /// Details: the segment index, the key id, the values seen.
    public let detail: String

    private init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
    }

    /// The file ends inside the header.
    public static let headerTruncated = PackError(.headerTruncated, "the file ends inside the pack header")
    /// The file does not start with `ADPK`.
    public static let badMagic = PackError(.badMagic, "not an AssetDepot pack (magic is not ADPK)")
    /// A version this code does not read.
    public static func unsupportedVersion(_ v: UInt8) -> PackError { PackError(.unsupportedVersion, "pack version \(v) is not supported") }
    /// An algorithm byte this code does not know.
    public static func unsupportedAlgorithm(_ a: UInt8) -> PackError { PackError(.unsupportedAlgorithm, "pack algorithm \(a) is not supported") }
    /// A segment size of 0 or above the limit.
    public static func invalidSegmentSize(_ s: UInt32) -> PackError { PackError(.invalidSegmentSize, "segment size \(s) is out of range") }
    /// An empty, over-long or non-UTF-8 key id.
    public static let invalidKeyID = PackError(.invalidKeyID, "the key id is empty or not valid UTF-8")
    /// The key ring has no key with this id.
    public static func unknownKeyID(_ id: String) -> PackError { PackError(.unknownKeyID, "no master key with id \"\(id)\" in the key ring") }
    /// The pack was cut short: bytes or whole segments are missing at the end.
    public static func truncated(_ why: String) -> PackError { PackError(.truncated, "the pack is truncated: \(why)") }
    /// Segments follow the one marked final.
    public static func trailingData(segment: Int) -> PackError {
        PackError(.trailingData, "segment \(segment) is marked final but more data follows")
    }
    /// A segment from elsewhere in the same pack stands at this index (reordered or duplicated).
    public static func segmentOutOfOrder(index: Int, belongsAt: Int) -> PackError {
        PackError(.segmentOutOfOrder, "segment \(index) holds the data of segment \(belongsAt) (segments reordered or duplicated)")
    }
    /// A segment (or its tag) was altered, or comes from another pack.
    public static func segmentCorrupted(index: Int) -> PackError {
        PackError(.segmentCorrupted, "segment \(index) does not authenticate (altered, or spliced from another pack)")
    }
    /// No segment authenticates: the master key is wrong for this key id, or the header was altered.
    public static let keyMismatch = PackError(.keyMismatch, "no segment authenticates: wrong master key for this key id, or the header was altered")
    /// The file's size is not the size the caller expected.
    public static func sizeMismatch(expected: Int64, actual: Int64) -> PackError {
        PackError(.sizeMismatch, "expected \(expected) bytes, found \(actual)")
    }

    /// The sealed tail of a resumable upload does not open (see ``SealedTail``).
    public static let tailDamaged = PackError(.tailDamaged, "the stored state of this upload is damaged; start a new upload")

    public var description: String { detail }
}
