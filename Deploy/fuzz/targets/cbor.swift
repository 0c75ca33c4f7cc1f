// Fuzz target: the CBOR decoder of App Attest's objects (DepotServer/Attest/CBOR.swift), compiled
// with it. Whatever the input, decoding ends (no trap, no read past the end); an item decoded
// whole encodes to bytes that decode to the same item, and a prefix decode never claims more
// bytes than it was given.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCBOR(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: count))
    if let (value, used) = try? CBORDecoder.decodePrefix(bytes) {
        precondition(used > 0 && used <= bytes.count, "a prefix of \(used) bytes out of \(bytes.count)")
        let again = try? CBORDecoder.decode(value.encoded)
        precondition(again == value, "the re-encoded item decodes differently")
        precondition((try? CBORDecoder.decode(Array(bytes.prefix(used)))) == value, "the item's own bytes decode differently")
    }
    return 0
}
