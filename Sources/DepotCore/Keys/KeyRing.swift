import Foundation

/// Pack master keys by key id: what an app needs to decrypt its packs.
///
/// JSON form (a file, or the `DEPOT_PACK_KEYS` environment variable):
/// `{"k1a2b3c4": "<32 bytes, base64>", …}`.
public struct KeyRing: Sendable, Hashable {
    /// The keys, 32 bytes each.
    public private(set) var keys: [String: [UInt8]]

    /// A key ring from raw keys; each must be 32 bytes.
    public init(_ keys: [String: [UInt8]] = [:]) throws(KeyError) {
        for (id, key) in keys {
            guard KeyRing.isValidKeyID(id) else { throw .invalidKeyID(id) }
            guard key.count == 32 else { throw .invalidKey(id) }
        }
        self.keys = keys
    }

    /// The master key with this id.
    public subscript(id: String) -> [UInt8]? { keys[id] }

    /// Adds or replaces a key.
    public mutating func insert(_ key: [UInt8], id: String) throws(KeyError) {
        guard KeyRing.isValidKeyID(id) else { throw .invalidKeyID(id) }
        guard key.count == 32 else { throw .invalidKey(id) }
        keys[id] = key
    }

    /// Parses the JSON form.
    public init(json: [UInt8]) throws(KeyError) {
        guard let object = try? JSONDecoder().decode([String: String].self, from: Data(json)) else {
            throw .malformed("a key ring is a JSON object of key id → base64 key")
        }
        var keys: [String: [UInt8]] = [:]
        for (id, text) in object {
            guard let data = Data(base64Encoded: text) else { throw .invalidKey(id) }
            keys[id] = Array(data)
        }
        try self.init(keys)
    }

    /// Loads the JSON form from a file.
    public init(contentsOf path: String) throws {
        try self.init(json: FileSystem.readFile(path, limit: 1 << 20))
    }

    /// Loads the JSON form from an environment variable (default `DEPOT_PACK_KEYS`).
    public init(environment name: String = "DEPOT_PACK_KEYS") throws(KeyError) {
        guard let value = ProcessInfo.processInfo.environment[name] else { throw .missing(name) }
        try self.init(json: Array(value.utf8))
    }

    /// The JSON form, keys sorted.
    public var json: [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        return Array(try! encoder.encode(keys.mapValues { Data($0).base64EncodedString() }))
    }

    /// A fresh random key id: `k` and 8 hex digits.
    public static func newKeyID() -> String { "k" + Hex.encode(SecureRandom.bytes(4)) }

    /// Key ids are 1–64 characters of `A-Z a-z 0-9 . -` (they travel in pack headers and manifests).
    public static func isValidKeyID(_ id: String) -> Bool {
        let utf8 = id.utf8
        return (1...64).contains(utf8.count)
            && utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || $0 == 45 || $0 == 46 }
    }
}

/// An error loading or using keys.
public struct KeyError: Error, Hashable, Sendable, CustomStringConvertible {
    public let description: String
    private init(_ description: String) { self.description = description }
    /// A key id outside the allowed characters or length.
    public static func invalidKeyID(_ id: String) -> KeyError { KeyError("invalid key id \"\(id.prefix(80))\"") }
    /// A key that is not 32 bytes of base64.
    public static func invalidKey(_ id: String) -> KeyError { KeyError("key \"\(id.prefix(80))\" is not 32 bytes of base64") }
    /// The JSON could not be read.
    public static func malformed(_ why: String) -> KeyError { KeyError("malformed key file: \(why)") }
    /// The environment variable is not set.
    public static func missing(_ name: String) -> KeyError { KeyError("environment variable \(name) is not set") }
}
