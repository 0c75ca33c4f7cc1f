// Fuzz target: the pack header parser and the segment decryptor (DepotCore), compiled with
// DepotCore. First byte even: the rest is a container, which must be refused with a PackError
// (nothing here has a pack sealed under the fuzz key). Odd: a real pack of up to 300 bytes of
// the input, sealed here in 64-byte segments, is damaged as the rest of the input says (flip a
// bit, cut, duplicate, delete, at positions it gives); decrypting it must give back exactly the
// plaintext when the bytes are intact and fail otherwise: never other bytes.
let fuzzKeyID = "k0000f022"
let fuzzMaster = [UInt8](repeating: 7, count: 32)
let fuzzRing = try! KeyRing([fuzzKeyID: fuzzMaster])

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPack(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: count))
    guard let mode = bytes.first, bytes.count >= 2 else { return 0 }
    if mode & 1 == 0 {
        let rest = Array(bytes.dropFirst())
        _ = try? PackHeader.parse(rest)
        do {
            _ = try PackDecryptor.decrypt(rest, keyRing: fuzzRing)
            preconditionFailure("bytes nobody sealed decrypted")
        } catch is PackError {
        } catch {
            preconditionFailure("a refusal that is not a PackError: \(error)")
        }
        return 0
    }
    let length = min(Int(bytes[1]) * 2, 300, bytes.count - 2)
    let plaintext = Array(bytes[2..<(2 + length)])
    let operations = Array(bytes[(2 + length)...])
    let header = PackHeader(keyID: fuzzKeyID, segmentSize: 64, salt: [UInt8](repeating: 1, count: PackHeader.saltSize),
                            noncePrefix: [UInt8](repeating: 2, count: PackHeader.noncePrefixSize))
    let pack = try! PackEncryptor.encrypt(plaintext, header: header, masterKey: fuzzMaster)
    var damaged = pack
    var index = 0
    while index + 2 < operations.count, !damaged.isEmpty {
        let op = operations[index], at = (Int(operations[index + 1]) << 8 | Int(operations[index + 2])) % damaged.count
        switch op % 4 {
        case 0: damaged[at] ^= 1 << (op >> 5)
        case 1: damaged.removeSubrange(at...)
        case 2: damaged.insert(contentsOf: damaged[at..<min(damaged.count, at + 16)], at: at)
        default: damaged.remove(at: at)
        }
        index += 3
    }
    do {
        let result = try PackDecryptor.decrypt(damaged, keyRing: fuzzRing)
        precondition(damaged == pack, "a damaged pack decrypted (\(pack.count) -> \(damaged.count) bytes)")
        precondition(result == plaintext, "an intact pack decrypted to other bytes")
    } catch is PackError {
        precondition(damaged != pack, "an intact pack was refused")
    } catch {
        preconditionFailure("a refusal that is not a PackError: \(error)")
    }
    return 0
}
