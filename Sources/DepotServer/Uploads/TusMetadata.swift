import Foundation

/// tus `Upload-Metadata`: `key base64,key base64,key` (a key alone has the empty value). Parsed
/// here on its own, with nothing but Foundation, so that `Deploy/fuzz` can attack it.
///
/// Split over the header's bytes: split by `Character`, a `,` followed by a combining mark is
/// one grapheme and two pairs ran together (found by the fuzz target).
enum TusMetadata {
    enum Failure: Error, Equatable, CustomStringConvertible {
        case notBase64(key: String)
        case duplicate(key: String)

        var description: String {
            switch self {
            case .notBase64(let key): "Upload-Metadata: the value of \(key) is not base64 of UTF-8"
            case .duplicate(let key): "Upload-Metadata: \(key) appears twice"
            }
        }
    }

    static func parse(_ text: String) throws(Failure) -> [String: String] {
        var out: [String: String] = [:]
        for pair in Array(text.utf8).split(separator: UInt8(ascii: ",")) {
            let item = trimmed(pair)
            let space = item.firstIndex(of: UInt8(ascii: " ")) ?? item.endIndex
            let key = String(decoding: item[item.startIndex..<space], as: UTF8.self)
            guard !key.isEmpty else { continue }
            var value = ""
            if space < item.endIndex {
                let encoded = String(decoding: trimmed(item[(space + 1)...]), as: UTF8.self)
                guard let data = Data(base64Encoded: encoded), let text = String(data: data, encoding: .utf8) else {
                    throw .notBase64(key: key)
                }
                value = text
            }
            guard out[key] == nil else { throw .duplicate(key: key) }
            out[key] = value
        }
        return out
    }

    /// The header value for `pairs` (keys without spaces or commas), in key order.
    static func encode(_ pairs: [String: String]) -> String {
        pairs.sorted { $0.key < $1.key }.map { $0.value.isEmpty ? $0.key : "\($0.key) \(Data($0.value.utf8).base64EncodedString())" }.joined(separator: ",")
    }

    private static func trimmed(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var bytes = bytes
        while let first = bytes.first, first == 0x20 || first == 0x09 { bytes.removeFirst() }
        while let last = bytes.last, last == 0x20 || last == 0x09 { bytes.removeLast() }
        return bytes
    }
}
