// Fuzz target: the delta decoder (DepotCore/Delta), compiled with DepotCore's sources. Input: two
// bytes of base length n (the base is the first n bytes after them, the rest is the patch,
// preceded by a valid header for that base when the first input byte is odd, so that the fuzzer
// reaches the instructions). Whatever the input: no trap, and the decoder either refuses or
// produces exactly the header's target size with the header's SHA-256.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDelta(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: count))
    guard bytes.count >= 2 else { return 0 }
    let length = min(Int(bytes[1]) | Int(bytes[0] & 0x0f) << 8, bytes.count - 2)
    let base = Array(bytes[2..<(2 + length)])
    var patch = Array(bytes[(2 + length)...])
    if bytes[0] & 0x80 != 0 {
        // A header for this base and a made-up target: size from the first patch byte.
        let size = Int64(patch.first ?? 0)
        patch = DeltaFormat.Header(baseSize: Int64(base.count), baseSHA256: SHA256Hasher.hash(base), targetSize: size, targetSHA256: [UInt8](repeating: 0, count: 32)).bytes + patch.dropFirst()
    }
    var produced: [UInt8] = []
    do {
        let header = try DeltaDecoder.apply(patch: MemorySource(patch), base: MemorySource(base)) { produced += $0 }
        precondition(Int64(produced.count) == header.targetSize && SHA256Hasher.hash(produced) == header.targetSHA256)
    } catch {
        precondition(error is DeltaError || error is SystemError)
    }
    return 0
}
