// Fuzz target: the Range header parser (DepotServer/HTTPSupport/ByteRange.swift), compiled with it.
// Input: 8 bytes of representation size, then the header value. Whatever the input, the answer
// is whole, unsatisfiable, or one range inside the representation.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRange(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: count)
    guard bytes.count >= 8 else { return 0 }
    let size = bytes.prefix(8).reduce(Int64(0)) { $0 << 8 | Int64($1) } & Int64.max
    let header = String(decoding: bytes.dropFirst(8), as: UTF8.self)
    switch RangeRequest.parse(header, size: size) {
    case .whole, .unsatisfiable: break
    case .bytes(let first, let last):
        precondition(first >= 0 && first <= last && last < size, "range \(first)-\(last) outside \(size) bytes for \(header.debugDescription)")
    }
    return 0
}
