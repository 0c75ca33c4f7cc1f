// Fuzz target: the request-target parser and validator (DepotHTTP/RequestTarget.swift), compiled
// with it. Whatever the input, it throws a Failure or returns segments none of which is empty,
// "." or "..", or holds a slash, a backslash, a NUL or another control character.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTarget(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let raw = String(decoding: UnsafeBufferPointer(start: data, count: count), as: UTF8.self)
    guard let target = try? RequestTarget.parse(raw) else { return 0 }
    for segment in target.segments {
        precondition(!segment.isEmpty && segment != "." && segment != "..", "segment \(segment.debugDescription) from \(raw.debugDescription)")
        precondition(!segment.unicodeScalars.contains { $0 == "/" || $0 == "\\" || $0.value < 0x20 || $0.value == 0x7f },
                     "segment \(segment.debugDescription) from \(raw.debugDescription)")
    }
    return 0
}
