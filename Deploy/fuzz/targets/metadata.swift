// Fuzz target: tus Upload-Metadata (DepotServer/Uploads/TusMetadata.swift), compiled with it.
// Whatever the header, parsing refuses it or gives keys without spaces or commas, and what it
// gives encodes back to a header that parses to the same pairs.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMetadata(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let header = String(decoding: UnsafeBufferPointer(start: data, count: count), as: UTF8.self)
    guard let pairs = try? TusMetadata.parse(header) else { return 0 }
    for key in pairs.keys {
        precondition(!key.isEmpty && !key.contains(" ") && !key.contains(","), "key \(key.debugDescription) from \(header.debugDescription)")
    }
    let again = try? TusMetadata.parse(TusMetadata.encode(pairs))
    precondition(again == pairs, "\(pairs) does not survive encoding (from \(header.debugDescription))")
    return 0
}
