import Foundation

/// A key in a PKCS#11 token named by an RFC 7512 URI:
/// `pkcs11:token=<label>;object=<label>;id=<%xx bytes>?module-path=<.so>&pin-source=file:<path>`.
///
/// Path attributes (`;`-separated) select the token (`token`, `serial`, `manufacturer`, `model`)
/// and the key (`object`, its label; `id`, its CKA_ID); `type`, when given, must be `private`.
/// Query attributes (`&`-separated): `module-path` (the token's PKCS#11 module; else
/// `DEPOT_PKCS11_MODULE`), `pin-value` or `pin-source` (`file:` a file holding the PIN; else
/// `DEPOT_PKCS11_PIN`, else no login). Values are percent-decoded; an attribute twice, or one
/// this reader does not know, is refused rather than ignored (RFC 7512 §2.3 lets a consumer
/// refuse what it does not understand: a selector silently dropped could pick another key).
public struct PKCS11URI: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    public var token: String?
    public var serial: String?
    public var manufacturer: String?
    public var model: String?
    public var object: String?
    public var id: [UInt8]?
    public var modulePath: String?
    public var pinValue: String?
    public var pinSource: String?

    public static func isURI(_ text: String) -> Bool { text.hasPrefix("pkcs11:") }

    public init(_ text: String) throws(PKCS11Error) {
        guard Self.isURI(text) else { throw PKCS11Error("\(text.prefix(80)) is not a pkcs11: URI") }
        let body = text.dropFirst("pkcs11:".count)
        let parts = body.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        var seen = Set<String>()
        func pairs(_ text: Substring, separator: Character) throws(PKCS11Error) -> [(String, [UInt8])] {
            var out: [(String, [UInt8])] = []
            for item in text.split(separator: separator) where !item.isEmpty {
                let pair = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                // (Only the name is echoed: the value may be the PIN.)
                guard pair.count == 2, let value = Self.percentDecoded(pair[1]) else { throw PKCS11Error("the pkcs11: URI's attribute \(pair[0].prefix(40)) is not name=<percent-encoded value>") }
                let name = String(pair[0])
                guard seen.insert(name).inserted else { throw PKCS11Error("the pkcs11: URI gives \(name) twice") }
                out.append((name, value))
            }
            return out
        }
        func utf8(_ bytes: [UInt8], _ name: String) throws(PKCS11Error) -> String {
            guard let string = String(validating: bytes, as: UTF8.self) else { throw PKCS11Error("the pkcs11: URI's \(name) is not UTF-8") }
            return string
        }
        for (name, value) in try pairs(parts[0], separator: ";") {
            switch name {
            case "token": token = try utf8(value, name)
            case "serial": serial = try utf8(value, name)
            case "manufacturer": manufacturer = try utf8(value, name)
            case "model": model = try utf8(value, name)
            case "object": object = try utf8(value, name)
            case "id": id = value
            case "type":
                guard try utf8(value, name) == "private" else { throw PKCS11Error("the pkcs11: URI names a key of type \(try utf8(value, name)); give the private key (type=private, or no type)") }
            default: throw PKCS11Error("the pkcs11: URI's path attribute \(name) is not one depot reads (token, serial, manufacturer, model, object, id, type)")
            }
        }
        if parts.count == 2 {
            for (name, value) in try pairs(parts[1], separator: "&") {
                switch name {
                case "module-path": modulePath = try utf8(value, name)
                case "pin-value": pinValue = try utf8(value, name)
                case "pin-source": pinSource = try utf8(value, name)
                default: throw PKCS11Error("the pkcs11: URI's query attribute \(name) is not one depot reads (module-path, pin-value, pin-source)")
                }
            }
        }
        guard object != nil || id != nil else { throw PKCS11Error("the pkcs11: URI names no key: give object=<label> or id=<%xx bytes>") }
    }

    /// The module to load: `module-path`, else `DEPOT_PKCS11_MODULE`.
    public func module(environment: [String: String] = ProcessInfo.processInfo.environment) throws(PKCS11Error) -> String {
        guard let path = modulePath ?? environment["DEPOT_PKCS11_MODULE"], !path.isEmpty else {
            throw PKCS11Error("no PKCS#11 module: add ?module-path=/path/to/module.so to the URI, or set DEPOT_PKCS11_MODULE")
        }
        return path
    }

    /// The PIN: `pin-value`, else the first line of `pin-source`'s file, else `DEPOT_PKCS11_PIN`; nil: no login.
    public func pin(environment: [String: String] = ProcessInfo.processInfo.environment) throws(PKCS11Error) -> String? {
        if let pinValue { return pinValue }
        if let pinSource {
            let path = pinSource.hasPrefix("file:") ? String(pinSource.dropFirst("file:".count)) : pinSource
            guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
                throw PKCS11Error("the PIN file \(path) cannot be read")
            }
            return String(text.prefix { $0 != "\n" && $0 != "\r" })
        }
        return environment["DEPOT_PKCS11_PIN"]
    }

    public var debugDescription: String { description }

    /// What the URI names, for messages (never the PIN).
    public var description: String {
        var parts: [String] = []
        if let token { parts.append("token \"\(token)\"") }
        if let object { parts.append("object \"\(object)\"") }
        if let id { parts.append("id \(id.map { String(format: "%02x", $0) }.joined())") }
        return parts.joined(separator: ", ")
    }

    static func percentDecoded(_ text: Substring) -> [UInt8]? {
        var out: [UInt8] = []
        var bytes = Array(text.utf8)[...]
        while let byte = bytes.popFirst() {
            guard byte == UInt8(ascii: "%") else {
                out.append(byte)
                continue
            }
            let hex = Array(bytes.prefix(2))
            guard hex.count == 2, hex.allSatisfy({ UInt8(ascii: "0")...UInt8(ascii: "9") ~= $0 || UInt8(ascii: "a")...UInt8(ascii: "f") ~= ($0 | 0x20) }),
                  let value = UInt8(String(decoding: hex, as: UTF8.self), radix: 16) else { return nil }
            out.append(value)
            bytes = bytes.dropFirst(2)
        }
        return out
    }
}

/// Why a PKCS#11 key could not be used.
public struct PKCS11Error: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}
