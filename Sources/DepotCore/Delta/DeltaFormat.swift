/// AssetDepot's delta format, version 1: what turns one revision of a pack's plaintext (the
/// base, already on the device) into the next (the target). The DocC article "Delta" is its
/// specification, with a worked example.
///
///     offset  size  field
///     0       4     magic "ADDL"
///     4       1     version, 1
///     5       1     flags, 0
///     6       8     base size, big-endian
///     14      32    base SHA-256
///     46      8     target size, big-endian
///     54      32    target SHA-256
///     86      …     instructions, then END
///
/// Instructions (lengths and offsets are unsigned LEB128, at most 9 bytes, minimal):
/// `0x01 offset length` copies `length` bytes of the base from `offset`; `0x02 length bytes`
/// adds `length` bytes that follow; `0x00` ends the patch (the output must then be exactly the
/// target size, and nothing may follow).
public enum DeltaFormat {
    public static let magic: [UInt8] = Array("ADDL".utf8)
    public static let version: UInt8 = 1
    public static let headerSize = 86

    public enum Opcode: UInt8 {
        case end = 0x00
        case copy = 0x01
        case add = 0x02
    }

    /// What the header says.
    public struct Header: Sendable, Equatable {
        public var baseSize: Int64
        public var baseSHA256: [UInt8]
        public var targetSize: Int64
        public var targetSHA256: [UInt8]

        public init(baseSize: Int64, baseSHA256: [UInt8], targetSize: Int64, targetSHA256: [UInt8]) {
            (self.baseSize, self.baseSHA256, self.targetSize, self.targetSHA256) = (baseSize, baseSHA256, targetSize, targetSHA256)
        }

        /// The 86 header bytes.
        public var bytes: [UInt8] {
            var out = DeltaFormat.magic + [DeltaFormat.version, 0]
            out += bigEndian(baseSize) + baseSHA256 + bigEndian(targetSize) + targetSHA256
            return out
        }

        /// Parses the first 86 bytes of a patch.
        public init(parsing bytes: [UInt8]) throws(DeltaError) {
            guard bytes.count >= DeltaFormat.headerSize, Array(bytes[0..<4]) == DeltaFormat.magic else { throw .notADelta }
            guard bytes[4] == DeltaFormat.version else { throw .unsupportedVersion(bytes[4]) }
            guard bytes[5] == 0 else { throw .malformed("unknown flags \(bytes[5])") }
            func number(_ at: Int) -> UInt64 { bytes[at..<(at + 8)].reduce(0) { $0 << 8 | UInt64($1) } }
            let base = number(6), target = number(46)
            guard base <= UInt64(Int64.max), target <= UInt64(Int64.max) else { throw .malformed("a size past 2^63") }
            self.init(baseSize: Int64(base), baseSHA256: Array(bytes[14..<46]), targetSize: Int64(target), targetSHA256: Array(bytes[54..<86]))
        }

        private func bigEndian(_ value: Int64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: UInt64(value) >> (56 - 8 * UInt64($0))) } }
    }

    /// `value` as unsigned LEB128.
    public static func varint(_ value: UInt64) -> [UInt8] {
        var value = value
        var out: [UInt8] = []
        repeat {
            let low = UInt8(value & 0x7f)
            value >>= 7
            out.append(value == 0 ? low : low | 0x80)
        } while value != 0
        return out
    }
}

/// Why a patch was refused. Nothing the decoder wrote may be kept after one of these.
public struct DeltaError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        case notADelta, unsupportedVersion, malformed, truncated, baseMismatch, resultMismatch
    }

    public let kind: Kind
    public let description: String

    static let notADelta = DeltaError(kind: .notADelta, description: "not an AssetDepot delta (no ADDL magic)")
    static func unsupportedVersion(_ version: UInt8) -> DeltaError { DeltaError(kind: .unsupportedVersion, description: "delta version \(version) is not supported (1 is)") }
    static func malformed(_ why: String) -> DeltaError { DeltaError(kind: .malformed, description: "malformed delta: \(why)") }
    static let truncated = DeltaError(kind: .truncated, description: "the delta ends before its END instruction")
    static func baseMismatch(_ why: String) -> DeltaError { DeltaError(kind: .baseMismatch, description: "the delta is not for this base: \(why)") }
    static func resultMismatch(_ why: String) -> DeltaError { DeltaError(kind: .resultMismatch, description: "the delta's result is not its target: \(why)") }
}
