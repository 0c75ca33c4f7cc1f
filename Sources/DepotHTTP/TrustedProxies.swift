#if canImport(Glibc)
import Glibc
#endif

/// The proxies whose `X-Forwarded-For` the server believes (`depot serve --trusted-proxy`): an
/// edge in front of the origin connects from its own address, so without them every client of
/// the edge is one address to the origin's per-address limits and its access log.
///
/// A request from a trusted peer is attributed to the right-most address of its
/// `X-Forwarded-For` that is not itself trusted (each proxy appends the address it saw, so that
/// is the first one no trusted hop vouches was a proxy: the ones left of it are what the client
/// chose to send); all of them trusted, the left-most. Garbage where an address should be stops
/// the walk at the last trusted hop. A request from any other peer is the peer, whatever it sends.
public struct TrustedProxies: Sendable, Hashable {
    /// The networks, as given.
    public let networks: [IPNetwork]

    /// None: every request is its peer.
    public static let none = TrustedProxies([])

    public init(_ networks: [IPNetwork]) { self.networks = networks }

    public var isEmpty: Bool { networks.isEmpty }

    /// Whether `address` is one of the proxies.
    public func contains(_ address: IPAddress) -> Bool { networks.contains { $0.contains(address) } }

    /// The client a request from `peer` with these `X-Forwarded-For` values speaks for.
    public func client(peer: IPAddress, forwardedFor values: [String]) -> IPAddress {
        guard !networks.isEmpty, contains(peer), !values.isEmpty else { return peer }
        var client = peer
        var hops = 0
        // Fields in order, each a comma-separated list: right to left is last field first.
        for value in values.reversed() {
            for entry in value.utf8.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false).reversed() {
                hops += 1
                guard hops <= 64, let address = IPAddress(forwardedEntry: Substring(entry)) else { return client }
                client = address
                if !contains(address) { return client }
            }
        }
        return client
    }
}

/// An IPv4 or IPv6 address, IPv4 kept as its IPv4-mapped IPv6 form (`::ffff:a.b.c.d`) so that one
/// comparison covers both, whichever family the listener accepted it on.
public struct IPAddress: Sendable, Hashable, CustomStringConvertible {
    let high: UInt64
    let low: UInt64

    init(high: UInt64, low: UInt64) { (self.high, self.low) = (high, low) }

    /// IPv4 (network byte order, as in `in_addr`).
    init(v4 bytes: UInt32) { (high, low) = (0, 0xffff_0000_0000 | UInt64(UInt32(bigEndian: bytes))) }

    /// IPv6 (16 bytes, network order).
    init(v6 bytes: UnsafeRawBufferPointer) {
        var high: UInt64 = 0, low: UInt64 = 0
        for index in 0..<8 { high = high << 8 | UInt64(bytes[index]) }
        for index in 8..<16 { low = low << 8 | UInt64(bytes[index]) }
        (self.high, self.low) = (high, low)
    }

    /// An address literal (`192.0.2.1`, `2001:db8::1`, `::ffff:192.0.2.1`); nil for anything else.
    public init?(_ text: some StringProtocol) {
        let text = String(text)
        // (A NUL would end the C string early: "192.0.2.1\0junk" is not an address.)
        guard !text.utf8.contains(0) else { return nil }
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            self.init(v4: v4.s_addr)
            return
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, text, &v6) == 1 else { return nil }
        self = withUnsafeBytes(of: &v6) { IPAddress(v6: $0) }
    }

    /// One entry of `X-Forwarded-For`, spaces around it allowed: an address, an IPv4 address with
    /// a port, or a bracketed IPv6 address with or without one (as some proxies write them).
    init?(forwardedEntry entry: Substring) {
        var text = entry.drop { $0 == " " || $0 == "\t" }
        while let last = text.last, last == " " || last == "\t" { text = text.dropLast() }
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            let rest = text[text.index(after: close)...]
            guard rest.isEmpty || (rest.hasPrefix(":") && rest.dropFirst().allSatisfy(\.isASCIIDigit) && rest.count > 1) else { return nil }
            text = text[text.index(after: text.startIndex)..<close]
            guard text.contains(":") else { return nil }
        } else if let colon = text.firstIndex(of: ":"), text[text.index(after: colon)...].allSatisfy(\.isASCIIDigit), text.contains(".") {
            text = text[..<colon]
        }
        guard !text.isEmpty, text.utf8.count <= 45 else { return nil }
        self.init(text)
    }

    /// Whether it is an IPv4 address (or IPv4-mapped).
    public var isIPv4: Bool { high == 0 && low >> 32 == 0xffff }

    /// Dotted for IPv4, RFC 5952 text for IPv6 (`inet_ntop`'s).
    public var description: String {
        if isIPv4 {
            let value = UInt32(truncatingIfNeeded: low)
            return "\(value >> 24).\(value >> 16 & 0xff).\(value >> 8 & 0xff).\(value & 0xff)"
        }
        var bytes = [UInt8](repeating: 0, count: 16)
        for index in 0..<8 {
            bytes[index] = UInt8(truncatingIfNeeded: high >> (56 - 8 * UInt64(index)))
            bytes[8 + index] = UInt8(truncatingIfNeeded: low >> (56 - 8 * UInt64(index)))
        }
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        guard inet_ntop(AF_INET6, bytes, &buffer, socklen_t(buffer.count)) != nil else { return "::" }
        return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }
}

/// An address and a prefix length (`10.0.0.0/8`, `2001:db8::/32`, `192.0.2.1` for one address).
public struct IPNetwork: Sendable, Hashable, CustomStringConvertible {
    let address: IPAddress
    /// Bits of the IPv6 (or IPv4-mapped) form: an IPv4 /8 is 104.
    let bits: Int
    /// The prefix length as written: an IPv4 /8 is 8.
    public var prefixLength: Int { address.isIPv4 && bits >= 96 ? bits - 96 : bits }

    /// Parses `ADDRESS` or `ADDRESS/BITS`; nil for anything else (host bits may be set, and are ignored).
    public init?(_ text: String) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count <= 2, let address = IPAddress(parts[0]) else { return nil }
        let limit = address.isIPv4 && !parts[0].contains(":") ? 32 : 128
        var bits = limit
        if parts.count == 2 {
            guard !parts[1].isEmpty, parts[1].allSatisfy(\.isASCIIDigit), parts[1].count <= 3, let value = Int(parts[1]), value <= limit else { return nil }
            bits = value
        }
        self.address = address
        self.bits = limit == 32 ? 96 + bits : bits
    }

    public func contains(_ other: IPAddress) -> Bool {
        let highMask: UInt64 = bits >= 64 ? .max : bits == 0 ? 0 : .max << (64 - bits)
        let lowMask: UInt64 = bits <= 64 ? 0 : bits >= 128 ? .max : .max << (128 - bits)
        return (address.high ^ other.high) & highMask == 0 && (address.low ^ other.low) & lowMask == 0
    }

    public var description: String { "\(address)/\(address.isIPv4 && bits >= 96 ? bits - 96 : bits)" }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
