/// HMAC-SHA256 (RFC 2104) over ``SHA256Hasher``, so it is the same on both backends.
public enum HMACSHA256 {
    /// The 32-byte authentication code of `message` under `key`.
    public static func authenticationCode(_ message: some Sequence<UInt8>, key: [UInt8]) -> [UInt8] {
        var block = key.count > 64 ? SHA256Hasher.hash(key) : key
        block += [UInt8](repeating: 0, count: 64 - block.count)
        let inner = SHA256Hasher()
        inner.update(block.map { $0 ^ 0x36 })
        inner.update(message)
        let outer = SHA256Hasher()
        outer.update(block.map { $0 ^ 0x5c })
        outer.update(inner.finalize())
        return outer.finalize()
    }
}
